package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPidsV2 checks pids.max on a v2 tree: written when the root's parent
// delegates pids, and not used (nothing written, controller not handed
// down) when it does not.
func TestPidsV2(t *testing.T) {
	for _, tt := range []struct {
		name      string
		delegated string // the mount's cgroup.subtree_control
		want      bool
	}{
		{"delegated", "cpu memory pids\n", true},
		{"not delegated", "cpu memory\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mnt := writeTree(t, map[string]string{
				"cgroup.controllers":     "cpu memory pids\n",
				"cgroup.subtree_control": tt.delegated,
			})
			l, err := Detect(mnt)
			if err != nil {
				t.Fatal(err)
			}
			l = l.WithUsablePids("slackline")
			if err := l.SetupRoot("slackline"); err != nil {
				t.Fatal(err)
			}
			wantControl := "+cpu +memory"
			if tt.want {
				wantControl += " +pids"
			}
			if got := readFile(t, filepath.Join(mnt, "slackline/cgroup.subtree_control")); got != wantControl {
				t.Errorf("subtree_control %q, want %q", got, wantControl)
			}
			p, err := l.Create(ContainerRel("slackline", Guaranteed, "c1"), Limits{CPUs: 1, PidsMax: 64})
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(filepath.Join(p.Unified, "pids.max"))
			if written := statErr == nil; written != tt.want {
				t.Fatalf("pids.max written: %v, want %v", written, tt.want)
			}
			if tt.want {
				if got := readFile(t, filepath.Join(p.Unified, "pids.max")); got != "64" {
					t.Errorf("pids.max %q, want 64", got)
				}
			}
		})
	}
}
