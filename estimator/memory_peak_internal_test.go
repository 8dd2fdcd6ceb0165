package estimator

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// TestMemPeakTrackerMatchesRescan feeds the incremental working-set peak
// the windows a sliding estimate sees (samples arriving one or a few at a
// time, gaps, a history replaced, time going back, an empty window) and
// checks that every answer equals memNeedOf's rescan of the same window.
func TestMemPeakTrackerMatchesRescan(t *testing.T) {
	t.Parallel()
	for _, memWindow := range []time.Duration{0, 300 * time.Millisecond, 1500 * time.Millisecond, 10 * time.Second} {
		rng := rand.New(rand.NewPCG(1, uint64(memWindow)))
		cfg := Config{MemoryWindow: memWindow}
		window := 3 * time.Second
		var history []Sample
		var p memPeakTracker
		t0 := time.Unix(1000, 0)
		now := t0
		for step := range 5000 {
			switch r := rng.IntN(100); {
			case r < 2: // the history is replaced (a container recreated)
				history = nil
			case r < 4 && now.After(t0.Add(time.Second)): // time goes back
				now = now.Add(-time.Duration(rng.IntN(1000)) * time.Millisecond)
			case r < 6: // a gap longer than the window
				now = now.Add(window + time.Duration(rng.IntN(2000))*time.Millisecond)
			default:
				now = now.Add(100 * time.Millisecond)
			}
			// Samples up to now, one to three new, some with equal values.
			for range rng.IntN(3) + 1 {
				at := now.Add(-time.Duration(rng.IntN(50)) * time.Millisecond)
				if n := len(history); n > 0 && !at.After(history[n-1].Time) {
					continue
				}
				mem := uint64(rng.IntN(8)) << 20
				history = append(history, Sample{Time: at, CPU: 1, MemBytes: mem})
			}
			w := windowOf(history, now, window, true)
			want := memNeedOf(member{window: w}, now, cfg, 0)
			got := memNeedOf(member{window: w, memPeak: &p}, now, cfg, 0)
			if got != want {
				t.Fatalf("memory window %v, step %d: incremental peak %v MiB, rescan %v MiB (window of %d samples)", memWindow, step, got, want, len(w))
			}
		}
	}
}

// TestSearchFromMatchesSearch: searchFrom's shortcuts give sort.Search's
// index for every t around every sample of windows with equal and
// distinct times, empty and single-sample windows included.
func TestSearchFromMatchesSearch(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms ...int) []Sample {
		w := make([]Sample, len(ms))
		for i, m := range ms {
			w[i].Time = start.Add(time.Duration(m) * time.Millisecond)
		}
		return w
	}
	for _, w := range [][]Sample{nil, at(100), at(100, 200), at(100, 200, 300, 400), at(100, 100, 200, 200), at(100, 200, 200, 200), at(0, 100, 100),
		at(0, 100, 100, 200, 300, 300, 300, 400)} {
		for ms := -100; ms <= 500; ms += 50 {
			ts := start.Add(time.Duration(ms) * time.Millisecond)
			want := sort.Search(len(w), func(i int) bool { return !w[i].Time.Before(ts) })
			if got := searchFrom(w, ts); got != want {
				t.Errorf("searchFrom(%d samples, +%d ms) = %d, want %d", len(w), ms, got, want)
			}
		}
	}
}
