package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// codeSpan matches Markdown code spans and fenced blocks' lines; commands
// are looked for only in code, never in prose.
var (
	fenced   = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	command  = regexp.MustCompile(`slacklinectl((?:[ \t]+[^ \t\n|;&)#]+)*)`)
)

// TestDocsNameExistingCommands: every slacklinectl command that README.md,
// docs/*.md and the alerting rules show in code exists in the command
// tree, with the flags it is shown with.
func TestDocsNameExistingCommands(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := filepath.Glob("../../deploy/prometheus/*.yaml")
	files = append(append(files, "../../README.md"), rules...)
	root := newRootCommand(&bytes.Buffer{})
	checked := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var code []string
		for _, m := range fenced.FindAllStringSubmatch(string(raw), -1) {
			code = append(code, strings.Split(strings.ReplaceAll(m[1], "\\\n", " "), "\n")...)
		}
		for _, m := range codeSpan.FindAllStringSubmatch(fenced.ReplaceAllString(string(raw), ""), -1) {
			code = append(code, m[1])
		}
		for _, line := range code {
			for _, m := range command.FindAllStringSubmatch(line, -1) {
				if err := checkCommand(root, strings.Fields(m[1])); err != "" {
					t.Errorf("%s: `slacklinectl%s`: %s", filepath.Base(file), m[1], err)
				}
				checked++
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d commands: the documents were not read", checked)
	}
}

// checkCommand walks words down the command tree and checks the flags
// given; it returns what is wrong, or "".
func checkCommand(root *cobra.Command, words []string) string {
	cmd := root
	i := 0
	for ; i < len(words); i++ {
		w := words[i]
		if strings.HasPrefix(w, "-") {
			break
		}
		next := subcommand(cmd, w)
		if next == nil {
			break
		}
		cmd = next
	}
	if cmd == root && i < len(words) && !strings.HasPrefix(words[i], "-") {
		return "no command " + words[i]
	}
	if cmd.HasSubCommands() && i < len(words) && !strings.HasPrefix(words[i], "-") && !strings.ContainsAny(words[i], "<[") {
		return cmd.CommandPath() + " has no subcommand " + words[i]
	}
	for _, w := range words[i:] {
		if !strings.HasPrefix(w, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		if name != "help" && lookupFlag(cmd, name) == nil { // cobra adds --help when it runs
			return cmd.CommandPath() + " has no flag --" + name
		}
	}
	return ""
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	if f := cmd.InheritedFlags().Lookup(name); f != nil {
		return f
	}
	return cmd.Root().PersistentFlags().Lookup(name)
}

// TestCheckCommand: the checker itself finds what does not exist.
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	root := newRootCommand(&bytes.Buffer{})
	for _, tc := range []struct {
		words string
		bad   bool
	}{
		{"get agents -o wide", false},
		{"get features --agent HOST", false},
		{"features --hostname HOST", true},
		{"get pods", true},
		{"top --agent x -w 1s", false},
		{"top --no-such", true},
		{"logs batch-0 --stderr", false},
		{"config set-context local --coordinator x --use", false},
	} {
		if got := checkCommand(root, strings.Fields(tc.words)); (got != "") != tc.bad {
			t.Errorf("checkCommand(%q) = %q, want bad %v", tc.words, got, tc.bad)
		}
	}
}
