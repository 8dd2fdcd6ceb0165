package cgroups

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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
			if err := l.SetCPULimit(rel, 0.5, 0); err != nil {
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
			if err := l.SetCPULimit(rel, 0, 0); err != nil {
				t.Fatal(err)
			}
			if got, err := l.CPULimit(rel); err != nil || got != 0 {
				t.Fatalf("limit after removing = %v, %v", got, err)
			}
		})
	}
}

func TestSetCPULimitPeriod(t *testing.T) {
	tests := []struct {
		cpus       float64
		period     time.Duration
		wantQuota  string
		wantPeriod string
	}{
		{0.5, 10 * time.Millisecond, "5000", "10000"},
		{0.05, 10 * time.Millisecond, "1000", "10000"}, // the kernel's 1 ms minimum quota
		{1.5, 100 * time.Microsecond, "1500", "1000"},  // period clamped to 1 ms
		{0.25, 0, "25000", "100000"},                   // the default period
	}
	for _, tt := range tests {
		root := t.TempDir()
		l := Layout{Mode: ModeHybrid, Mountpoint: root, Unified: filepath.Join(root, "unified"), CPU: filepath.Join(root, "cpu")}
		rel := "slackline/revocable"
		if err := os.MkdirAll(filepath.Join(l.CPU, rel), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := l.SetCPULimit(rel, tt.cpus, tt.period); err != nil {
			t.Fatal(err)
		}
		q, _ := os.ReadFile(filepath.Join(l.CPU, rel, "cpu.cfs_quota_us"))
		p, _ := os.ReadFile(filepath.Join(l.CPU, rel, "cpu.cfs_period_us"))
		if string(q) != tt.wantQuota || string(p) != tt.wantPeriod {
			t.Errorf("SetCPULimit(%v, %v): quota %s period %s, want %s %s", tt.cpus, tt.period, q, p, tt.wantQuota, tt.wantPeriod)
		}
	}
}
