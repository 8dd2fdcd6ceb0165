package tick

import (
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	for _, c := range []struct {
		now    time.Time
		period time.Duration
		want   time.Duration
	}{
		{base, 100 * time.Millisecond, 100 * time.Millisecond},
		{base.Add(time.Nanosecond), 100 * time.Millisecond, 100*time.Millisecond - time.Nanosecond},
		{base.Add(30 * time.Millisecond), 100 * time.Millisecond, 70 * time.Millisecond},
		{base.Add(99 * time.Millisecond), 100 * time.Millisecond, time.Millisecond},
		{base.Add(130 * time.Millisecond), 250 * time.Millisecond, 120 * time.Millisecond},
		{base.Add(400 * time.Millisecond), time.Second, 600 * time.Millisecond},
	} {
		if got := Until(c.now, c.period); got != c.want {
			t.Errorf("Until(%v, %v) = %v, want %v", c.now.Sub(base), c.period, got, c.want)
		}
	}
}

func TestCrossed(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0) // on every grid below
	ms := time.Millisecond
	for _, c := range []struct {
		last, now time.Duration // after base
		period    time.Duration
		want      bool
	}{
		{0, 0, time.Second, false},
		{0, 999 * ms, time.Second, false},
		{0, time.Second, time.Second, true}, // the boundary itself is in (last, now]
		{-ms, 0, time.Second, true},         // last just before a boundary, now on it
		{ms, 1001 * ms, time.Second, true},
		{300 * ms, 999 * ms, time.Second, false},
		{300 * ms, 1000*ms + time.Microsecond, time.Second, true}, // 700 us after the read: the grid, not the age
		{999 * ms, 1999 * ms, time.Second, true},
		{time.Second, 1999 * ms, time.Second, false},
		{2 * time.Second, 4999 * ms, 5 * time.Second, false},
		{2 * time.Second, 5 * time.Second, 5 * time.Second, true},
		{0, 10 * time.Second, 5 * time.Second, true}, // two boundaries
		{ms, 0, time.Second, false},                  // the clock went back: the caller's case
	} {
		if got := Crossed(base.Add(c.last), base.Add(c.now), c.period); got != c.want {
			t.Errorf("Crossed(%v, %v, %v) = %v, want %v", c.last, c.now, c.period, got, c.want)
		}
	}
}

// TestNext: Next is the earliest instant at which Crossed holds: not one
// nanosecond before it, and at it, for last on, just after and between
// boundaries.
func TestNext(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	for _, c := range []struct {
		last   time.Time
		period time.Duration
		want   time.Time
	}{
		{base, time.Second, base.Add(time.Second)},
		{base.Add(time.Nanosecond), time.Second, base.Add(time.Second)},
		{base.Add(999 * time.Millisecond), time.Second, base.Add(time.Second)},
		{base.Add(130 * time.Millisecond), 250 * time.Millisecond, base.Add(250 * time.Millisecond)},
		{base.Add(4900 * time.Millisecond), 5 * time.Second, base.Add(5 * time.Second)},
		{base, 0, base},
	} {
		got := Next(c.last, c.period)
		if !got.Equal(c.want) {
			t.Errorf("Next(%v, %v) = %v, want %v", c.last.Sub(base), c.period, got.Sub(base), c.want.Sub(base))
		}
		if c.period > 0 && (Crossed(c.last, got.Add(-time.Nanosecond), c.period) || !Crossed(c.last, got, c.period)) {
			t.Errorf("Next(%v, %v) = %v is not where Crossed turns true", c.last.Sub(base), c.period, got.Sub(base))
		}
	}
}
