package core

import (
	"testing"
	"time"
)

func TestHeartbeatPaceInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		rate         float64
		agents       int
		wantInterval time.Duration
		wantTimeout  time.Duration
	}{
		{"no agents", 1000, 0, 5 * time.Second, 30 * time.Second},
		{"within the budget", 1000, 5000, 5 * time.Second, 30 * time.Second},
		{"one agent over", 1000, 5001, 6 * time.Second, 36 * time.Second},
		{"10,000 agents at 1,000 a second", 1000, 10000, 10 * time.Second, 60 * time.Second},
		{"10,000 agents at 500 a second", 500, 10000, 20 * time.Second, 120 * time.Second},
		{"no budget", -1, 1_000_000, 5 * time.Second, 30 * time.Second},
		{"a sub-second base within the budget", 1000, 40, 50 * time.Millisecond, 300 * time.Millisecond},
		{"a sub-second base over it", 1000, 51, 100 * time.Millisecond, 600 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := 5 * time.Second
			if tt.wantInterval < time.Second {
				base = 50 * time.Millisecond
			}
			p := newHeartbeatPace(base, base*6, tt.rate)
			p.update(tt.agents, t0)
			if p.interval != tt.wantInterval {
				t.Errorf("interval %v, want %v", p.interval, tt.wantInterval)
			}
			if got := p.silence(t0); got != tt.wantTimeout {
				t.Errorf("timeout %v, want %v", got, tt.wantTimeout)
			}
			if rate := float64(tt.agents) / p.interval.Seconds(); tt.rate > 0 && rate > tt.rate {
				t.Errorf("%d agents at %v beat %.0f times a second, over the budget %.0f", tt.agents, p.interval, rate, tt.rate)
			}
		})
	}
}

// TestHeartbeatPaceHoldsTheLongerTimeout: when the interval shrinks,
// agents told the longer one are given the longer timeout until they have
// all heard of the change, then the shorter timeout applies; a second
// shrink during the hold keeps the longest timeout a full timeout more
// (one hold, conservative).
func TestHeartbeatPaceHoldsTheLongerTimeout(t *testing.T) {
	t.Parallel()
	p := newHeartbeatPace(time.Second, 6*time.Second, 1)
	steps := []struct {
		at           time.Duration
		agents       int
		wantChanged  bool
		wantInterval time.Duration
		wantTimeout  time.Duration
	}{
		{0, 20, true, 20 * time.Second, 120 * time.Second},
		{time.Second, 20, false, 20 * time.Second, 120 * time.Second},
		{10 * time.Second, 10, true, 11 * time.Second, 120 * time.Second},   // 10% margin: 11 s; held: agents at 20 s
		{20 * time.Second, 2, true, 2 * time.Second, 120 * time.Second},     // still the 20 s hold
		{139 * time.Second, 2, false, 2 * time.Second, 120 * time.Second},   // one hold, the longest, from the last shrink
		{141 * time.Second, 2, false, 2 * time.Second, 12 * time.Second},    // then the interval's own
		{142 * time.Second, 30, true, 30 * time.Second, 180 * time.Second},  // growth applies at once
		{143 * time.Second, 29, false, 30 * time.Second, 180 * time.Second}, // a boundary does not flip it
		{144 * time.Second, 30, false, 30 * time.Second, 180 * time.Second},
		{145 * time.Second, 27, true, 29 * time.Second, 180 * time.Second}, // 27 + 10%: 29 s, the longer timeout held
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if changed := p.update(s.agents, now); changed != s.wantChanged {
			t.Errorf("at %v with %d agents: changed %v, want %v", s.at, s.agents, changed, s.wantChanged)
		}
		if p.interval != s.wantInterval {
			t.Errorf("at %v: interval %v, want %v", s.at, p.interval, s.wantInterval)
		}
		if got := p.silence(now); got != s.wantTimeout {
			t.Errorf("at %v: timeout %v, want %v", s.at, got, s.wantTimeout)
		}
	}
}
