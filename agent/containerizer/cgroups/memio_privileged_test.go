package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/internal/privileged"
)

// TestMemoryAndIOQoSOnThisHost sets a root up on the host's real cgroups
// and reads back what each layout offers: on pure v2, memory.min/low of a
// guaranteed container, memory.high of a revocable one and of the
// revocable subtree, swap closed to guaranteed work; on hybrid hosts the v1
// soft limits, and SetMemoryHigh refused with ErrUnsupported. Both freeze
// the revocable subtree with cgroup.freeze (the kernel reports it frozen),
// and cap its I/O on the disk of the test's directory where the host can.
// It logs the mechanisms found: run it on both layouts (docs/vm.md).
func TestMemoryAndIOQoSOnThisHost(t *testing.T) {
	privileged.Require(t)
	l, root := realRoot(t, "memio")
	const mem = 256 << 20
	g, err := l.Create(ContainerRel(root, Guaranteed, "g"), Limits{CPUs: 1, MemoryBytes: mem})
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Create(ContainerRel(root, Revocable, "r"), Limits{CPUs: 1, MemoryBytes: mem, Revocable: true})
	if err != nil {
		t.Fatal(err)
	}
	read := func(file string) string {
		t.Helper()
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	revocable := Subtree(root, Revocable)
	switch l.Mode {
	case ModeV2:
		for file, want := range map[string]string{
			filepath.Join(g.Unified, "memory.min"):                            fmt.Sprint(mem / 2),
			filepath.Join(g.Unified, "memory.low"):                            fmt.Sprint(mem),
			filepath.Join(g.Unified, "memory.high"):                           "max",
			filepath.Join(r.Unified, "memory.high"):                           fmt.Sprint(MemoryQoSOf(Limits{MemoryBytes: mem, Revocable: true}).High &^ 4095),
			filepath.Join(r.Unified, "memory.min"):                            "0",
			filepath.Join(l.Unified, root, "memory.min"):                      "max",
			filepath.Join(l.Unified, Subtree(root, Guaranteed), "memory.low"): "max",
		} {
			if got := read(file); got != want {
				t.Errorf("%s = %s, want %s", file, got, want)
			}
		}
		if f := filepath.Join(g.Unified, "memory.swap.max"); exists(f) {
			if got := read(f); got != "0" {
				t.Errorf("guaranteed memory.swap.max = %s, want 0", got)
			}
			if got := read(filepath.Join(r.Unified, "memory.swap.max")); got != "max" {
				t.Errorf("revocable memory.swap.max = %s, want max (swap for revocable work only)", got)
			}
			t.Logf("swap accounting present: guaranteed swap.max 0, revocable max")
		}
		if err := l.SetMemoryHigh(revocable, 128<<20); err != nil {
			t.Fatal(err)
		}
		if got, err := l.MemoryHigh(revocable); err != nil || got != 128<<20 {
			t.Errorf("revocable subtree memory.high = %v, %v", got, err)
		}
		if err := l.SetMemoryHigh(revocable, 0); err != nil {
			t.Fatal(err)
		}
		t.Logf("v2: memory.min/low on guaranteed tasks, memory.high on revocable tasks and subtree")
	case ModeHybrid:
		if got := read(filepath.Join(g.Memory, "memory.soft_limit_in_bytes")); got != fmt.Sprint(mem) {
			t.Errorf("guaranteed soft limit = %s, want %d", got, mem)
		}
		for _, dir := range []string{r.Memory, filepath.Join(l.Memory, revocable)} {
			if got := read(filepath.Join(dir, "memory.soft_limit_in_bytes")); got != "0" {
				t.Errorf("%s soft limit = %s, want 0 (reclaimed first)", dir, got)
			}
		}
		if err := l.SetMemoryHigh(revocable, 1<<20); !errors.Is(err, ErrUnsupported) {
			t.Errorf("SetMemoryHigh on hybrid = %v, want ErrUnsupported", err)
		}
		t.Logf("hybrid: v1 soft limits (guaranteed = mem, revocable = 0); no memory.min/low/high")
	}

	// Freezing: the kernel says frozen once every task stopped (none here).
	if err := l.SetFrozen(revocable, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(read(filepath.Join(l.Unified, revocable, "cgroup.events")), "frozen 1") {
		t.Errorf("cgroup.events of the frozen subtree: %s", read(filepath.Join(l.Unified, revocable, "cgroup.events")))
	}
	if err := l.SetFrozen(revocable, false); err != nil {
		t.Fatal(err)
	}
	if f, err := l.Frozen(revocable); err != nil || f {
		t.Errorf("Frozen after thaw = %v, %v", f, err)
	}

	// Disk I/O: weight where a file exists, a cap on the disk of /var/tmp.
	if err := l.SetupIO(root); err != nil {
		t.Logf("no disk I/O QoS: %v", err)
		return
	}
	t.Logf("I/O weight files: %v", l.IOWeightFiles(root))
	dev := tempDirDevice(t)
	if dev == "" {
		t.Logf("%s is on a file system without a block device: no cap to try", os.TempDir())
		return
	}
	if err := l.SetIOLimit(revocable, []string{dev}, 8<<20); err != nil {
		t.Logf("cap on %s refused (a partition, not a disk?): %v", dev, err)
		return
	}
	if got, err := l.IOLimit(revocable, dev); err != nil || got != 8<<20 {
		t.Errorf("IOLimit = %v, %v; want 8 MiB/s", got, err)
	}
	if err := l.SetIOLimit(revocable, []string{dev}, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := l.IOLimit(revocable, dev); err != nil || got != 0 {
		t.Errorf("IOLimit after removal = %v, %v; want 0", got, err)
	}
	t.Logf("I/O cap on %s works", dev)
}

// TestIOLatencyOnThisHost sets an io.latency target on a root of the
// host's real cgroups (the revocable subtree's peer) for a disk, reads
// the kernel's listing back and removes it, where the kernel has
// io.latency (v2, CONFIG_BLK_CGROUP_IOLATENCY; Debian's 6.1 and 6.12 are
// built without it). Elsewhere SetIOLatency must refuse with
// ErrUnsupported and say why: hybrid hosts (v1 blkio), and v2 kernels
// whose cgroups have io.max but no io.latency. The disk is that of the
// test's directory, or where that is no disk (a guest's tmpfs) the first
// one in /sys/block.
func TestIOLatencyOnThisHost(t *testing.T) {
	privileged.Require(t)
	l, root := realRoot(t, "iolat")
	dir := filepath.Join(l.Unified, root)
	if l.Mode != ModeV2 || !exists(filepath.Join(dir, "io.latency")) {
		err := l.SetIOLatency(root, []string{"7:0"}, 5*time.Millisecond)
		want := "io.latency is cgroup v2 only"
		if l.Mode == ModeV2 {
			if !exists(filepath.Join(dir, "io.max")) {
				t.Fatalf("%s has no io.max: the io controller is not delegated to the test's root", dir)
			}
			want = "the kernel lacks io.latency"
		}
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), want) {
			t.Errorf("SetIOLatency on %s without io.latency = %v, want ErrUnsupported saying %q", l.Mode, err, want)
		}
		t.Logf("%s: no io.latency here (%v)", l.Mode, err)
		return
	}
	dev := aDisk(t)
	if err := l.SetIOLatency(root, []string{dev}, 5*time.Millisecond); err != nil {
		t.Fatalf("io.latency on the root: %v", err)
	}
	if got, err := l.IOLatency(root, dev); err != nil || got != 5*time.Millisecond {
		t.Errorf("IOLatency = %v, %v; want 5ms (the kernel's own listing)", got, err)
	}
	if err := l.SetIOLatency(root, []string{dev}, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := l.IOLatency(root, dev); err != nil || got != 0 {
		t.Errorf("IOLatency after removal = %v, %v; want 0", got, err)
	}
	t.Logf("io.latency target on %s works", dev)
}

// aDisk returns a whole disk ("MAJ:MIN"): that of os.TempDir() if it is
// one, else the first in /sys/block.
func aDisk(t *testing.T) string {
	t.Helper()
	if dev := tempDirDevice(t); dev != "" && exists(filepath.Join("/sys/dev/block", dev, "queue")) {
		return dev
	}
	disks, err := filepath.Glob("/sys/block/*/dev")
	if err != nil || len(disks) == 0 {
		t.Fatalf("no disk in /sys/block (%v)", err)
	}
	data, err := os.ReadFile(disks[0])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// tempDirDevice returns the block device ("MAJ:MIN") of os.TempDir()'s
// file system, "" when it has none (tmpfs).
func tempDirDevice(t *testing.T) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(os.TempDir(), &st); err != nil {
		t.Fatal(err)
	}
	if unix.Major(st.Dev) == 0 {
		return ""
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
}
