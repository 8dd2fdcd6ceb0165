package netqos

import (
	"slices"
	"testing"
	"time"
)

// TestPlanTCPRead: a pass reads every watched cgroup without marks, at the
// first pass, once fullEvery has passed or the clock went back; otherwise
// only those never read and those marked changed, walking the map when
// more than tcpWalkAbove need reading.
func TestPlanTCPRead(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	watched := map[uint64]bool{1: true, 2: true, 3: true}
	cache := map[uint64]TCPStats{1: {}, 2: {}, 3: {}}
	only := func(ids ...uint64) func(uint64) bool {
		return func(id uint64) bool { return slices.Contains(ids, id) }
	}
	many := map[uint64]bool{}
	for id := range uint64(tcpWalkAbove + 1) {
		many[id+100] = true
	}
	for _, tc := range []struct {
		name     string
		now      time.Time
		lastFull time.Time
		watched  map[uint64]bool
		cache    map[uint64]TCPStats
		marked   func(uint64) bool
		full     bool
		walk     bool
		read     []uint64
	}{
		{"first pass", t0, time.Time{}, watched, cache, only(), true, true, []uint64{1, 2, 3}},
		{"no marks", t0.Add(time.Millisecond), t0, watched, cache, nil, true, true, []uint64{1, 2, 3}},
		{"nothing marked", t0.Add(100 * time.Millisecond), t0, watched, cache, only(), false, false, nil},
		{"one marked", t0.Add(100 * time.Millisecond), t0, watched, cache, only(2), false, false, []uint64{2}},
		{"a mark of a cgroup not watched", t0.Add(100 * time.Millisecond), t0, watched, cache, only(9), false, false, nil},
		{"watched since the last read", t0.Add(100 * time.Millisecond), t0, watched, map[uint64]TCPStats{1: {}, 3: {}}, only(), false, false, []uint64{2}},
		{"just under fullEvery", t0.Add(time.Second - time.Nanosecond), t0, watched, cache, only(), false, false, nil},
		{"fullEvery passed", t0.Add(time.Second), t0, watched, cache, only(), true, true, []uint64{1, 2, 3}},
		{"clock went back", t0.Add(-time.Millisecond), t0, watched, cache, only(), true, true, []uint64{1, 2, 3}},
		{"many marked: walk", t0.Add(100 * time.Millisecond), t0, many, nil, func(uint64) bool { return true }, false, true, nil},
	} {
		plan := planTCPRead(tc.now, tc.lastFull, time.Second, tc.watched, tc.cache, tc.marked, nil)
		slices.Sort(plan.Read)
		want := tc.read
		if tc.name == "many marked: walk" {
			want = nil
			for id := range tc.watched {
				want = append(want, id)
			}
			slices.Sort(want)
		}
		if plan.Full != tc.full || plan.Walk != tc.walk || !slices.Equal(plan.Read, want) {
			t.Errorf("%s: plan full %v walk %v read %v, want %v %v %v", tc.name, plan.Full, plan.Walk, plan.Read, tc.full, tc.walk, want)
		}
	}
}
