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
