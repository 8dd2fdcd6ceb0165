package agent

import (
	"strings"
	"testing"
)

// TestEstimateSchedule: aligned to the monitor, an estimate runs right after
// the first sample following each tick (never at the tick itself, never
// twice per tick), and at the next tick when no sample came (so a stalled
// monitor still gets an estimate per tick); unaligned, at every tick and
// never on a sample. Events: t a tick, s a sample; the
// result marks each event that ran an estimate (E) or not (.).
func TestEstimateSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		aligned bool
		events  string
		want    string
	}{
		{"sample after each tick", true, "tststs", ".E.E.E"},
		{"a sample before the first tick runs nothing", true, "stst", "..E."},
		{"two samples per tick: only the first runs", true, "tsstss", ".E..E."},
		{"no sample by the next tick: estimate at it, then at the sample", true, "ttst", ".EE."},
		{"stalled monitor: one estimate per tick, one tick late", true, "tttt", ".EEE"},
		{"unaligned: every tick, no sample", false, "tstsst", "E.E..E"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := estimateSchedule{aligned: tc.aligned}
			var got strings.Builder
			for _, e := range tc.events {
				run := false
				if e == 't' {
					run = s.tick()
				} else {
					run = s.sampled()
				}
				if run {
					got.WriteByte('E')
				} else {
					got.WriteByte('.')
				}
			}
			if got.String() != tc.want {
				t.Errorf("events %s: estimates %s, want %s", tc.events, got.String(), tc.want)
			}
		})
	}
}
