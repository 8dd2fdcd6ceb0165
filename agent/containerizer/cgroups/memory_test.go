package cgroups

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestMemoryQoSOf: guaranteed tasks are protected (min half, low all of
// their mem, v1 soft limit their mem), revocable ones throttled at 90%
// (v1 soft limit 0), and swap is closed to guaranteed tasks only.
func TestMemoryQoSOf(t *testing.T) {
	t.Parallel()
	const mem = 1 << 30
	g := v2Resources(Limits{CPUs: 1, MemoryBytes: mem}, true).Memory
	if g.Min == nil || *g.Min != mem/2 || g.Low == nil || *g.Low != mem || g.High != nil || g.Swap == nil || *g.Swap != 0 {
		t.Errorf("guaranteed v2 memory = min %v low %v high %v swap %v, want min %d low %d no high, swap 0", g.Min, g.Low, g.High, g.Swap, mem/2, mem)
	}
	r := v2Resources(Limits{CPUs: 1, MemoryBytes: mem, Revocable: true}, true).Memory
	if r.High == nil || *r.High != int64(966367641) || r.Min != nil || r.Low != nil || r.Swap != nil {
		t.Errorf("revocable v2 memory = min %v low %v high %v swap %v, want high %d only (swap allowed)", r.Min, r.Low, r.High, r.Swap, int64(966367641))
	}
	g1 := v1Resources(Limits{CPUs: 1, MemoryBytes: mem}, true).Memory
	if g1.Reservation == nil || *g1.Reservation != mem || g1.Swap == nil || *g1.Swap != mem {
		t.Errorf("guaranteed v1 memory = soft %v memsw %v, want %d and %d", g1.Reservation, g1.Swap, mem, mem)
	}
	r1 := v1Resources(Limits{CPUs: 1, MemoryBytes: mem, Revocable: true}, true).Memory
	if r1.Reservation == nil || *r1.Reservation != 0 || r1.Swap != nil {
		t.Errorf("revocable v1 memory = soft %v memsw %v, want soft 0 and swap allowed", r1.Reservation, r1.Swap)
	}
	if q := MemoryQoSOf(Limits{CPUs: 1}); q != (MemoryQoS{}) {
		t.Errorf("no memory limit: %+v, want nothing", q)
	}
}

func TestMemoryHighAndFreeze(t *testing.T) {
	t.Parallel()
	mnt := writeTree(t, map[string]string{
		"cgroup.controllers": "cpu memory\n",
		"r/memory.high":      "max\n",
		"r/cgroup.freeze":    "0\n",
	})
	l := Layout{Mode: ModeV2, Mountpoint: mnt, Unified: mnt}
	if err := l.SetMemoryHigh("r", 256<<20); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "r", "memory.high")); got != "268435456" {
		t.Errorf("memory.high = %q", got)
	}
	if v, err := l.MemoryHigh("r"); err != nil || v != 256<<20 {
		t.Errorf("MemoryHigh = %v, %v", v, err)
	}
	if err := l.SetMemoryHigh("r", 0); err != nil {
		t.Fatal(err)
	}
	if v, err := l.MemoryHigh("r"); err != nil || v != 0 {
		t.Errorf("MemoryHigh after removal = %v, %v; want 0 (max)", v, err)
	}
	if err := l.SetFrozen("r", true); err != nil {
		t.Fatal(err)
	}
	if f, err := l.Frozen("r"); err != nil || !f {
		t.Errorf("Frozen = %v, %v", f, err)
	}
	if err := l.SetFrozen("r", false); err != nil {
		t.Fatal(err)
	}
	if f, err := l.Frozen("r"); err != nil || f {
		t.Errorf("Frozen after thaw = %v, %v", f, err)
	}

	hybrid := Layout{Mode: ModeHybrid, Mountpoint: mnt, Unified: filepath.Join(mnt, "unified"), Memory: filepath.Join(mnt, "memory")}
	if err := hybrid.SetMemoryHigh("r", 1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("hybrid SetMemoryHigh = %v, want ErrUnsupported", err)
	}
	if err := hybrid.SetFrozen("r", true); !errors.Is(err, ErrUnsupported) {
		t.Errorf("SetFrozen without cgroup.freeze = %v, want ErrUnsupported", err)
	}
}
