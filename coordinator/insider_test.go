package coordinator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
)

// The insider tests: what one stolen agent certificate or one framework
// token can make the coordinator hold (issue 24's attacks 2 and 4).

// clock is a logical clock for a domain.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const insiderPolicy = `
version: 1
acls:
  register_frameworks:
    - principals: [batch, other]
      roles: any
  register_agents:
    - principals: [agent:a]
      hostnames: [host-a]
      max_resources: "cpus:16;mem:65536;disk:1048576"
    - principals: [agent:b]
      hostnames: [host-b]
`

// newInsiderDomain is a domain with insiderPolicy, limits and a logical
// clock starting at testNow.
func newInsiderDomain(t *testing.T, limits Limits) (*domain, *clock) {
	t.Helper()
	pol, err := auth.ParsePolicy([]byte(insiderPolicy))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: testNow}
	st := newMemStore()
	c, err := New(Config{Store: st, Logger: testLogger(), Now: clk.Now, Authz: auth.New(pol), Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return &domain{t: t, c: c, st: st}, clk
}

func limitHits(c *Coordinator, limit string) float64 {
	return testutil.ToFloat64(c.bounds.hits.WithLabelValues(limit))
}

// TestOneAgentPerHost: a second agent registered with the host's
// certificate and hostname, without naming the first, retires it: its
// session ends, its tasks end GONE, and only the second is offered.
func TestOneAgentPerHost(t *testing.T) {
	t.Parallel()
	d, _ := newInsiderDomain(t, Limits{})
	fw, sub, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "fw", Roles: []string{"batch"}, FailoverTimeoutSeconds: 60,
		Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}})
	if err != nil {
		t.Fatal(err)
	}
	sub.next()
	// The first agent reports a task it was given (with its launch proof).
	first := d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:4096", agentTask(fw.id(), "t1", "cpus:1", slacklinev1.TaskState_TASK_STATE_RUNNING)))
	if n := d.c.core.AgentTaskCount(first); n != 1 {
		t.Fatalf("first agent has %d tasks, want 1", n)
	}
	firstSession := d.agent(first).session

	second, err := d.registerAs("agent:a", registerRequest("", "host-a", "cpus:4;mem:4096"))
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("the second registration got the first's id")
	}
	if a := d.agent(first); a.State != slacklinev1.AgentState_AGENT_STATE_GONE || d.c.core.InAllocator(first) || d.c.core.AgentTaskCount(first) != 0 {
		t.Fatalf("first agent: state %v, in allocator %v, tasks %d; want GONE, out, none", a.State, d.c.core.InAllocator(first), d.c.core.AgentTaskCount(first))
	}
	if !firstSession.hasEnded() {
		t.Fatal("the first agent's session did not end")
	}
	if got := updates(events(sub)); got["t1"] != slacklinev1.TaskState_TASK_STATE_GONE {
		t.Fatalf("updates %v, want t1 GONE", got)
	}
	want := map[string]slacklinev1.AgentState{first: slacklinev1.AgentState_AGENT_STATE_GONE, second: slacklinev1.AgentState_AGENT_STATE_ACTIVE}
	if diff := cmp.Diff(want, d.st.agentStates(t)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	// A third, with the hostname in capitals (certificates match names
	// without case), retires the second.
	third, err := d.registerAs("agent:a", registerRequest("", "HOST-A", "cpus:4;mem:4096"))
	if err != nil {
		t.Fatal(err)
	}
	if a := d.agent(second); a.State != slacklinev1.AgentState_AGENT_STATE_GONE {
		t.Fatalf("HOST-A's agent %s left host-a's %s %v", third, second, a.State)
	}
}

// TestConcurrentAgentsOfOneHost: two registrations of one host planned
// together (each sees only the first agent) leave one live agent: the one
// applied last retires the other and writes its GONE record.
func TestConcurrentAgentsOfOneHost(t *testing.T) {
	t.Parallel()
	d, clk := newInsiderDomain(t, Limits{})
	ctx := auth.NewContext(context.Background(), &auth.Principal{Name: "agent:a", Method: auth.MethodToken})
	parse := func(id string) registration {
		reg, err := parseRegistration(registerRequest(id, "host-a", "cpus:1;mem:1024"))
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	if _, err := d.registerAs("agent:a", registerRequest("first", "host-a", "cpus:1;mem:1024")); err != nil {
		t.Fatal(err)
	}
	late := parse("late")
	d.c.mu.Lock()
	plan, err := d.c.core.PlanRegistration(core.AgentRegistration{Info: late.info, Total: late.total}, d.c.core.Maintenance(), clk.Now())
	d.c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := d.c.register(ctx, parse("between")); err != nil {
		t.Fatal(err)
	}
	if err := d.c.write(ctx, "agent", plan); err != nil {
		t.Fatal(err)
	}
	d.c.mu.Lock()
	_, writes, err := d.c.applyRegistration(late, plan.Apply, clk.Now())
	d.c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	d.c.record(ctx, writes...)
	live := map[string]slacklinev1.AgentState{}
	d.c.mu.Lock()
	for _, a := range d.c.core.AgentsOnHost("host-a") {
		live[a.ID] = a.State
	}
	d.c.mu.Unlock()
	want := map[string]slacklinev1.AgentState{"first": slacklinev1.AgentState_AGENT_STATE_GONE,
		"between": slacklinev1.AgentState_AGENT_STATE_GONE, "late": slacklinev1.AgentState_AGENT_STATE_ACTIVE}
	if diff := cmp.Diff(want, live); diff != "" {
		t.Fatalf("agents of host-a (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, d.st.agentStates(t)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
}

// TestAgentResourceCap: an agent registering more than its
// register_agents rule's max_resources is refused, naming the cap; a rule
// without the key caps nothing.
func TestAgentResourceCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, principal, hostname, resources string
		wantCode                             connect.Code // 0: registered
		wantMessage                          string
	}{
		{"within the cap", "agent:a", "host-a", "cpus:16;mem:65536", 0, ""},
		{"the attack's resources", "agent:a", "host-a", "cpus:64;mem:262144", connect.CodePermissionDenied, "at most cpus:16;mem:65536;disk:1048576"},
		{"a resource the cap does not name", "agent:a", "host-a", "cpus:1;bandwidth:100", connect.CodePermissionDenied, "exceed it by bandwidth:100"},
		{"a rule without max_resources", "agent:b", "host-b", "cpus:64;mem:262144", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, _ := newInsiderDomain(t, Limits{})
			id, err := d.registerAs(tt.principal, registerRequest("", tt.hostname, tt.resources))
			if connect.CodeOf(err) != tt.wantCode && !(tt.wantCode == 0 && err == nil) {
				t.Fatalf("err = %v, want code %v", err, tt.wantCode)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantMessage) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.wantMessage)
			}
			if err != nil && len(d.c.agents) != 0 {
				t.Fatalf("a refused agent was admitted: %v", d.c.agents)
			}
			if err == nil && d.agent(id) == nil {
				t.Fatal("no agent")
			}
		})
	}
}

// TestAgentRegistrationRate: one principal registers a burst, then at the
// pace; another principal has its own bucket.
func TestAgentRegistrationRate(t *testing.T) {
	t.Parallel()
	d, clk := newInsiderDomain(t, Limits{AgentRegistrationsPerMinute: 2, AgentRegistrationBurst: 3})
	for i := range 3 {
		if _, err := d.registerAs("agent:a", registerRequest("", "host-a", "cpus:1")); err != nil {
			t.Fatalf("registration %d of the burst: %v", i, err)
		}
	}
	_, err := d.registerAs("agent:a", registerRequest("", "host-a", "cpus:1"))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "register again in 30s") {
		t.Fatalf("past the burst: %v, want ResourceExhausted asking to wait 30s", err)
	}
	if got := limitHits(d.c, "agent_registrations"); got != 1 {
		t.Fatalf("limit hits %v, want 1", got)
	}
	if _, err := d.registerAs("agent:b", registerRequest("", "host-b", "cpus:1")); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	clk.advance(29 * time.Second)
	if _, err := d.registerAs("agent:a", registerRequest("", "host-a", "cpus:1")); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("after 29s: %v, want ResourceExhausted", err)
	}
	clk.advance(time.Second)
	if _, err := d.registerAs("agent:a", registerRequest("", "host-a", "cpus:1")); err != nil {
		t.Fatalf("after 30s: %v", err)
	}
}

// TestPrincipalRatesBounded: the limiters are at most max; rested ones go
// first, so a principal in the middle of its pace keeps it.
func TestPrincipalRatesBounded(t *testing.T) {
	t.Parallel()
	r := newPrincipalRates(1, 1)
	r.max = 3
	if ok, _ := r.allow("busy", testNow); !ok {
		t.Fatal("busy's first")
	}
	for i, p := range []string{"p1", "p2", "p3", "p4"} {
		// Each a minute apart: earlier ones are rested by then.
		if ok, _ := r.allow(p, testNow.Add(time.Duration(i+1)*time.Minute)); !ok {
			t.Fatalf("%s refused", p)
		}
		if len(r.limiters) > r.max {
			t.Fatalf("%d limiters, max %d", len(r.limiters), r.max)
		}
	}
	r = newPrincipalRates(1, 1)
	r.max = 2
	r.allow("busy", testNow)
	r.allow("p1", testNow)
	r.allow("p2", testNow) // nobody rested: all forgotten
	if len(r.limiters) > r.max {
		t.Fatalf("%d limiters, max %d", len(r.limiters), r.max)
	}
	if newPrincipalRates(-1, 1) != nil {
		t.Fatal("a negative pace paces")
	}
}

// TestFrameworksPerPrincipal: a principal registers frameworks up to the
// cap, connected or disconnected; one more is ResourceExhausted naming the
// cap; failovers and other principals are not held back; a teardown makes
// room.
func TestFrameworksPerPrincipal(t *testing.T) {
	t.Parallel()
	d, _ := newInsiderDomain(t, Limits{MaxFrameworksPerPrincipal: 2})
	info := func() *slacklinev1.FrameworkInfo {
		return &slacklinev1.FrameworkInfo{Name: "fw", Roles: []string{"batch"}, FailoverTimeoutSeconds: 3600}
	}
	first, firstSub, err := d.subscribeAs("batch", info())
	if err != nil {
		t.Fatal(err)
	}
	d.c.subscriptionEnded(first, firstSub) // DISCONNECTED within its failover timeout: still registered
	if _, _, err := d.subscribeAs("batch", info()); err != nil {
		t.Fatal(err)
	}
	_, _, err = d.subscribeAs("batch", info())
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-frameworks-per-principal 2") {
		t.Fatalf("third framework: %v, want ResourceExhausted naming the cap", err)
	}
	if got := limitHits(d.c, "frameworks_per_principal"); got != 1 {
		t.Fatalf("limit hits %v, want 1", got)
	}
	if len(d.c.frameworks) != 2 {
		t.Fatalf("%d frameworks registered, want 2", len(d.c.frameworks))
	}
	failover := info()
	failover.Id = first.id()
	if _, _, err := d.subscribeAs("batch", failover); err != nil {
		t.Fatalf("failover at the cap: %v", err)
	}
	if _, _, err := d.subscribeAs("other", info()); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	d.c.mu.Lock()
	d.c.removeFramework(d.c.frameworks[first.id()], "test")
	d.c.mu.Unlock()
	if _, _, err := d.subscribeAs("batch", info()); err != nil {
		t.Fatalf("after a teardown: %v", err)
	}
}

// TestMaxFailoverTimeout: a failover timeout beyond the operator's maximum
// is lowered to it, in the framework's info (what GetFrameworks shows)
// and its record; one within it is kept.
func TestMaxFailoverTimeout(t *testing.T) {
	t.Parallel()
	const year, week = 365 * 24 * 3600, 7 * 24 * 3600
	d, _ := newInsiderDomain(t, Limits{})
	for _, tt := range []struct {
		asked, want float64
	}{{year, week}, {week, week}, {60, 60}, {0, 0}} {
		fw, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "fw", Roles: []string{"batch"}, FailoverTimeoutSeconds: tt.asked})
		if err != nil {
			t.Fatal(err)
		}
		if got := fw.info.GetFailoverTimeoutSeconds(); got != tt.want {
			t.Errorf("asked %v s: in effect %v s, want %v", tt.asked, got, tt.want)
		}
		if got := d.frameworkRecord(fw.id()).GetInfo().GetFailoverTimeoutSeconds(); got != tt.want {
			t.Errorf("asked %v s: recorded %v s, want %v", tt.asked, got, tt.want)
		}
		resp, err := operatorService{d.c}.GetFrameworks(as("batch"), connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range resp.Msg.GetFrameworks() {
			if f.GetInfo().GetId() == fw.id() && f.GetInfo().GetFailoverTimeoutSeconds() != tt.want {
				t.Errorf("asked %v s: GetFrameworks shows %v s, want %v", tt.asked, f.GetInfo().GetFailoverTimeoutSeconds(), tt.want)
			}
		}
	}
	if got := limitHits(d.c, "failover_timeout"); got != 1 {
		t.Fatalf("limit hits %v, want 1", got)
	}
	for _, tt := range []struct {
		limit       time.Duration
		asked, want float64
		clamped     bool
	}{
		{time.Hour, 7200, 3600, true},
		{time.Hour, 3600, 3600, false},
		{-1, year, year, false},
	} {
		info := &slacklinev1.FrameworkInfo{FailoverTimeoutSeconds: tt.asked}
		if got := clampFailoverTimeout(info, tt.limit); got != tt.clamped || info.GetFailoverTimeoutSeconds() != tt.want {
			t.Errorf("clampFailoverTimeout(%v s, %v) = %v, %v s; want %v, %v s", tt.asked, tt.limit, got, info.GetFailoverTimeoutSeconds(), tt.clamped, tt.want)
		}
	}
}

// TestInterleavedRegistrationsSurviveRestart (#30): agent a of host-a
// re-registers while b, a new agent of the host, registers; the plans'
// records land in either order, and either registration applies last.
// The registry, with the after-apply records written in apply order, ends
// as memory is, and a coordinator restarted on it agrees: the agent
// applied last registers again (before the fix, a applied last was
// refused as GONE after a restart, or a retired stayed ACTIVE).
func TestInterleavedRegistrationsSurviveRestart(t *testing.T) {
	t.Parallel()
	const (
		gone   = slacklinev1.AgentState_AGENT_STATE_GONE
		active = slacklinev1.AgentState_AGENT_STATE_ACTIVE
	)
	tests := []struct {
		name                   string
		writeFirst, applyFirst string // "a" or "b"
		want                   map[string]slacklinev1.AgentState
		last                   string // the host's agent
	}{
		{"a's record first, a applies last", "a", "b", map[string]slacklinev1.AgentState{"a": active, "b": gone}, "a"},
		{"b's record first, a applies last", "b", "b", map[string]slacklinev1.AgentState{"a": active, "b": gone}, "a"},
		{"a's record last, b applies last", "b", "a", map[string]slacklinev1.AgentState{"a": gone, "b": active}, "b"},
		{"a's record first, b applies last", "a", "a", map[string]slacklinev1.AgentState{"a": gone, "b": active}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, clk := newInsiderDomain(t, Limits{})
			ctx := auth.NewContext(context.Background(), &auth.Principal{Name: "agent:a", Method: auth.MethodToken})
			parse := func(id, res string) registration {
				reg, err := parseRegistration(registerRequest(id, "host-a", res))
				if err != nil {
					t.Fatal(err)
				}
				return reg
			}
			if _, _, _, err := d.c.register(ctx, parse("a", "cpus:1;mem:1024")); err != nil {
				t.Fatal(err)
			}
			// a re-registers with other resources (its ACTIVE record is
			// written again); b's plan retires a.
			regs := map[string]registration{"a": parse("a", "cpus:2;mem:1024"), "b": parse("b", "cpus:1;mem:1024")}
			plans := map[string]core.Ready{}
			d.c.mu.Lock()
			for _, id := range []string{"a", "b"} {
				r := regs[id]
				p, err := d.c.core.PlanRegistration(core.AgentRegistration{Info: r.info, Total: r.total}, d.c.core.Maintenance(), clk.Now())
				if err != nil {
					d.c.mu.Unlock()
					t.Fatal(err)
				}
				plans[id] = p
			}
			d.c.mu.Unlock()
			other := map[string]string{"a": "b", "b": "a"}
			for _, id := range []string{tt.writeFirst, other[tt.writeFirst]} {
				if err := d.c.write(ctx, "agent", plans[id]); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range []string{tt.applyFirst, other[tt.applyFirst]} {
				d.c.mu.Lock()
				_, late, err := d.c.applyRegistration(regs[id], plans[id].Apply, clk.Now())
				d.c.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
				d.c.record(ctx, late...)
			}
			live := map[string]slacklinev1.AgentState{}
			d.c.mu.Lock()
			for _, a := range d.c.core.AgentsOnHost("host-a") {
				live[a.ID] = a.State
			}
			d.c.mu.Unlock()
			if diff := cmp.Diff(tt.want, live); diff != "" {
				t.Fatalf("agents of host-a (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, d.st.agentStates(t)); diff != "" {
				t.Fatalf("records (-want +got):\n%s", diff)
			}
			// A restart reloads the registry: the host's agent registers
			// again, the retired one is refused.
			restarted := &domain{t: t, st: d.st}
			var err error
			restarted.c, err = New(Config{Store: d.st, Logger: testLogger(), Now: clk.Now, Authz: d.c.cfg.Authz})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := restarted.c.register(ctx, parse(tt.last, "cpus:2;mem:1024")); err != nil {
				t.Fatalf("after a restart, %s (the host's agent) was refused: %v", tt.last, err)
			}
			if _, _, _, err := restarted.c.register(ctx, parse(other[tt.last], "cpus:1;mem:1024")); !errors.Is(err, core.ErrAgentGone) {
				t.Fatalf("after a restart, %s (retired) registered: err %v, want ErrAgentGone", other[tt.last], err)
			}
		})
	}
}

// TestRegistrationAfterRecordsInApplyOrder: registrations' after-apply
// records are written in the order the registrations applied, even when
// the earlier one's writer runs late: the later ACTIVE→GONE record is the
// registry's (written as they arrive, the earlier one's ACTIVE would
// overwrite it).
func TestRegistrationAfterRecordsInApplyOrder(t *testing.T) {
	t.Parallel()
	d, _ := newInsiderDomain(t, Limits{})
	ctx := context.Background()
	agentWrite := func(state slacklinev1.AgentState) []store.Mutation {
		rec := &slacklinev1.AgentRecord{Info: &slacklinev1.AgentInfo{Id: "x", Hostname: "host-a"}, State: state}
		return registryWrites([]core.Record{{Kind: core.RecordAgent, Key: "x", Agent: rec}})
	}
	// Applied first, its writer held back until unblock is closed.
	unblock := make(chan struct{})
	first := make(chan struct{})
	d.c.mu.Lock()
	d.c.registrationAfter = first
	d.c.mu.Unlock()
	earlier := make(chan struct{})
	go func() {
		defer close(earlier)
		<-unblock
		d.c.recordInApplyOrder(ctx, nil, first, agentWrite(slacklinev1.AgentState_AGENT_STATE_ACTIVE))
	}()
	// Applied second: it takes its turn after first.
	d.c.mu.Lock()
	previous, done := d.c.registrationAfter, make(chan struct{})
	d.c.registrationAfter = done
	d.c.mu.Unlock()
	later := make(chan struct{})
	go func() {
		defer close(later)
		d.c.recordInApplyOrder(ctx, previous, done, agentWrite(slacklinev1.AgentState_AGENT_STATE_GONE))
	}()
	close(unblock)
	<-earlier
	<-later
	if got := d.st.agentStates(t)["x"]; got != slacklinev1.AgentState_AGENT_STATE_GONE {
		t.Fatalf("x's record is %v, want GONE (the later registration's)", got)
	}
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if d.c.registrationAfter != nil {
		t.Fatal("registrationAfter not cleared after the last write")
	}
}
