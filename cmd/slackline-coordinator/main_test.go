package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFile: the coordinator takes its settings from --config, the
// command line overriding the file, and refuses a file with an unknown
// key. The runs stop at the listener check (no TLS, no --authz), before
// anything is opened, and say which address they would have served.
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
	good := write("good.yaml", "listen: 127.0.0.1:7070\nwork-dir: "+dir+"\nagent-timeout: 1m\nmin-allocatable: cpus:0.1;mem:64\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"the file's listen", []string{"--config", good}, "refusing to listen on 127.0.0.1:7070"},
		{"the command line's listen", []string{"--config", good, "--listen", "127.0.0.1:7071"}, "refusing to listen on 127.0.0.1:7071"},
		{"unknown key", []string{"--config", write("typo.yaml", "agent-timout: 1m\n")}, "typo.yaml:1: agent-timout: unknown setting (no such flag); did you mean agent-timeout?"},
		{"wrong type", []string{"--config", write("type.yaml", "offer-timeout: soon\n")}, "offer-timeout: invalid value \"soon\": want a duration"},
		{"a value the daemon checks", []string{"--config", write("res.yaml", "min-allocatable: cpus:x\n")}, "--min-allocatable"},
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
}

// TestExampleConfig: the example config file of scripts/systemd sets only
// settings that exist, with values the coordinator accepts: the run gets
// as far as reading the credentials it names (absent here).
func TestExampleConfig(t *testing.T) {
	err := run([]string{"--config", "../../scripts/systemd/coordinator.yaml"})
	if err == nil || strings.Contains(err.Error(), "--config") || !strings.Contains(err.Error(), "/etc/slackline/credentials/") {
		t.Errorf("run with the example config: %v, want it to reach the credentials", err)
	}
}
