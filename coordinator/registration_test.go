package coordinator

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

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
			if a == nil || a.State != slacklinev1.AgentState_AGENT_STATE_ACTIVE || a.session == nil || !d.c.core.InAllocator(id) || a.RegisteredAt != testNow {
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
			if a := d.agent(id); len(d.c.core.AgentOffers(id)) != 0 || !a.Total.Equal(resources.MustParse("cpus:4;mem:1024")) {
				t.Fatalf("offers %v, total %v", d.c.core.AgentOffers(id), a.Total)
			}
		}},
		{"a refused registration changes nothing", func(t *testing.T, d *domain) {
			id := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			d.c.mu.Lock()
			d.c.agents[id].State = slacklinev1.AgentState_AGENT_STATE_GONE
			d.c.mu.Unlock()
			_, err := d.register(registerRequest(id, "host-a", "cpus:2;mem:1024"))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("err = %v", err)
			}
			if d.agent(id).State != slacklinev1.AgentState_AGENT_STATE_GONE {
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
			if a := d.agent(old); a.State != slacklinev1.AgentState_AGENT_STATE_GONE || a.session != nil || d.c.core.InAllocator(old) || d.c.core.AgentTaskCount(old) != 0 {
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
