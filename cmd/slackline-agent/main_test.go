package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slackline/slackline/agent"
	"github.com/slackline/slackline/internal/cliconfig"
)

// TestConfigFile: the agent takes its settings from --config, the command
// line overriding the file, and refuses a file with an unknown key or a bad
// value, naming it. The runs stop at validation (no TLS, no --authz),
// before anything touches the host.
func TestConfigFile(t *testing.T) {
	t.Setenv("SLACKLINE_INSECURE", "")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("agent.yaml", "listen: 127.0.0.1:7070\nwork-dir: "+dir+"\nqos-controller: [interference, memory]\nprotect-cgroup: [a.slice, b.slice]\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"the file's listen", []string{"--config", good}, "refusing to listen on 127.0.0.1:7070"},
		{"the command line's listen", []string{"--config", good, "--listen", "127.0.0.1:7071"}, "refusing to listen on 127.0.0.1:7071"},
		{"unknown key", []string{"--config", write("typo.yaml", "monitor-intervall: 1s\n")}, "typo.yaml:1: monitor-intervall: unknown setting (no such flag); did you mean monitor-interval?"},
		{"bad value", []string{"--config", write("bad.yaml", "task-isolation: chroot\n")}, "task-isolation: invalid value \"chroot\""},
		{"validation", []string{"--config", write("watermark.yaml", "gc-disk-watermark: 2\ninsecure: true\n")}, "--gc-disk-watermark: must be in (0, 1], got 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want %q", tc.args, err, tc.want)
			}
		})
	}
	if err := run([]string{"--version"}); err != nil {
		t.Errorf("--version: %v", err)
	}

	// SLACKLINE_INSECURE=1 is --insecure's default: the command line and
	// the file override it.
	t.Setenv("SLACKLINE_INSECURE", "1")
	off := write("secure.yaml", "insecure: false\nlisten: 127.0.0.1:7073\n")
	for _, args := range [][]string{{"--insecure=false", "--listen", "127.0.0.1:7073"}, {"--config", off}} {
		if err := run(args); err == nil || !strings.Contains(err.Error(), "refusing to listen on 127.0.0.1:7073") {
			t.Errorf("run(%q) with %s=1: %v, want the listener refused", args, "SLACKLINE_INSECURE", err)
		}
	}
	t.Setenv("SLACKLINE_INSECURE", "maybe")
	if err := run([]string{"--version"}); err == nil || !strings.Contains(err.Error(), "SLACKLINE_INSECURE") {
		t.Errorf("SLACKLINE_INSECURE=maybe: %v, want it refused", err)
	}
}

// TestExampleConfig: the example config file of scripts/systemd sets only
// settings that exist, with values the agent accepts.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	var o agent.Options
	fs := flag.NewFlagSet("slackline-agent", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := cliconfig.ApplyFile(fs, "../../scripts/systemd/agent.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Listen != "10.0.0.5:5051" || len(o.ProtectCgroups) != 1 || len(o.QoSControllers) != 3 || o.Attributes["zone"] != "z2" {
		t.Errorf("options from the example: %+v", o)
	}
}
