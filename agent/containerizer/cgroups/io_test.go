package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestIOLatency: the target is written per device in microseconds, read
// back, removed with "target=max"; off v2, or without the file, it is
// ErrUnsupported.
func TestIOLatency(t *testing.T) {
	t.Parallel()
	mnt := writeTree(t, map[string]string{"s/io.latency": ""})
	l := Layout{Mode: ModeV2, Mountpoint: mnt, Unified: mnt}
	if err := l.SetIOLatency("s", []string{"254:0"}, 5*time.Millisecond+700*time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "s", "io.latency")); got != "254:0 target=5000" {
		t.Errorf("io.latency = %q, want 254:0 target=5000", got)
	}
	// The kernel lists each device's target; a fake file holds what was written.
	for dev, want := range map[string]time.Duration{"254:0": 5 * time.Millisecond, "8:0": 0} {
		if got, err := l.IOLatency("s", dev); err != nil || got != want {
			t.Errorf("IOLatency(%s) = %v, %v; want %v", dev, got, err, want)
		}
	}
	if err := l.SetIOLatency("s", []string{"254:0"}, 0); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "s", "io.latency")); got != "254:0 target=max" {
		t.Errorf("io.latency after removal = %q, want target=max", got)
	}
	if got, err := l.IOLatency("s", "254:0"); err != nil || got != 0 {
		t.Errorf("IOLatency after removal = %v, %v; want 0", got, err)
	}
	if err := l.SetIOLatency("s", []string{"sda"}, time.Millisecond); err == nil || !strings.Contains(err.Error(), `invalid device "sda"`) {
		t.Errorf("bad device: %v", err)
	}
	if err := l.SetIOLatency("s", []string{"254:0"}, -time.Millisecond); err == nil || errors.Is(err, ErrUnsupported) {
		t.Errorf("negative target: %v, want a plain error", err)
	}
	for name, l := range map[string]Layout{
		"no io.latency": {Mode: ModeV2, Mountpoint: mnt, Unified: mnt},
		"hybrid":        {Mode: ModeHybrid, Mountpoint: mnt, Unified: mnt},
	} {
		rel := "s"
		if name == "no io.latency" {
			rel = "other"
		}
		if err := l.SetIOLatency(rel, []string{"254:0"}, time.Millisecond); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: SetIOLatency = %v, want ErrUnsupported", name, err)
		}
		if _, err := l.IOLatency(rel, "254:0"); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: IOLatency = %v, want ErrUnsupported", name, err)
		}
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

// TestIOBytes: the revocable subtree's bytes on one device, read and
// written, from v2 io.stat and v1 blkio.throttle.io_service_bytes.
func TestIOBytes(t *testing.T) {
	t.Parallel()
	v2 := writeTree(t, map[string]string{
		"s-revocable/io.stat": "254:16 rbytes=7 wbytes=9 rios=1 wios=1 dbytes=0 dios=0\n254:0 rbytes=4096 wbytes=1048576 rios=1 wios=1 dbytes=5 dios=1\n",
	})
	l := Layout{Mode: ModeV2, Mountpoint: v2, Unified: v2}
	if n, err := l.IOBytes("s-revocable", "254:0"); err != nil || n != 4096+1048576 {
		t.Errorf("v2 IOBytes = %d, %v; want %d", n, err, 4096+1048576)
	}
	if n, err := l.IOBytes("s-revocable", "8:0"); err != nil || n != 0 {
		t.Errorf("v2 IOBytes of an unused device = %d, %v; want 0", n, err)
	}
	if _, err := l.IOBytes("missing", "254:0"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("v2 IOBytes without io.stat = %v, want ErrUnsupported", err)
	}
	bad := writeTree(t, map[string]string{"r/io.stat": "254:0 rbytes=x wbytes=1\n"})
	if _, err := (Layout{Mode: ModeV2, Mountpoint: bad, Unified: bad}).IOBytes("r", "254:0"); err == nil || !strings.Contains(err.Error(), "io.stat") {
		t.Errorf("v2 IOBytes of a bad line = %v, want an error naming io.stat", err)
	}

	v1 := writeTree(t, map[string]string{
		"blkio/s-revocable/blkio.throttle.io_service_bytes": "254:0 Read 100\n254:0 Write 2000\n254:0 Sync 2000\n254:0 Async 100\n254:0 Discard 0\n254:0 Total 2100\n8:0 Write 5\nTotal 2105\n",
	})
	h := Layout{Mode: ModeHybrid, Blkio: filepath.Join(v1, "blkio")}
	if n, err := h.IOBytes("s-revocable", "254:0"); err != nil || n != 2100 {
		t.Errorf("v1 IOBytes = %d, %v; want 2100", n, err)
	}
	if _, err := (Layout{Mode: ModeHybrid}).IOBytes("s-revocable", "254:0"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("v1 IOBytes without blkio = %v, want ErrUnsupported", err)
	}
}
