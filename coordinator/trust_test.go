package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/core"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/resources"
)

// The trust tests drive the domain operations with an authorization policy
// and callers in the context, as the middleware would put them there.

const trustPolicy = `
version: 1
acls:
  register_frameworks:
    - principals: [batch, other]
      roles: [batch]
    - principals: [admin]
      roles: any
  run_tasks:
    - principals: [batch]
      users: [nobody]
  run_unconfined_tasks:
    - principals: [other]
  teardown_frameworks:
    - principals: [admin]
      framework_principals: any
  view_frameworks:
    - principals: [admin]
      framework_principals: any
  view_tasks:
    - principals: [admin]
      framework_principals: any
  view_roles:
    - principals: [admin]
      roles: any
  view_agents:
    - principals: [admin]
  access_sandboxes:
    - principals: [reader]
      framework_principals: [batch]
  register_agents:
    - principals: [agent:a]
      hostnames: [host-a]
    - principals: [agent:b]
      hostnames: [host-b]
`

func newTrustDomain(t *testing.T) *domain {
	t.Helper()
	pol, err := auth.ParsePolicy([]byte(trustPolicy))
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	c, err := New(Config{Store: st, Logger: testLogger(), Now: func() time.Time { return testNow }, Authz: auth.New(pol)})
	if err != nil {
		t.Fatal(err)
	}
	return &domain{t: t, c: c, st: st}
}

func as(name string) context.Context {
	return auth.NewContext(context.Background(), &auth.Principal{Name: name, Method: auth.MethodToken})
}

// subscribeAs subscribes a framework as the principal name.
func (d *domain) subscribeAs(name string, info *slacklinev1.FrameworkInfo) (*framework, *subscription, error) {
	d.t.Helper()
	info, err := normalizeFrameworkInfo(info)
	if err != nil {
		d.t.Fatal(err)
	}
	return d.c.subscribe(as(name), info)
}

// registerAs registers an agent as the principal name, with the tasks as
// given (no launch proof is added).
func (d *domain) registerAs(name string, req *slacklinev1.RegisterRequest) (string, error) {
	d.t.Helper()
	reg, err := parseRegistration(req)
	if err != nil {
		d.t.Fatal(err)
	}
	id, _, _, err := d.c.register(as(name), reg)
	return id, err
}

func TestFrameworkBinding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, d *domain)
	}{
		{"a new framework is bound to its caller", func(t *testing.T, d *domain) {
			fw, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}})
			if err != nil {
				t.Fatal(err)
			}
			if fw.info.GetPrincipal() != "batch" {
				t.Fatalf("principal %q", fw.info.GetPrincipal())
			}
			raw, _ := d.st.Load(context.Background(), "frameworks")
			if len(raw[fw.id()]) == 0 {
				t.Fatal("no record")
			}
		}},
		{"a role not granted is refused", func(t *testing.T, d *domain) {
			_, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"prod"}})
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("err = %v", err)
			}
			if len(d.c.frameworks) != 0 {
				t.Fatal("framework admitted")
			}
		}},
		{"another principal's name is refused", func(t *testing.T, d *domain) {
			_, _, err := d.subscribeAs("other", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}, Principal: "batch"})
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("err = %v", err)
			}
		}},
		{"a failover by another principal is refused and changes nothing", func(t *testing.T, d *domain) {
			fw, sub, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}, FailoverTimeoutSeconds: 60})
			if err != nil {
				t.Fatal(err)
			}
			events(sub)
			_, _, err = d.subscribeAs("other", &slacklinev1.FrameworkInfo{Id: fw.id(), Name: "evil", Roles: []string{"batch"}})
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("err = %v", err)
			}
			if fw.sub != sub || fw.info.GetName() != "b" || len(events(sub)) != 0 {
				t.Fatalf("victim changed: sub %v, name %q", fw.sub == sub, fw.info.GetName())
			}
		}},
		{"an operator may fail over and the binding stays", func(t *testing.T, d *domain) {
			fw, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}, FailoverTimeoutSeconds: 60})
			if err != nil {
				t.Fatal(err)
			}
			fw2, _, err := d.subscribeAs("admin", &slacklinev1.FrameworkInfo{Id: fw.id(), Name: "b", Roles: []string{"batch"}})
			if err != nil {
				t.Fatal(err)
			}
			if fw2.info.GetPrincipal() != "batch" {
				t.Fatalf("principal %q after an operator's failover", fw2.info.GetPrincipal())
			}
		}},
		{"run_tasks: the framework's user, checked", func(t *testing.T, d *domain) {
			fw, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}, User: "nobody"})
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range []struct {
				user, want string
				code       connect.Code
			}{{"", "nobody", 0}, {"nobody", "nobody", 0}, {"root", "", connect.CodePermissionDenied}} {
				user, err := d.c.runAs(fw, &slacklinev1.TaskInfo{User: tt.user})
				if user != tt.want || connect.CodeOf(err) != tt.code && !(tt.code == 0 && err == nil) {
					t.Errorf("runAs(%q) = %q, %v", tt.user, user, err)
				}
			}
		}},
		{"run_unconfined_tasks: checked for the framework's principal when a task asks", func(t *testing.T, d *domain) {
			batch, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}})
			if err != nil {
				t.Fatal(err)
			}
			other, _, err := d.subscribeAs("other", &slacklinev1.FrameworkInfo{Name: "o", Roles: []string{"batch"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range []struct {
				fw         *framework
				unconfined bool
				code       connect.Code
			}{{batch, false, 0}, {batch, true, connect.CodePermissionDenied}, {other, true, 0}} {
				err := d.c.mayRunUnconfined(tt.fw, &slacklinev1.TaskInfo{SeccompUnconfined: tt.unconfined})
				if connect.CodeOf(err) != tt.code && !(tt.code == 0 && err == nil) {
					t.Errorf("%s, unconfined %v: %v", tt.fw.info.GetPrincipal(), tt.unconfined, err)
				}
			}
		}},
		{"sandbox reads through the node proxy: the task's principal or access_sandboxes on it", func(t *testing.T, d *domain) {
			mine, _, _ := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "mine", Roles: []string{"batch"}})
			theirs, _, _ := d.subscribeAs("other", &slacklinev1.FrameworkInfo{Name: "theirs", Roles: []string{"batch"}})
			d.c.mu.Lock()
			d.c.core.AdoptTask(&core.Task{Info: &slacklinev1.TaskInfo{TaskId: "live"}, FrameworkID: mine.id(), AgentID: "a1", Role: "batch"})
			done := &core.Task{Info: &slacklinev1.TaskInfo{TaskId: "done"}, FrameworkID: mine.id(), AgentID: "a1", Role: "batch"}
			d.c.core.AdoptTask(done)
			d.c.deliver(d.c.core.EndTask(done, &slacklinev1.TaskStatus{State: slacklinev1.TaskState_TASK_STATE_FINISHED}, d.c.cfg.Now()))
			d.c.core.AdoptTask(&core.Task{Info: &slacklinev1.TaskInfo{TaskId: "live"}, FrameworkID: theirs.id(), AgentID: "a1", Role: "batch"})
			d.c.mu.Unlock()
			ops := operatorService{d.c}
			for _, tt := range []struct {
				who, agent, framework, task string
				allowed                     bool
			}{
				{"batch", "a1", mine.id(), "live", true},
				{"batch", "a1", mine.id(), "done", true}, // completed tasks too
				{"reader", "a1", mine.id(), "live", true},
				{"batch", "a1", theirs.id(), "live", false}, // another framework's
				{"reader", "a1", theirs.id(), "live", false},
				{"admin", "a1", mine.id(), "live", false}, // view_tasks is not access_sandboxes
				{"batch", "a2", mine.id(), "live", false}, // not on that agent
				{"batch", "a1", mine.id(), "nope", false},
				{"batch", "a1", "no-such-framework", "live", false},
			} {
				err := ops.MayReadSandbox(as(tt.who), tt.agent, tt.framework, tt.task)
				if tt.allowed != (err == nil) || (err != nil && connect.CodeOf(err) != connect.CodePermissionDenied) {
					t.Errorf("%s reading %s/%s on %s: %v, allowed %v", tt.who, tt.framework, tt.task, tt.agent, err, tt.allowed)
				}
			}
			// The refusal says nothing of whether the task exists.
			other := ops.MayReadSandbox(as("other"), "a1", mine.id(), "live")
			missing := ops.MayReadSandbox(as("other"), "a1", mine.id(), "nope")
			if connect.CodeOf(other) != connect.CodeOf(missing) ||
				other.Error() != strings.Replace(missing.Error(), `"nope"`, `"live"`, 1) {
				t.Errorf("refusals differ for an existing task (%v) and a missing one (%v)", other, missing)
			}
		}},
		{"views show a principal its own frameworks and tasks", func(t *testing.T, d *domain) {
			mine, _, _ := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "mine", Roles: []string{"batch"}})
			theirs, _, _ := d.subscribeAs("other", &slacklinev1.FrameworkInfo{Name: "theirs", Roles: []string{"batch"}})
			state := func(who string) *slacklinev1.GetStateResponse {
				d.c.mu.Lock()
				defer d.c.mu.Unlock()
				return d.c.visibleState(as(who), &slacklinev1.GetStateResponse{
					Agents: []*slacklinev1.Agent{{Id: "a"}}, Frameworks: d.c.frameworksProto(), Roles: d.c.rolesProto(),
					Tasks: []*slacklinev1.Task{{TaskId: "t1", FrameworkId: mine.id()}, {TaskId: "t2", FrameworkId: theirs.id()}},
				})
			}
			s := state("batch")
			if len(s.Frameworks) != 1 || s.Frameworks[0].GetInfo().GetId() != mine.id() || len(s.Tasks) != 1 || s.Tasks[0].GetTaskId() != "t1" ||
				len(s.Agents) != 0 || len(s.Roles) != 0 {
				t.Fatalf("batch sees %v", s)
			}
			s = state("admin")
			if len(s.Frameworks) != 2 || len(s.Tasks) != 2 || len(s.Agents) != 1 || len(s.Roles) != 1 || len(s.Roles[0].GetFrameworkIds()) != 2 {
				t.Fatalf("admin sees %v", s)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newTrustDomain(t)) })
	}
}

func TestAgentTrust(t *testing.T) {
	t.Parallel()
	register := func(id, host string, tasks ...*slacklinev1.AgentTask) *slacklinev1.RegisterRequest {
		return registerRequest(id, host, "cpus:4;mem:4096", tasks...)
	}
	// proven gives a reported task the proof of a launch on host with res.
	proven := func(d *domain, host, principal string, at *slacklinev1.AgentTask, res string) *slacklinev1.AgentTask {
		at.Task.LaunchProof = launchProof(d.c.launchKey, host, at.GetFrameworkId(), principal, at.GetTask().GetTaskId(), "",
			resources.MustParse(res), resources.Resources{})
		return at
	}
	running := slacklinev1.TaskState_TASK_STATE_RUNNING
	tests := []struct {
		name string
		run  func(t *testing.T, d *domain, fwID string, sub *subscription)
	}{
		{"genuine tasks are adopted after a restart", func(t *testing.T, d *domain, fwID string, sub *subscription) {
			id, err := d.registerAs("agent:a", register("", "host-a", proven(d, "host-a", "batch", agentTask(fwID, "t1", "cpus:1", running), "cpus:1")))
			if err != nil {
				t.Fatal(err)
			}
			if a := d.agent(id); d.c.core.AgentTaskCount(id) != 1 || len(commands(a)) != 0 {
				t.Fatalf("tasks %v", d.c.core.AgentTasks(id))
			}
		}},
		{"invented, inflated and foreign tasks are killed, not adopted", func(t *testing.T, d *domain, fwID string, sub *subscription) {
			invented := agentTask(fwID, "t1", "cpus:1", running)
			invented.Task.LaunchProof = []byte("trust me")
			inflated := proven(d, "host-a", "batch", agentTask(fwID, "t2", "cpus:1000000000000", running), "cpus:1")
			foreign := proven(d, "host-b", "batch", agentTask(fwID, "t3", "cpus:1", running), "cpus:1")
			id, err := d.registerAs("agent:a", register("", "host-a", invented, inflated, foreign, agentTask(fwID, "t4", "cpus:1", running)))
			if err != nil {
				t.Fatal(err)
			}
			a := d.agent(id)
			kills := 0
			for _, cmd := range commands(a) {
				if cmd.GetKillTask() != nil {
					kills++
				}
			}
			d.c.mu.Lock()
			allocated := d.c.core.Allocator().AgentAllocated(id)
			d.c.mu.Unlock()
			if d.c.core.AgentTaskCount(id) != 0 || kills != 4 || !allocated.IsEmpty() {
				t.Fatalf("tasks %v, kills %d, allocated %v", d.c.core.AgentTasks(id), kills, allocated)
			}
		}},
		{"an agent keeps its id and its session", func(t *testing.T, d *domain, fwID string, sub *subscription) {
			// (register_agents on the hostname is the interceptor's: see
			// internal/auth and the e2e tests.)
			idB, err := d.registerAs("agent:b", register("", "host-b"))
			if err != nil {
				t.Fatal(err)
			}
			// Agent a names b's id: refused, b untouched.
			if _, err := d.registerAs("agent:a", register(idB, "host-a")); connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("taking b's id: %v", err)
			}
			if d.agent(idB).Info.GetHostname() != "host-b" || d.agent(idB).session == nil {
				t.Fatal("b changed")
			}
			// b's session refuses a's calls.
			sessionB := d.agent(idB).session.id
			d.c.mu.Lock()
			_, err = d.c.session(as("agent:a"), idB, sessionB)
			d.c.mu.Unlock()
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("a using b's session: %v", err)
			}
		}},
		{"updates only for the agent's own tasks", func(t *testing.T, d *domain, fwID string, sub *subscription) {
			idA, _ := d.registerAs("agent:a", register("", "host-a"))
			idB, _ := d.registerAs("agent:b", register("", "host-b", proven(d, "host-b", "batch", agentTask(fwID, "t1", "cpus:1", running), "cpus:1")))
			events(sub)
			d.c.mu.Lock()
			errForged := d.c.handleStatus(d.c.agents[idA], &slacklinev1.TaskStatus{TaskId: "t1", FrameworkId: fwID, AgentId: idA,
				State: slacklinev1.TaskState_TASK_STATE_FAILED, Uuid: "u1"})
			errUnknown := d.c.handleStatus(d.c.agents[idA], &slacklinev1.TaskStatus{TaskId: "t9", FrameworkId: fwID, AgentId: idA,
				State: slacklinev1.TaskState_TASK_STATE_FAILED, Uuid: "u2"})
			d.c.mu.Unlock()
			if connect.CodeOf(errForged) != connect.CodePermissionDenied || errUnknown != nil {
				t.Fatalf("forged: %v; unknown: %v", errForged, errUnknown)
			}
			if got := updates(events(sub)); len(got) != 0 {
				t.Fatalf("framework got %v", got)
			}
			if a := d.agent(idA); len(commands(a)) != 1 { // the unknown update, acknowledged and dropped
				t.Fatal("unknown update not acknowledged")
			}
			if t1 := d.c.core.Task(fwID, "t1"); t1 == nil || t1.AgentID != idB || t1.State != running {
				t.Fatal("victim's task changed")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTrustDomain(t)
			fw, sub, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}, FailoverTimeoutSeconds: 60})
			if err != nil {
				t.Fatal(err)
			}
			sub.next()
			tt.run(t, d, fw.id(), sub)
		})
	}
}

// TestTrustedEndpoint: with authorization, an agent's endpoint is https at
// the address it connected from, or nothing: a clear-text claim is never
// published, so that nothing is sent to an agent in clear text.
func TestTrustedEndpoint(t *testing.T) {
	t.Parallel()
	secured := &Coordinator{cfg: Config{Authz: auth.New(&auth.Policy{})}}
	open := &Coordinator{}
	for _, tt := range []struct {
		name          string
		c             *Coordinator
		claimed, peer string
		want          string
		dropped       bool
	}{
		{"https at the peer's address", secured, "https://node-1.example:5051/x?y#z", "10.0.0.7:40000", "https://10.0.0.7:5051", false},
		{"http claim published nothing", secured, "http://127.0.0.1:17999", "127.0.0.1:40000", "", true},
		{"h2c claim", secured, "h2c://127.0.0.1:17999", "127.0.0.1:40000", "", true},
		{"no port", secured, "https://node-1", "10.0.0.7:40000", "", true},
		{"not a URL", secured, "://", "10.0.0.7:40000", "", true},
		{"IPv6 peer", secured, "https://node-1:5051", "[fd00::7]:40000", "https://[fd00::7]:5051", false},
		{"no claim", secured, "", "10.0.0.7:40000", "", false},
		{"insecure cluster: as claimed", open, "http://127.0.0.1:17999", "127.0.0.1:40000", "http://127.0.0.1:17999", false},
	} {
		got, dropped := tt.c.trustedEndpoint(tt.claimed, tt.peer)
		if got != tt.want || (dropped != "") != tt.dropped {
			t.Errorf("%s: trustedEndpoint(%q, %q) = %q, %q; want %q, dropped %v", tt.name, tt.claimed, tt.peer, got, dropped, tt.want, tt.dropped)
		}
	}
}
