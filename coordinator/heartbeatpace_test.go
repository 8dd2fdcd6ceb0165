package coordinator

import (
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
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
			p.update(tt.agents, testNow)
			if p.interval != tt.wantInterval {
				t.Errorf("interval %v, want %v", p.interval, tt.wantInterval)
			}
			if got := p.silence(testNow); got != tt.wantTimeout {
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
		now := testNow.Add(s.at)
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

// TestHeartbeatIntervalGrowsWithTheCluster: the coordinator tells agents a
// longer interval once they exceed its heartbeat budget, in registration
// and in heartbeat answers, and gives them the longer timeout.
func TestHeartbeatIntervalGrowsWithTheCluster(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	now := testNow
	c, err := New(Config{Store: st, Logger: testLogger(), Now: func() time.Time { return now },
		AgentHeartbeatInterval: time.Second, AgentTimeout: 3 * time.Second, MaxAgentHeartbeatRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := &domain{t: t, c: c, st: st}
	var ids []string
	for _, host := range []string{"host-a", "host-b", "host-c", "host-d"} {
		ids = append(ids, d.mustRegister(registerRequest("", host, "cpus:1;mem:128")))
	}
	c.mu.Lock()
	got := c.agentHeartbeatInterval(now)
	c.mu.Unlock()
	if got != 4*time.Second {
		t.Fatalf("4 agents at 1 heartbeat a second: interval %v, want 4s", got)
	}
	// Silent for 10 s: over the base timeout (3 s), within 4 intervals' worth (12 s).
	now = testNow.Add(10 * time.Second)
	c.mu.Lock()
	c.heartbeat(c.agents[ids[0]], now)
	now = testNow.Add(13 * time.Second)
	writes := c.checkSilentAgents(now)
	c.mu.Unlock()
	if len(writes) != 3 {
		t.Fatalf("%d agents unreachable after 13 s at a 12 s timeout, want 3 (all but host-a)", len(writes))
	}
	if s := c.agents[ids[0]].state; s != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
		t.Errorf("host-a, heard from at 10 s, is %v", s)
	}
	// One agent left heartbeating: the interval shrinks back to the base.
	c.mu.Lock()
	got = c.agentHeartbeatInterval(now)
	c.mu.Unlock()
	if got != time.Second {
		t.Errorf("1 agent: interval %v, want the base 1s", got)
	}
}
