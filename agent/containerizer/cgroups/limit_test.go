package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSetCPULimit(t *testing.T) {
	for _, mode := range []Mode{ModeV2, ModeHybrid} {
		t.Run(string(mode), func(t *testing.T) {
			root := t.TempDir()
			l := Layout{Mode: mode, Mountpoint: root, Unified: filepath.Join(root, "unified"), CPU: filepath.Join(root, "cpu")}
			rel := "slackline/revocable"
			for _, dir := range []string{filepath.Join(l.Unified, rel), filepath.Join(l.CPU, rel)} {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.SetCPULimit(rel, 0.5); err != nil {
				t.Fatal(err)
			}
			if got, err := l.CPULimit(rel); err != nil || got != 0.5 {
				t.Fatalf("limit after setting 0.5 = %v, %v", got, err)
			}
			if mode == ModeV2 {
				if b, _ := os.ReadFile(filepath.Join(l.Unified, rel, "cpu.max")); string(b) != "50000 100000" {
					t.Fatalf("cpu.max = %q", b)
				}
			} else if b, _ := os.ReadFile(filepath.Join(l.CPU, rel, "cpu.cfs_quota_us")); string(b) != "50000" {
				t.Fatalf("cpu.cfs_quota_us = %q", b)
			}
			if err := l.SetCPULimit(rel, 0); err != nil {
				t.Fatal(err)
			}
			if got, err := l.CPULimit(rel); err != nil || got != 0 {
				t.Fatalf("limit after removing = %v, %v", got, err)
			}
		})
	}
}
