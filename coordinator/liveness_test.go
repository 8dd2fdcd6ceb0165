package coordinator

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

func TestHeartbeatQueue(t *testing.T) {
	t.Parallel()
	agents := map[string]*agent{"a": {id: "a"}, "b": {id: "b"}, "c": {id: "c"}}
	order := func(q *heartbeatQueue) []string {
		var ids []string
		for a := q.front; a != nil; a = a.hbNext {
			ids = append(ids, a.id)
		}
		var back []string
		for a := q.back; a != nil; a = a.hbPrev {
			back = append([]string{a.id}, back...)
		}
		if !cmp.Equal(ids, back) {
			t.Fatalf("front to back %v, back to front %v", ids, back)
		}
		return ids
	}
	tests := []struct {
		name string
		ops  []string // "+x": heartbeat of x, "-x": remove x
		want []string
	}{
		{"in arrival order", []string{"+a", "+b", "+c"}, []string{"a", "b", "c"}},
		{"a heartbeat moves to the back", []string{"+a", "+b", "+c", "+a"}, []string{"b", "c", "a"}},
		{"the back heartbeats again", []string{"+a", "+b", "+b"}, []string{"a", "b"}},
		{"remove the middle", []string{"+a", "+b", "+c", "-b"}, []string{"a", "c"}},
		{"remove the ends", []string{"+a", "+b", "+c", "-a", "-c"}, []string{"b"}},
		{"remove all, then add", []string{"+a", "-a", "-a", "+c"}, []string{"c"}},
		{"remove what is not queued", []string{"-b", "+a"}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, a := range agents {
				*a = agent{id: a.id}
			}
			var q heartbeatQueue
			for i, op := range tt.ops {
				a := agents[op[1:]]
				if op[0] == '+' {
					q.touch(a, testNow.Add(time.Duration(i)*time.Second))
				} else {
					q.remove(a)
				}
			}
			if got := order(&q); !cmp.Equal(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
		})
	}
}

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
	state := func(host string) slacklinev1.AgentState { return d.c.agents[ids[host]].state }
	check := func(at time.Duration) int {
		now = testNow.Add(at)
		d.c.mu.Lock()
		defer d.c.mu.Unlock()
		return len(d.c.checkSilentAgents(now))
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
	if q := d.c.heartbeats; q.front != d.c.agents[ids["host-b"]] || q.back != q.front {
		t.Errorf("queue should hold host-b only")
	}
	if n := check(20*time.Second + d.c.cfg.AgentTimeout + time.Second); n != 1 || state("host-b") != slacklinev1.AgentState_AGENT_STATE_UNREACHABLE {
		t.Fatalf("%d writes, host-b %v: want host-b unreachable", n, state("host-b"))
	}
	if d.c.heartbeats.front != nil {
		t.Errorf("queue not empty once every agent is unreachable")
	}
	// Registering again queues the agent again.
	d.mustRegister(registerRequest(ids["host-a"], "host-a", "cpus:1;mem:128"))
	if d.c.heartbeats.front != d.c.agents[ids["host-a"]] || state("host-a") != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
		t.Errorf("re-registered host-a is %v and not queued", state("host-a"))
	}
}
