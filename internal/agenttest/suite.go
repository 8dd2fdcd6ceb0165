package agenttest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Start starts the agent under test, with an empty state, against the
// coordinator at coordinatorURL, and returns a function that stops it and
// waits until it stopped. The agent must accept a task of cpus:0.1;mem:32
// running "sleep 3600", and should use a short registration backoff (at
// most a second) so that the suite runs quickly.
type Start func(t *testing.T, coordinatorURL string) (stop func())

// Run runs the protocol suite: the behaviour every implementation of the
// agent side of AgentService must show, observed from the coordinator's
// side only. Both the real agent (e2e) and the simulator (sim) pass it.
// Each case gets a fresh scripted coordinator and a fresh agent.
func Run(t *testing.T, start Start) {
	cases := []struct {
		name string
		run  func(t *testing.T, c *scripted)
	}{
		{"registers and heartbeats", registers},
		{"launch reports RUNNING", launchRuns},
		{"kill reports KILLED and an acknowledged end is forgotten", killEnds},
		{"kill of an unknown task reports DROPPED", killUnknown},
		{"acknowledgements release a task's updates in order", acknowledgementsDrain},
		{"updates are re-sent after a coordinator restart", func(t *testing.T, c *scripted) { resentAfterLoss(t, c, c.restart) }},
		{"updates are re-sent after the session expired", func(t *testing.T, c *scripted) {
			resentAfterLoss(t, c, func() { c.expire(c.streaming(0)) })
		}},
		{"shutdown_framework kills that framework's tasks only", shutdownFramework},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startScripted(t)
			stop := start(t, c.URL)
			defer stop()
			tc.run(t, c)
		})
	}
}

const (
	running = slacklinev1.TaskState_TASK_STATE_RUNNING
	killed  = slacklinev1.TaskState_TASK_STATE_KILLED
	dropped = slacklinev1.TaskState_TASK_STATE_DROPPED
)

func runTask(frameworkID, taskID string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_RunTask{RunTask: &slacklinev1.RunTaskCommand{
		Framework: &slacklinev1.FrameworkInfo{Id: frameworkID, Name: "protocol-suite"},
		Task: &slacklinev1.TaskInfo{
			TaskId: taskID, Name: taskID, Resources: resources.MustParse("cpus:0.1;mem:32").Proto("", resources.Regular),
			Command: &slacklinev1.CommandInfo{Value: "sleep 3600", Shell: true},
		},
	}}}
}

func killTask(frameworkID, taskID string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_KillTask{KillTask: &slacklinev1.KillTaskCommand{FrameworkId: frameworkID, TaskId: taskID}}}
}

func acknowledge(r received) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Acknowledge{Acknowledge: &slacklinev1.AcknowledgeCommand{
		FrameworkId: r.req.GetFrameworkId(), TaskId: r.status().GetTaskId(), Uuid: r.status().GetUuid(),
	}}}
}

// reported returns "framework/task/STATE" for the tasks of a registration.
func reported(req *slacklinev1.RegisterRequest) []string {
	var out []string
	for _, at := range req.GetTasks() {
		out = append(out, fmt.Sprintf("%s/%s/%v", at.GetFrameworkId(), at.GetTask().GetTaskId(), at.GetState()))
	}
	slices.Sort(out)
	return out
}

// reregister ends the agent's session (the stream fails as a stale one
// would) and returns the next registration and its session.
func reregister(t *testing.T, c *scripted) (*slacklinev1.RegisterRequest, *liveSession) {
	t.Helper()
	sess := c.streaming(0)
	n := len(c.registrations())
	c.mu.Lock()
	c.endLocked(sess, errStaleSession)
	c.mu.Unlock()
	next := c.streaming(n + 1)
	return c.registrations()[n], next
}

func registers(t *testing.T, c *scripted) {
	sess := c.streaming(1)
	req := c.registrations()[0]
	if req.GetProtocolVersion() != slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1 {
		t.Errorf("protocol version %v, want AGENT_PROTOCOL_VERSION_1", req.GetProtocolVersion())
	}
	info := req.GetAgentInfo()
	if info.GetId() != "" || info.GetHostname() == "" || len(info.GetResources()) == 0 || len(req.GetTasks()) != 0 {
		t.Errorf("first registration %v: want no id, a hostname, resources and no tasks", req)
	}
	// Heartbeats at the coordinator's interval.
	c.waitFor("two heartbeats", func() bool { return c.heartbeats[sess.id] >= 2 })
}

func launchRuns(t *testing.T, c *scripted) {
	sess := c.streaming(1)
	c.send(sess, runTask("fw-1", "t1"))
	r := c.update("fw-1", "t1", running)
	st := r.status()
	if r.sessionID != sess.id || r.req.GetAgentId() != sess.agentID {
		t.Errorf("update sent as %s in %s, want %s in %s", r.req.GetAgentId(), r.sessionID, sess.agentID, sess.id)
	}
	if st.GetFrameworkId() != "fw-1" || st.GetUuid() == "" || st.GetTimestamp() == nil || st.GetSource() != slacklinev1.TaskSource_TASK_SOURCE_AGENT {
		t.Errorf("RUNNING update %v: want framework id, uuid, timestamp and source agent", st)
	}
	if first := c.updatesOf("fw-1", "t1")[0].status(); first.GetState() != running {
		t.Errorf("first update of a launched task is %v, want RUNNING", first.GetState())
	}
}

func killEnds(t *testing.T, c *scripted) {
	sess := c.streaming(1)
	c.send(sess, runTask("fw-1", "t1"))
	c.send(sess, acknowledge(c.update("fw-1", "t1", running)))
	c.send(sess, killTask("fw-1", "t1"))
	end := c.update("fw-1", "t1", killed)
	if reason := end.status().GetReason(); reason != slacklinev1.Reason_REASON_TASK_KILLED {
		t.Errorf("KILLED with reason %v, want REASON_TASK_KILLED", reason)
	}
	// Forgotten once its last update is acknowledged: the agent stops
	// listing it when it registers.
	c.send(sess, acknowledge(end))
	if req, _ := reregister(t, c); len(req.GetTasks()) != 0 {
		t.Errorf("re-registration after the acknowledged end reports %v, want no task", reported(req))
	}
}

func killUnknown(t *testing.T, c *scripted) {
	sess := c.streaming(1)
	c.send(sess, killTask("fw-1", "ghost"))
	r := c.update("fw-1", "ghost", dropped)
	if reason := r.status().GetReason(); reason != slacklinev1.Reason_REASON_TASK_UNKNOWN {
		t.Errorf("DROPPED with reason %v, want REASON_TASK_UNKNOWN", reason)
	}
}

func acknowledgementsDrain(t *testing.T, c *scripted) {
	sess := c.streaming(1)
	c.send(sess, runTask("fw-1", "t1"))
	first := c.update("fw-1", "t1", running)
	c.send(sess, killTask("fw-1", "t1"))
	// The agent handles a session's commands in order: once it dropped the
	// probe, it took the kill. Ending the session before that could lose
	// the kill with the stream (a fresh-clone CI run beside CPU hogs: t1
	// still RUNNING after 20 s of registrations).
	c.send(sess, killTask("fw-1", "kill-probe"))
	c.send(sess, acknowledge(c.update("fw-1", "kill-probe", dropped)))
	// Register again until the agent says the task ended (its container
	// stops asynchronously).
	deadline := time.Now().Add(waitTimeout)
	for {
		req, next := reregister(t, c)
		sess = next
		if slices.Equal(reported(req), []string{"fw-1/t1/TASK_STATE_KILLED"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent still reports %v, want t1 KILLED", reported(req))
		}
	}
	// Every new session gets the oldest unacknowledged update again.
	c.waitFor("RUNNING re-sent in the new session", func() bool {
		for _, r := range c.updates {
			if r.sessionID == sess.id && r.status().GetUuid() == first.status().GetUuid() {
				return true
			}
		}
		return false
	})
	// An acknowledgement of another uuid changes nothing (the probe's
	// DROPPED tells that the agent handled it).
	c.send(sess, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Acknowledge{Acknowledge: &slacklinev1.AcknowledgeCommand{
		FrameworkId: "fw-1", TaskId: "t1", Uuid: "not-an-update",
	}}})
	c.send(sess, killTask("fw-1", "probe"))
	c.update("fw-1", "probe", dropped)
	for _, r := range c.updatesOf("fw-1", "t1") {
		if r.status().GetState() != running {
			t.Fatalf("%v sent while RUNNING is not acknowledged: a task's updates go one at a time", r.status().GetState())
		}
	}
	// RUNNING's acknowledgement releases KILLED.
	c.send(sess, acknowledge(first))
	if end := c.update("fw-1", "t1", killed); end.sessionID != sess.id {
		t.Errorf("KILLED sent in %s, want %s", end.sessionID, sess.id)
	}
}

func resentAfterLoss(t *testing.T, c *scripted, lose func()) {
	sess := c.streaming(1)
	c.send(sess, runTask("fw-1", "t1"))
	first := c.update("fw-1", "t1", running)
	lose()
	next := c.streaming(2)
	req := c.registrations()[1]
	if req.GetAgentInfo().GetId() != sess.agentID {
		t.Errorf("re-registered with id %q, want %q", req.GetAgentInfo().GetId(), sess.agentID)
	}
	if got, want := reported(req), []string{"fw-1/t1/TASK_STATE_RUNNING"}; !slices.Equal(got, want) {
		t.Errorf("re-registration reports %v, want %v", got, want)
	}
	c.waitFor("the unacknowledged RUNNING re-sent in the new session", func() bool {
		for _, r := range c.updates {
			if r.sessionID == next.id && r.status().GetUuid() == first.status().GetUuid() {
				return true
			}
		}
		return false
	})
}

func shutdownFramework(t *testing.T, c *scripted) {
	sess := c.streaming(1)
	for _, key := range [][2]string{{"fw-1", "a"}, {"fw-1", "b"}, {"fw-2", "c"}} {
		c.send(sess, runTask(key[0], key[1]))
		c.send(sess, acknowledge(c.update(key[0], key[1], running)))
	}
	c.send(sess, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
		ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: "fw-1"},
	}})
	c.update("fw-1", "a", killed)
	c.update("fw-1", "b", killed)
	req, _ := reregister(t, c)
	want := []string{"fw-1/a/TASK_STATE_KILLED", "fw-1/b/TASK_STATE_KILLED", "fw-2/c/TASK_STATE_RUNNING"}
	if got := reported(req); !slices.Equal(got, want) {
		t.Errorf("after shutdown_framework fw-1 the agent reports %v, want %v", got, want)
	}
	if n := len(c.updatesOf("fw-2", "c")); n != 1 {
		t.Errorf("fw-2's task got %d updates, want only RUNNING", n)
	}
}
