package bpf

import (
	"slices"
	"testing"
	"time"
)

// TestPlanRead: which tracked cgroups a ReadAll pass looks up. Without
// marks, at the first pass, once a boundary of fullReadInterval's grid
// passed since the last full read (tick.Crossed) or when the clock went
// back: every one (with a batch walk). Otherwise only those marked
// changed and those never read under their current tracking; a batch
// walk once more than walkAbove of them need reading.
func TestPlanRead(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 500*int(time.Millisecond), time.UTC) // between the grid's boundaries
	tracked := map[uint64]uint32{1: 1, 2: 2, 3: 3}
	cached := map[uint64]*cachedCounters{1: {epoch: 1}, 2: {epoch: 2}, 3: {epoch: 3}}
	marks := func(ids ...uint64) func(uint64) bool {
		return func(id uint64) bool { return slices.Contains(ids, id) }
	}
	many := map[uint64]uint32{}
	manyCached := map[uint64]*cachedCounters{}
	for id := range uint64(walkAbove + 1) {
		many[id+1], manyCached[id+1] = 1, &cachedCounters{epoch: 1}
	}
	for _, tc := range []struct {
		name     string
		now      time.Time
		lastFull time.Time
		tracked  map[uint64]uint32
		cache    map[uint64]*cachedCounters
		marked   func(uint64) bool
		want     []uint64
		full     bool
		walk     bool
	}{
		{name: "no marks: every cgroup, every pass", now: t0, lastFull: t0.Add(-time.Millisecond),
			tracked: tracked, cache: cached, want: []uint64{1, 2, 3}, full: true, walk: true},
		{name: "first pass", now: t0, tracked: tracked, cache: map[uint64]*cachedCounters{}, marked: marks(),
			want: []uint64{1, 2, 3}, full: true, walk: true},
		{name: "nothing marked: nothing read", now: t0, lastFull: t0.Add(-100 * time.Millisecond),
			tracked: tracked, cache: cached, marked: marks()},
		{name: "a marked cgroup is read", now: t0, lastFull: t0.Add(-100 * time.Millisecond),
			tracked: tracked, cache: cached, marked: marks(2), want: []uint64{2}},
		{name: "a mark of an untracked cgroup reads nothing", now: t0, lastFull: t0.Add(-100 * time.Millisecond),
			tracked: tracked, cache: cached, marked: marks(9)},
		{name: "a cgroup tracked since the last pass is read", now: t0, lastFull: t0.Add(-100 * time.Millisecond),
			tracked: map[uint64]uint32{1: 1, 2: 2, 3: 3, 4: 4}, cache: cached, marked: marks(), want: []uint64{4}},
		{name: "a cgroup tracked again (new epoch) is read", now: t0, lastFull: t0.Add(-100 * time.Millisecond),
			tracked: map[uint64]uint32{1: 1, 2: 2, 3: 7}, cache: cached, marked: marks(), want: []uint64{3}},
		{name: "the last full read on the last boundary: nothing read", now: t0, lastFull: t0.Add(-fullReadInterval / 2),
			tracked: tracked, cache: cached, marked: marks(), want: []uint64{}},
		{name: "a boundary since the last full read: every cgroup", now: t0, lastFull: t0.Add(-fullReadInterval/2 - time.Nanosecond),
			tracked: tracked, cache: cached, marked: marks(), want: []uint64{1, 2, 3}, full: true, walk: true},
		{name: "the clock went back: every cgroup", now: t0, lastFull: t0.Add(time.Second),
			tracked: tracked, cache: cached, marked: marks(), want: []uint64{1, 2, 3}, full: true, walk: true},
		{name: "more than walkAbove marked: one batch walk", now: t0, lastFull: t0.Add(-100 * time.Millisecond),
			tracked: many, cache: manyCached, marked: func(uint64) bool { return true },
			want: func() []uint64 {
				var ids []uint64
				for id := range many {
					ids = append(ids, id)
				}
				return ids
			}(), walk: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan := planRead(tc.now, tc.lastFull, fullReadInterval, tc.tracked, tc.cache, tc.marked, nil)
			got := slices.Sorted(slices.Values(plan.Read))
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) || plan.Full != tc.full || plan.Walk != tc.walk {
				t.Errorf("planRead: read %v full %v walk %v, want read %v full %v walk %v",
					got, plan.Full, plan.Walk, want, tc.full, tc.walk)
			}
		})
	}
}

// TestChangedFlag: the flag of a cgroup is common.h's multiplicative hash
// (checked against values computed by hand), within the array, and
// consecutive cgroup ids (inode numbers) spread over distinct flags.
func TestChangedFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   uint64
		want int
	}{
		{0, 0},
		{1, 0x9E3},          // 0x9E3779B97F4A7C15 >> 52
		{2, 0x3C6},          // (2 * 0x9E37...) mod 2^64 >> 52
		{1 << 63, 0x800},    // odd multiplier: the top bit stays
		{^uint64(0), 0x61C}, // -0x9E3779B97F4A7C15 mod 2^64 >> 52
	} {
		if got := changedFlag(tc.id); got != tc.want {
			t.Errorf("changedFlag(%#x) = %#x, want %#x", tc.id, got, tc.want)
		}
	}
	seen := map[int]bool{}
	for id := uint64(10_000); id < 10_100; id++ {
		f := changedFlag(id)
		if f < 0 || f >= changedFlags {
			t.Fatalf("changedFlag(%d) = %d, outside [0, %d)", id, f, changedFlags)
		}
		seen[f] = true
	}
	if len(seen) < 99 {
		t.Errorf("100 consecutive ids took %d distinct flags, want at least 99", len(seen))
	}
}

// BenchmarkPlanRead: one pass's plan over 100 tracked cgroups, none
// marked (the agent's idle case, every 100 ms).
func BenchmarkPlanRead(b *testing.B) {
	tracked := map[uint64]uint32{}
	cache := map[uint64]*cachedCounters{}
	for i := range uint64(100) {
		tracked[i*7919+1] = 1
		cache[i*7919+1] = &cachedCounters{epoch: 1}
	}
	now := time.Now()
	var read []uint64
	b.ReportAllocs()
	for range b.N {
		p := planRead(now, now.Add(-time.Millisecond), time.Second, tracked, cache, func(uint64) bool { return false }, read)
		read = p.Read
	}
}
