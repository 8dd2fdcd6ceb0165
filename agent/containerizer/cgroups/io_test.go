package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIOLimitV2(t *testing.T) {
	t.Parallel()
	mnt := writeTree(t, map[string]string{
		"cgroup.controllers":     "cpu io memory\n",
		"cgroup.subtree_control": "cpu io memory\n",
		"s-revocable/io.max":     "",
		"s-revocable/io.weight":  "default 100\n",
	})
	l := Layout{Mode: ModeV2, Mountpoint: mnt, Unified: mnt}
	if err := l.SetupIO("s"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "s-revocable", "io.weight")); got != "default 10" {
		t.Errorf("io.weight = %q, want default 10", got)
	}
	if err := l.SetIOLimit("s-revocable", []string{"254:0"}, 8<<20); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "s-revocable", "io.max")); got != "254:0 rbps=8388608 wbps=8388608" {
		t.Errorf("io.max = %q", got)
	}
	// The kernel shows the caps it holds; a fake file holds what was written.
	if v, err := l.IOLimit("s-revocable", "254:0"); err != nil || v != 8<<20 {
		t.Errorf("IOLimit = %v, %v", v, err)
	}
	if err := l.SetIOLimit("s-revocable", []string{"254:0"}, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := l.IOLimit("s-revocable", "254:0"); err != nil || v != 0 {
		t.Errorf("IOLimit after removal = %v, %v; want 0", v, err)
	}
	if err := l.SetIOLimit("s-revocable", []string{"sda"}, 1); err == nil || !strings.Contains(err.Error(), `invalid device "sda"`) {
		t.Errorf("bad device: %v", err)
	}
	undelegated := writeTree(t, map[string]string{"cgroup.controllers": "cpu memory\n", "cgroup.subtree_control": "cpu memory\n"})
	if err := (Layout{Mode: ModeV2, Mountpoint: undelegated, Unified: undelegated}).SetupIO("s"); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "io controller") {
		t.Errorf("SetupIO without io delegated = %v, want ErrUnsupported naming the io controller", err)
	}
}

func TestIOLimitHybrid(t *testing.T) {
	t.Parallel()
	mnt := fakeHybrid(t, false)
	if err := os.MkdirAll(filepath.Join(mnt, "blkio"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "blkio", "blkio.throttle.read_bps_device"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Detect(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if l.Blkio != filepath.Join(mnt, "blkio") {
		t.Fatalf("Blkio = %q", l.Blkio)
	}
	if err := l.SetupIO("s"); err != nil {
		t.Fatal(err)
	}
	if p := l.ContainerPaths("s", Revocable, "c1"); p.Blkio != filepath.Join(mnt, "blkio", "s-revocable") {
		t.Errorf("revocable container's blkio dir = %q", p.Blkio)
	}
	if p := l.ContainerPaths("s", Guaranteed, "c1"); p.Blkio != "" {
		t.Errorf("guaranteed container joins blkio %q, want none (the root: never capped)", p.Blkio)
	}
	if err := l.SetIOLimit("s-revocable", []string{"254:0"}, 4<<20); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"} {
		if got := readFile(t, filepath.Join(mnt, "blkio", "s-revocable", f)); got != "254:0 4194304" {
			t.Errorf("%s = %q", f, got)
		}
	}
	if v, err := l.IOLimit("s-revocable", "254:0"); err != nil || v != 4<<20 {
		t.Errorf("IOLimit = %v, %v", v, err)
	}
}
