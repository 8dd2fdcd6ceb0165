package coordinator

import (
	"slices"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestSilentAgents: an agent silent for longer than AgentTimeout becomes
// UNREACHABLE, one that heartbeat meanwhile stays ACTIVE, and the check
// leaves the queue holding only the agents still active.
func TestSilentAgents(t *testing.T) {
	t.Parallel()
	d := newDomain(t)
	now := testNow
	d.c.cfg.Now = func() time.Time { return now }
	ids := map[string]string{}
	for _, host := range []string{"host-a", "host-b", "host-c"} {
		ids[host] = d.mustRegister(registerRequest("", host, "cpus:1;mem:128"))
	}
	state := func(host string) slacklinev1.AgentState { return d.c.agents[ids[host]].State }
	check := func(at time.Duration) int {
		now = testNow.Add(at)
		d.c.mu.Lock()
		defer d.c.mu.Unlock()
		return len(d.c.tick(now))
	}

	d.c.mu.Lock()
	d.c.heartbeat(d.c.agents[ids["host-b"]], testNow.Add(20*time.Second))
	d.c.mu.Unlock()
	if n := check(d.c.cfg.AgentTimeout); n != 0 {
		t.Fatalf("%d agents marked unreachable at exactly the timeout, want none", n)
	}
	if n := check(d.c.cfg.AgentTimeout + time.Second); n != 2 {
		t.Fatalf("%d registry writes, want 2 (host-a and host-c)", n)
	}
	for host, want := range map[string]slacklinev1.AgentState{
		"host-a": slacklinev1.AgentState_AGENT_STATE_UNREACHABLE,
		"host-b": slacklinev1.AgentState_AGENT_STATE_ACTIVE,
		"host-c": slacklinev1.AgentState_AGENT_STATE_UNREACHABLE,
	} {
		if got := state(host); got != want {
			t.Errorf("%s is %v, want %v", host, got, want)
		}
	}
	if q := d.c.core.Heartbeating(); !slices.Equal(q, []string{ids["host-b"]}) {
		t.Errorf("queue %v should hold host-b only", q)
	}
	if n := check(20*time.Second + d.c.cfg.AgentTimeout + time.Second); n != 1 || state("host-b") != slacklinev1.AgentState_AGENT_STATE_UNREACHABLE {
		t.Fatalf("%d writes, host-b %v: want host-b unreachable", n, state("host-b"))
	}
	if q := d.c.core.Heartbeating(); len(q) != 0 {
		t.Errorf("queue %v not empty once every agent is unreachable", q)
	}
	// Registering again queues the agent again.
	d.mustRegister(registerRequest(ids["host-a"], "host-a", "cpus:1;mem:128"))
	if q := d.c.core.Heartbeating(); !slices.Equal(q, []string{ids["host-a"]}) || state("host-a") != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
		t.Errorf("re-registered host-a is %v and not queued", state("host-a"))
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
	writes := c.tick(now)
	c.mu.Unlock()
	if len(writes) != 3 {
		t.Fatalf("%d agents unreachable after 13 s at a 12 s timeout, want 3 (all but host-a)", len(writes))
	}
	if s := c.agents[ids[0]].State; s != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
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
