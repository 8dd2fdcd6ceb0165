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
