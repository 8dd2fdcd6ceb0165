package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

func knownAgent(id, hostname, res string, state slacklinev1.AgentState) *agent {
	a := newAgent(id, testNow.Add(-time.Hour))
	a.info = &slacklinev1.AgentInfo{Id: id, Hostname: hostname, Resources: resources.MustParse(res).Proto("", resources.Regular)}
	a.total, a.state = resources.MustParse(res), state
	return a
}

func agentsOf(list ...*agent) map[string]*agent {
	out := map[string]*agent{}
	for _, a := range list {
		out[a.id] = a
	}
	return out
}

func TestPlanRegistration(t *testing.T) {
	t.Parallel()
	const (
		active      = slacklinev1.AgentState_AGENT_STATE_ACTIVE
		unreachable = slacklinev1.AgentState_AGENT_STATE_UNREACHABLE
		gone        = slacklinev1.AgentState_AGENT_STATE_GONE
	)
	down := maintenance.New()
	down, _, _ = down.UpdateSchedule(&slacklinev1.Schedule{Windows: []*slacklinev1.Window{machineWindow(testNow, time.Hour, "host-down")}})
	down, _, err := down.StartMaintenance(machines("host-down"))
	if err != nil {
		t.Fatal(err)
	}
	draining, _, _ := maintenance.New().UpdateSchedule(&slacklinev1.Schedule{Windows: []*slacklinev1.Window{machineWindow(testNow, time.Hour, "host-a")}})
	earlier := testNow.Add(-time.Hour)
	tests := []struct {
		name       string
		agents     map[string]*agent
		maint      *maintenance.State
		req        *slacklinev1.RegisterRequest
		previousID string
		wantCode   connect.Code // 0: planned
		want       registrationPlan
		// wantWrites are the agent records the plan writes, by id.
		wantWrites map[string]slacklinev1.AgentState
	}{
		{name: "first registration", req: registerRequest("a1", "host-a", "cpus:2;mem:1024"),
			want: registrationPlan{registeredAt: testNow}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "first registration on a draining machine", maint: draining, req: registerRequest("a1", "host-a", "cpus:2;mem:1024"),
			want: registrationPlan{registeredAt: testNow}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "re-registration of an unchanged active agent writes nothing",
			agents: agentsOf(knownAgent("a1", "host-a", "cpus:2;mem:1024", active)),
			req:    registerRequest("a1", "host-a", "cpus:2;mem:1024"),
			want:   registrationPlan{registeredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{}},
		{name: "re-registration with another total keeps the registration time",
			agents: agentsOf(knownAgent("a1", "host-a", "cpus:2;mem:1024", active)),
			req:    registerRequest("a1", "host-a", "cpus:4;mem:1024"),
			want:   registrationPlan{registeredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "re-registration of an unreachable agent",
			agents: agentsOf(knownAgent("a1", "host-a", "cpus:2;mem:1024", unreachable)),
			req:    registerRequest("a1", "host-a", "cpus:2;mem:1024"),
			want:   registrationPlan{registeredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "a GONE agent is refused",
			agents: agentsOf(knownAgent("a1", "host-a", "cpus:2;mem:1024", gone)),
			req:    registerRequest("a1", "host-a", "cpus:2;mem:1024"), wantCode: connect.CodeFailedPrecondition},
		{name: "an agent of a DOWN machine is refused", maint: down,
			req: registerRequest("a1", "host-down", "cpus:2;mem:1024"), wantCode: connect.CodeFailedPrecondition},
		{name: "a known agent of a DOWN machine is refused", maint: down,
			agents: agentsOf(knownAgent("a1", "host-down", "cpus:2;mem:1024", active)),
			req:    registerRequest("a1", "host-down", "cpus:2;mem:1024"), wantCode: connect.CodeFailedPrecondition},
		{name: "a rebooted host retires its previous agent",
			agents: agentsOf(knownAgent("old", "host-a", "cpus:2;mem:1024", active)),
			req:    registerRequest("new", "host-a", "cpus:2;mem:1024"), previousID: "old",
			want:       registrationPlan{registeredAt: testNow, retire: []string{"old"}},
			wantWrites: map[string]slacklinev1.AgentState{"new": active, "old": gone}},
		{name: "a rebooted host retires its unreachable previous agent",
			agents: agentsOf(knownAgent("old", "host-a", "cpus:2;mem:1024", unreachable)),
			req:    registerRequest("new", "host-a", "cpus:2;mem:1024"), previousID: "old",
			want:       registrationPlan{registeredAt: testNow, retire: []string{"old"}},
			wantWrites: map[string]slacklinev1.AgentState{"new": active, "old": gone}},
		{name: "another host's agent is not retired",
			agents: agentsOf(knownAgent("other", "host-b", "cpus:2;mem:1024", active)),
			req:    registerRequest("new", "host-a", "cpus:2;mem:1024"), previousID: "other",
			want:       registrationPlan{registeredAt: testNow, ignoredPrevious: "host-b"},
			wantWrites: map[string]slacklinev1.AgentState{"new": active}},
		{name: "a GONE previous agent is left alone",
			agents: agentsOf(knownAgent("old", "host-a", "cpus:2;mem:1024", gone)),
			req:    registerRequest("new", "host-a", "cpus:2;mem:1024"), previousID: "old",
			want: registrationPlan{registeredAt: testNow}, wantWrites: map[string]slacklinev1.AgentState{"new": active}},
		{name: "an unknown previous agent is ignored",
			req: registerRequest("new", "host-a", "cpus:2;mem:1024"), previousID: "never-seen",
			want: registrationPlan{registeredAt: testNow}, wantWrites: map[string]slacklinev1.AgentState{"new": active}},
		{name: "naming itself as previous retires nothing",
			agents: agentsOf(knownAgent("a1", "host-a", "cpus:2;mem:1024", active)),
			req:    registerRequest("a1", "host-a", "cpus:2;mem:1024"), previousID: "a1",
			want: registrationPlan{registeredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{}},
		// One host, one agent: a new agent of a host retires the host's
		// others, named as previous or not (a wiped work dir, a second
		// process with the host's certificate).
		{name: "a second agent of a host retires the live one",
			agents:     agentsOf(knownAgent("first", "host-a", "cpus:2;mem:1024", active), knownAgent("other", "host-b", "cpus:2;mem:1024", active)),
			req:        registerRequest("second", "host-a", "cpus:64;mem:262144"),
			want:       registrationPlan{registeredAt: testNow, retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
		{name: "a second agent of a host retires the unreachable one",
			agents:     agentsOf(knownAgent("first", "host-a", "cpus:2;mem:1024", unreachable)),
			req:        registerRequest("second", "host-a", "cpus:2;mem:1024"),
			want:       registrationPlan{registeredAt: testNow, retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
		{name: "hostnames are one host whatever their case",
			agents:     agentsOf(knownAgent("first", "host-a", "cpus:2;mem:1024", active)),
			req:        registerRequest("second", "HOST-A", "cpus:2;mem:1024"),
			want:       registrationPlan{registeredAt: testNow, retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
		{name: "every other agent of a host is retired (several from an older registry)",
			agents: agentsOf(knownAgent("x", "host-a", "cpus:1", active), knownAgent("y", "host-a", "cpus:1", active),
				knownAgent("z", "host-a", "cpus:1", gone)),
			req:        registerRequest("y", "host-a", "cpus:1"),
			want:       registrationPlan{registeredAt: earlier, retire: []string{"x"}},
			wantWrites: map[string]slacklinev1.AgentState{"x": gone}},
		{name: "a recovering agent of the host is retired by a new one",
			agents:     agentsOf(knownAgent("first", "host-a", "cpus:2;mem:1024", slacklinev1.AgentState_AGENT_STATE_RECOVERING)),
			req:        registerRequest("second", "host-a", "cpus:2;mem:1024"),
			want:       registrationPlan{registeredAt: testNow, retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.agents == nil {
				tt.agents = map[string]*agent{}
			}
			if tt.maint == nil {
				tt.maint = maintenance.New()
			}
			tt.req.PreviousAgentId = tt.previousID
			reg, err := parseRegistration(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			before := map[string]slacklinev1.AgentState{}
			for id, a := range tt.agents {
				before[id] = a.state
			}
			var sameHost []*agent
			for _, a := range tt.agents {
				if strings.EqualFold(a.info.GetHostname(), reg.info.GetHostname()) {
					sameHost = append(sameHost, a)
				}
			}
			plan, err := planRegistration(tt.agents, sameHost, tt.maint, reg, testNow)
			if (err == nil) != (tt.wantCode == 0) || (err != nil && connect.CodeOf(err) != tt.wantCode) {
				t.Fatalf("err = %v, want code %v", err, tt.wantCode)
			}
			after := map[string]slacklinev1.AgentState{}
			for id, a := range tt.agents {
				after[id] = a.state
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("planRegistration changed the agents (-before +after):\n%s", diff)
			}
			if err != nil {
				return
			}
			st := newMemStore()
			if err := st.Apply(context.Background(), plan.writes...); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantWrites, st.agentStates(t)); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			plan.writes = nil
			if diff := cmp.Diff(tt.want, plan, cmp.AllowUnexported(registrationPlan{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	const (
		running = slacklinev1.TaskState_TASK_STATE_RUNNING
		staging = slacklinev1.TaskState_TASK_STATE_STAGING
	)
	fwInfo := &slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60,
		Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}}
	tests := []struct {
		name string
		run  func(t *testing.T, d *domain)
	}{
		{"first registration admits the agent with a session", func(t *testing.T, d *domain) {
			id, err := d.register(registerRequest("", "host-a", "cpus:2;mem:1024"))
			if err != nil {
				t.Fatal(err)
			}
			a := d.agent(id)
			if a == nil || a.state != slacklinev1.AgentState_AGENT_STATE_ACTIVE || a.session == nil || !d.c.core.InAllocator(id) || a.registeredAt != testNow {
				t.Fatalf("agent %+v", a)
			}
			if got := d.st.agentStates(t)[id]; got != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
				t.Fatalf("persisted state %v", got)
			}
		}},
		{"re-registration ends the old session", func(t *testing.T, d *domain) {
			id := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			old := d.agent(id).session
			if d.mustRegister(registerRequest(id, "host-a", "cpus:2;mem:1024")) != id {
				t.Fatal("re-registration changed the id")
			}
			if d.agent(id).session == old {
				t.Fatal("same session")
			}
			if !old.hasEnded() {
				t.Fatal("old session not ended")
			}
		}},
		{"a changed total rescinds outstanding offers", func(t *testing.T, d *domain) {
			_, sub := d.connectFramework(fwInfo)
			id := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			d.allocate()
			events(sub)
			d.mustRegister(registerRequest(id, "host-a", "cpus:2;mem:1024"))
			if n := countEvents(events(sub), isRescind); n != 0 {
				t.Fatalf("same total: %d rescinds", n)
			}
			d.mustRegister(registerRequest(id, "host-a", "cpus:4;mem:1024"))
			if n := countEvents(events(sub), isRescind); n != 1 {
				t.Fatalf("changed total: %d rescinds, want 1", n)
			}
			if a := d.agent(id); len(d.c.core.AgentOffers(id)) != 0 || !a.total.Equal(resources.MustParse("cpus:4;mem:1024")) {
				t.Fatalf("offers %v, total %v", d.c.core.AgentOffers(id), a.total)
			}
		}},
		{"a refused registration changes nothing", func(t *testing.T, d *domain) {
			id := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			d.c.mu.Lock()
			d.c.agents[id].state = slacklinev1.AgentState_AGENT_STATE_GONE
			d.c.mu.Unlock()
			_, err := d.register(registerRequest(id, "host-a", "cpus:2;mem:1024"))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("err = %v", err)
			}
			if d.agent(id).state != slacklinev1.AgentState_AGENT_STATE_GONE {
				t.Fatal("agent changed")
			}
		}},
		{"a failed write is Unavailable and applies nothing", func(t *testing.T, d *domain) {
			d.st.err = errDiskFull
			_, err := d.register(registerRequest("a1", "host-a", "cpus:2;mem:1024"))
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("err = %v", err)
			}
			if d.agent("a1") != nil {
				t.Fatal("agent admitted without its record")
			}
		}},
		{"reboot retirement ends the old agent and its tasks", func(t *testing.T, d *domain) {
			fw1, sub := d.connectFramework(fwInfo)
			old := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024", agentTask(fw1, "t1", "cpus:1", running)))
			req := registerRequest("", "host-a", "cpus:2;mem:1024")
			req.PreviousAgentId = old
			id := d.mustRegister(req)
			if got := updates(events(sub)); got["t1"] != slacklinev1.TaskState_TASK_STATE_GONE {
				t.Fatalf("updates %v, want t1 GONE", got)
			}
			if a := d.agent(old); a.state != slacklinev1.AgentState_AGENT_STATE_GONE || a.session != nil || d.c.core.InAllocator(old) || d.c.core.AgentTaskCount(old) != 0 {
				t.Fatalf("old agent %+v", a)
			}
			want := map[string]slacklinev1.AgentState{old: slacklinev1.AgentState_AGENT_STATE_GONE, id: slacklinev1.AgentState_AGENT_STATE_ACTIVE}
			if diff := cmp.Diff(want, d.st.agentStates(t)); diff != "" {
				t.Fatalf("records (-want +got):\n%s", diff)
			}
		}},
		{"reported tasks are reconciled", func(t *testing.T, d *domain) {
			fw1, sub := d.connectFramework(fwInfo)
			done, _ := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "done"})
			d.c.mu.Lock()
			d.c.removeFramework(d.c.frameworks[done], "test")
			d.c.mu.Unlock()
			adopted := agentTask("lost-registry", "t3", "cpus:0.5", running)
			adopted.Framework = &slacklinev1.FrameworkInfo{Id: "lost-registry", Name: "lost"}
			id := d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:1024",
				agentTask(fw1, "t1", "cpus:1", running), agentTask(fw1, "t2", "cpus:1", staging),
				agentTask(done, "t9", "cpus:1", running), adopted))
			a := d.agent(id)
			if got := commands(a); len(got) != 1 || got[0].GetShutdownFramework().GetFrameworkId() != done {
				t.Fatalf("commands %v, want a shutdown of the completed framework", got)
			}
			d.c.mu.Lock()
			allocated := d.c.core.Allocator().AgentAllocated(id)
			lost := d.c.frameworks["lost-registry"]
			d.c.mu.Unlock()
			if !allocated.Equal(resources.MustParse("cpus:2.5")) {
				t.Fatalf("allocated %v, want the reported tasks' cpus:2.5", allocated)
			}
			if lost == nil || lost.state != slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED || d.c.core.Task(lost.id(), "t3") == nil {
				t.Fatalf("unknown framework not adopted: %+v", lost)
			}
			// The agent restarts and reports t1 RUNNING only: t2 was STAGING.
			events(sub)
			d.mustRegister(registerRequest(id, "host-a", "cpus:4;mem:1024", agentTask(fw1, "t1", "cpus:1", running), adopted))
			want := map[string]slacklinev1.TaskState{"t2": slacklinev1.TaskState_TASK_STATE_DROPPED}
			if diff := cmp.Diff(want, updates(events(sub))); diff != "" {
				t.Fatalf("updates (-want +got):\n%s", diff)
			}
			// Then it reports no task at all: t1 is gone.
			d.mustRegister(registerRequest(id, "host-a", "cpus:4;mem:1024"))
			want = map[string]slacklinev1.TaskState{"t1": slacklinev1.TaskState_TASK_STATE_GONE}
			if diff := cmp.Diff(want, updates(events(sub))); diff != "" {
				t.Fatalf("updates (-want +got):\n%s", diff)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newDomain(t)) })
	}
}

// TestProposedAgentID: a fresh agent gets the id it proposes unless that
// would claim another host's agent or a GONE one; the same proposal from
// the same host (a retry after a lost answer) names the agent the first
// try registered.
func TestProposedAgentID(t *testing.T) {
	t.Parallel()
	agentOn := func(id, hostname string, state slacklinev1.AgentState) *agent {
		a := newAgent(id, time.Time{})
		a.info, a.state = &slacklinev1.AgentInfo{Id: id, Hostname: hostname}, state
		return a
	}
	agents := map[string]*agent{
		"taken":  agentOn("taken", "host-a", slacklinev1.AgentState_AGENT_STATE_ACTIVE),
		"gone":   agentOn("gone", "host-b", slacklinev1.AgentState_AGENT_STATE_GONE),
		"mine":   agentOn("mine", "host-b", slacklinev1.AgentState_AGENT_STATE_ACTIVE),
		"silent": agentOn("silent", "HOST-B", slacklinev1.AgentState_AGENT_STATE_UNREACHABLE),
	}
	for _, tc := range []struct {
		name, proposed, hostname string
		keep                     bool
	}{
		{"none proposed: a new id", "", "host-b", false},
		{"unknown: taken as is", "fresh", "host-b", true},
		{"the same host's (a retry): re-registers it", "mine", "host-b", true},
		{"the same host's in another case: a new id (the identity check compares exactly)", "silent", "host-b", false},
		{"another host's: a new id", "taken", "host-b", false},
		{"a gone agent's: a new id", "gone", "host-b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := registration{info: &slacklinev1.AgentInfo{Hostname: tc.hostname}, proposedID: tc.proposed}
			got := proposedAgentID(agents, reg)
			if (got == tc.proposed) != tc.keep || got == "" {
				t.Fatalf("proposedAgentID(%q from %s) = %q, want the proposal kept: %v", tc.proposed, tc.hostname, got, tc.keep)
			}
			if !tc.keep && agents[got] != nil {
				t.Fatalf("proposedAgentID(%q) = %q, an existing agent's id", tc.proposed, got)
			}
		})
	}
}
