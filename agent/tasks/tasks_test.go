package tasks

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

const (
	staging  = slacklinev1.TaskState_TASK_STATE_STAGING
	running  = slacklinev1.TaskState_TASK_STATE_RUNNING
	finished = slacklinev1.TaskState_TASK_STATE_FINISHED
	failed   = slacklinev1.TaskState_TASK_STATE_FAILED
	killed   = slacklinev1.TaskState_TASK_STATE_KILLED
	lost     = slacklinev1.TaskState_TASK_STATE_LOST
	dropped  = slacklinev1.TaskState_TASK_STATE_DROPPED
	errored  = slacklinev1.TaskState_TASK_STATE_ERROR
	gone     = slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR
)

var t0 = time.Unix(1_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// counter returns a NewID that yields id1, id2, ...
func counter() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("id%d", n) }
}

func newMachine() *Machine {
	return New(Config{RetryMin: time.Second, RetryMax: 4 * time.Second, NewID: counter()})
}

func runTask(fw, id, res string) Launch {
	info := &slacklinev1.TaskInfo{TaskId: id, Name: id}
	if res != "" {
		info.Resources = []*slacklinev1.Resource{{Name: "cpus", Scalar: 0.5}}
		if res == "revocable" {
			info.Resources[0].Revocable = true
		}
		if res == "invalid" {
			info.Resources[0].Scalar = -1
		}
	}
	return Launch{Command: &slacklinev1.RunTaskCommand{Framework: &slacklinev1.FrameworkInfo{Id: fw}, Task: info}, Now: t0}
}

// summary renders effects compactly: checkpoint writes, containers, sends.
func summary(e Effects) string {
	var parts []string
	for _, w := range e.Checkpoint {
		switch {
		case w.Task != nil:
			parts = append(parts, fmt.Sprintf("put-task %s/%s %s", w.Task.GetTask().GetFrameworkId(), w.Task.GetTask().GetTask().GetTaskId(), short(w.Task.GetTask().GetState())))
		case w.Forget != nil:
			parts = append(parts, "forget "+w.Forget.String())
		case w.Update != nil:
			parts = append(parts, fmt.Sprintf("put-update %s %s %s%s", w.Update.Key(), short(w.Update.Status.GetState()), w.Update.Status.GetUuid(), health(w.Update.Status)))
		case w.Acknowledged != "":
			parts = append(parts, "ack "+strings.ReplaceAll(w.Acknowledged, "\x00", "/"))
		}
	}
	for _, s := range e.Start {
		parts = append(parts, fmt.Sprintf("start %s %s revocable=%v", s.ContainerID, s.Key, s.Revocable))
	}
	for _, c := range e.Kill {
		parts = append(parts, "kill "+c)
	}
	for _, c := range e.Destroy {
		parts = append(parts, "destroy "+c)
	}
	for _, u := range e.Send {
		parts = append(parts, fmt.Sprintf("send %s %s %s%s", u.Key(), short(u.Status.GetState()), u.Status.GetUuid(), health(u.Status)))
	}
	return strings.Join(parts, "; ")
}

// health renders an update's healthy field when it is set.
func health(s *slacklinev1.TaskStatus) string {
	if s.Healthy == nil {
		return ""
	}
	return fmt.Sprintf(" healthy=%v", s.GetHealthy())
}

func short(s slacklinev1.TaskState) string {
	return strings.TrimPrefix(s.String(), "TASK_STATE_")
}

func key(fw, id string) Key { return Key{fw, id} }

type step struct {
	ev      Event
	want    string // summary of the effects; "*" for any
	wantErr error  // errAny for any error
}

var errAny = errors.New("any error")

func run(t *testing.T, m *Machine, steps []step) {
	t.Helper()
	for i, s := range steps {
		eff, err := m.Step(s.ev)
		if s.wantErr == nil && err != nil || s.wantErr == errAny && err == nil || s.wantErr != nil && s.wantErr != errAny && !errors.Is(err, s.wantErr) {
			t.Fatalf("step %d (%T): err = %v, want %v", i, s.ev, err, s.wantErr)
		}
		if got := summary(eff); s.want != "*" && got != s.want {
			t.Fatalf("step %d (%T):\n got  %s\n want %s", i, s.ev, got, s.want)
		}
	}
}

func TestLifecycle(t *testing.T) {
	open := SessionOpened{Now: t0}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "launch, run, finish, acknowledge both updates, forget",
		steps: []step{
			{ev: open},
			{ev: runTask("fw", "t1", "cpus"), want: "put-task fw/t1 STAGING; start id1 fw/t1 revocable=false"},
			{ev: Launched{ContainerID: "id1", Message: "pid 7", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2; send fw/t1 RUNNING id2"},
			{ev: Exited{ContainerID: "id1", Exit: Exit{ExitCode: 0, Message: "exited with code 0"}, Now: t0},
				// Only the oldest update is in flight: FINISHED waits for RUNNING's acknowledgement.
				want: "put-task fw/t1 FINISHED; put-update fw/t1 FINISHED id3; destroy id1"},
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "id2", Now: t0}, want: "ack fw/t1/00000000000000000001; send fw/t1 FINISHED id3"},
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "id3", Now: t0}, want: "ack fw/t1/00000000000000000002; forget fw/t1"},
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "id3", Now: t0}, wantErr: ErrUnknownTask},
		},
	}, {
		name: "revocable task",
		steps: []step{
			{ev: runTask("fw", "t1", "revocable"), want: "put-task fw/t1 STAGING; start id1 fw/t1 revocable=true"},
		},
	}, {
		name: "duplicate launch changes nothing",
		steps: []step{
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: runTask("fw", "t1", ""), wantErr: ErrDuplicateLaunch},
		},
	}, {
		name: "launch without ids is refused",
		steps: []step{
			{ev: runTask("", "t1", ""), wantErr: ErrInvalidLaunch},
			{ev: runTask("fw", "", ""), wantErr: ErrInvalidLaunch},
		},
	}, {
		name: "invalid resources end the task ERROR without a container",
		steps: []step{
			{ev: open},
			{ev: runTask("fw", "t1", "invalid"), want: "put-task fw/t1 ERROR; put-update fw/t1 ERROR id2; send fw/t1 ERROR id2"},
		},
	}, {
		name: "launch failure",
		steps: []step{
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: LaunchFailed{ContainerID: "id1", Message: "no such file", Now: t0}, want: "put-task fw/t1 FAILED; put-update fw/t1 FAILED id2"},
			{ev: Launched{ContainerID: "id1", Now: t0}, wantErr: errAny},
		},
	}, {
		name: "kill of an unknown task reports DROPPED, then forgets it on acknowledgement",
		steps: []step{
			{ev: open},
			{ev: Kill{Key: key("fw", "ghost"), Now: t0}, want: "put-task fw/ghost DROPPED; put-update fw/ghost DROPPED id1; send fw/ghost DROPPED id1"},
			{ev: Kill{Key: key("fw", "ghost"), Now: t0}, wantErr: ErrAlreadyEnded},
			{ev: Acknowledge{Key: key("fw", "ghost"), UUID: "id1", Now: t0}, want: "ack fw/ghost/00000000000000000001; forget fw/ghost"},
		},
	}, {
		name: "kill while launching waits for the launch",
		steps: []step{
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Kill{Key: key("fw", "t1"), Now: t0}, want: ""},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2; kill id1"},
			{ev: Exited{ContainerID: "id1", Exit: Exit{Killed: true, ExitCode: -1}, Now: t0}, want: "put-task fw/t1 KILLED; put-update fw/t1 KILLED id3; destroy id1"},
		},
	}, {
		name: "kill with a state override is checkpointed and reported",
		steps: []step{
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2"},
			{ev: Kill{Key: key("fw", "t1"), StateOverride: gone, Now: t0}, want: "put-task fw/t1 RUNNING; kill id1"},
			{ev: Exited{ContainerID: "id1", Exit: Exit{Killed: true}, Now: t0}, want: "put-task fw/t1 GONE_BY_OPERATOR; put-update fw/t1 GONE_BY_OPERATOR id3; destroy id1"},
			{ev: Exited{ContainerID: "id1", Exit: Exit{Killed: true}, Now: t0}, want: "destroy id1"},
		},
	}, {
		name: "a second agent-decided kill is ignored, a coordinator kill is repeated",
		steps: []step{
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2"},
			{ev: Kill{Key: key("fw", "t1"), StateOverride: killed, Reason: slacklinev1.Reason_REASON_CONTAINER_PREEMPTED, Message: "qos", Now: t0}, want: "put-task fw/t1 RUNNING; kill id1"},
			{ev: Kill{Key: key("fw", "t1"), StateOverride: killed, Reason: slacklinev1.Reason_REASON_CONTAINER_PREEMPTED, Message: "qos", Now: t0}, wantErr: ErrAlreadyKilling},
			{ev: Kill{Key: key("fw", "t1"), Now: t0}, want: "kill id1"},
		},
	}, {
		name: "exit of an unknown container is destroyed",
		steps: []step{
			{ev: Exited{ContainerID: "stray", Now: t0}, want: "destroy stray", wantErr: ErrUnknownContainer},
		},
	}, {
		name: "acknowledgement of an old or unknown uuid changes nothing",
		steps: []step{
			{ev: open},
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2; send fw/t1 RUNNING id2"},
			{ev: Exited{ContainerID: "id1", Exit: Exit{ExitCode: 3}, Now: t0}, want: "put-task fw/t1 FAILED; put-update fw/t1 FAILED id3; destroy id1"},
			// id3 is queued behind id2: acknowledging it first is stale.
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "id3", Now: t0}, wantErr: ErrStaleAcknowledgement},
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "nope", Now: t0}, wantErr: ErrStaleAcknowledgement},
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "id2", Now: t0}, want: "ack fw/t1/00000000000000000001; send fw/t1 FAILED id3"},
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "id2", Now: t0}, wantErr: ErrStaleAcknowledgement},
		},
	}, {
		name: "nothing is sent without a session; opening one sends every head",
		steps: []step{
			{ev: runTask("fw", "t2", ""), want: "*"},
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t2 RUNNING; put-update fw/t2 RUNNING id3"},
			{ev: Launched{ContainerID: "id2", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id4"},
			{ev: Tick{Now: at(time.Hour)}, want: ""},
			{ev: SessionOpened{Now: at(time.Hour)}, want: "send fw/t1 RUNNING id4; send fw/t2 RUNNING id3"},
		},
	}, {
		name: "session loss while updates are unacknowledged: re-sent in the next session",
		steps: []step{
			{ev: open},
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2; send fw/t1 RUNNING id2"},
			{ev: SessionLost{}},
			{ev: Tick{Now: at(10 * time.Second)}, want: ""},
			{ev: SessionOpened{Now: at(11 * time.Second)}, want: "send fw/t1 RUNNING id2"},
			// The retry starts again at RetryMin in the new session.
			{ev: Tick{Now: at(11*time.Second + 999*time.Millisecond)}, want: ""},
			{ev: Tick{Now: at(12 * time.Second)}, want: "send fw/t1 RUNNING id2"},
		},
	}, {
		name: "re-sends back off exponentially up to RetryMax",
		steps: []step{
			{ev: open},
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2; send fw/t1 RUNNING id2"},
			{ev: Tick{Now: at(999 * time.Millisecond)}, want: ""},
			{ev: Tick{Now: at(1 * time.Second)}, want: "send fw/t1 RUNNING id2"},  // +1 s
			{ev: Tick{Now: at(2 * time.Second)}, want: ""},                        // next at +2 s
			{ev: Tick{Now: at(3 * time.Second)}, want: "send fw/t1 RUNNING id2"},  // +2 s
			{ev: Tick{Now: at(7 * time.Second)}, want: "send fw/t1 RUNNING id2"},  // +4 s
			{ev: Tick{Now: at(10 * time.Second)}, want: ""},                       // capped at 4 s
			{ev: Tick{Now: at(11 * time.Second)}, want: "send fw/t1 RUNNING id2"}, // +4 s
		},
	}, {
		name: "shutdown of a framework kills its live tasks only",
		steps: []step{
			{ev: runTask("a", "t1", ""), want: "*"},
			{ev: runTask("b", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task a/t1 RUNNING; put-update a/t1 RUNNING id3"},
			{ev: Launched{ContainerID: "id2", Now: t0}, want: "put-task b/t1 RUNNING; put-update b/t1 RUNNING id4"},
			{ev: ShutdownFramework{FrameworkID: "a", Now: t0}, want: "kill id1"},
		},
	}, {
		name: "shutdown of the agent ends every live task GONE_BY_OPERATOR",
		steps: []step{
			{ev: runTask("a", "t1", ""), want: "*"},
			{ev: runTask("b", "t1", ""), want: "*"},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task a/t1 RUNNING; put-update a/t1 RUNNING id3"},
			{ev: ShutdownAgent{Now: t0}, want: "put-task a/t1 RUNNING; put-task b/t1 STAGING; kill id1"},
			{ev: Launched{ContainerID: "id2", Now: t0}, want: "put-task b/t1 RUNNING; put-update b/t1 RUNNING id4; kill id2"},
			{ev: Exited{ContainerID: "id2", Exit: Exit{Killed: true}, Now: t0}, want: "put-task b/t1 GONE_BY_OPERATOR; put-update b/t1 GONE_BY_OPERATOR id5; destroy id2"},
		},
	}, {
		name: "health changes are sent as RUNNING updates; a health-check kill ends FAILED with its reason, still unhealthy",
		steps: []step{
			{ev: open},
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: HealthChanged{ContainerID: "id1", Healthy: true, Now: t0}, wantErr: ErrNotRunning},
			{ev: Launched{ContainerID: "id1", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id2; send fw/t1 RUNNING id2"},
			{ev: HealthChanged{ContainerID: "id1", Healthy: true, Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id3 healthy=true"},
			{ev: HealthChanged{ContainerID: "id1", Healthy: true, Now: t0}, wantErr: ErrHealthUnchanged},
			{ev: Acknowledge{Key: key("fw", "t1"), UUID: "id2", Now: t0}, want: "ack fw/t1/00000000000000000001; send fw/t1 RUNNING id3 healthy=true"},
			{ev: HealthChanged{ContainerID: "id1", Healthy: false, Message: "health check failed (1 of 2 in a row)", Now: t0}, want: "put-task fw/t1 RUNNING; put-update fw/t1 RUNNING id4 healthy=false"},
			{ev: Kill{Key: key("fw", "t1"), StateOverride: failed, Reason: slacklinev1.Reason_REASON_TASK_HEALTH_CHECK_STATUS_FAILED, Message: "health check failed 2 times in a row", Now: t0}, want: "put-task fw/t1 RUNNING; kill id1"},
			{ev: HealthChanged{ContainerID: "id1", Healthy: true, Now: t0}, wantErr: ErrNotRunning},
			{ev: Exited{ContainerID: "id1", Exit: Exit{Killed: true}, Now: t0}, want: "put-task fw/t1 FAILED; put-update fw/t1 FAILED id5 healthy=false; destroy id1"},
		},
	}, {
		name: "a launch that fails after a kill (its fetch cancelled) ends KILLED, during launch",
		steps: []step{
			{ev: runTask("fw", "t1", ""), want: "*"},
			{ev: Kill{Key: key("fw", "t1"), Now: t0}, want: ""},
			{ev: LaunchFailed{ContainerID: "id1", Reason: slacklinev1.Reason_REASON_FETCH_FAILED, Message: "fetch http://h/x: context canceled", Now: t0},
				want: "put-task fw/t1 KILLED; put-update fw/t1 KILLED id2"},
		},
	}, {
		name: "health of an unknown container",
		steps: []step{
			{ev: HealthChanged{ContainerID: "stray", Healthy: true, Now: t0}, wantErr: ErrUnknownContainer},
		},
	}, {
		name: "an invalid health check ends the task ERROR without a container",
		steps: []step{
			{ev: open},
			{ev: Launch{Command: &slacklinev1.RunTaskCommand{Framework: &slacklinev1.FrameworkInfo{Id: "fw"},
				Task: &slacklinev1.TaskInfo{TaskId: "t1", HealthCheck: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP}}}, Now: t0},
				want: "put-task fw/t1 ERROR; put-update fw/t1 ERROR id2; send fw/t1 ERROR id2"},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { run(t, newMachine(), tc.steps) })
	}
}

func TestExitStatus(t *testing.T) {
	preempted := slacklinev1.Reason_REASON_CONTAINER_PREEMPTED
	tests := []struct {
		name       string
		exit       Exit
		killState  slacklinev1.TaskState
		killReason slacklinev1.Reason
		state      slacklinev1.TaskState
		reason     slacklinev1.Reason
		message    string
	}{
		{"exit 0", Exit{ExitCode: 0, Message: "exited with code 0"}, 0, 0, finished, 0, "exited with code 0"},
		{"exit 3", Exit{ExitCode: 3, Message: "exited with code 3"}, 0, 0, failed, slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED, "exited with code 3"},
		{"oom", Exit{ExitCode: -1, OOMKilled: true, Message: "OOM"}, 0, 0, failed, slacklinev1.Reason_REASON_CONTAINER_LIMITATION_MEMORY, "OOM"},
		{"killed", Exit{ExitCode: -1, Killed: true, Message: "killed"}, 0, 0, killed, slacklinev1.Reason_REASON_TASK_KILLED, "killed"},
		{"killed, override", Exit{Killed: true, Message: "killed"}, gone, 0, gone, slacklinev1.Reason_REASON_TASK_KILLED, "killed"},
		{"preempted by QoS", Exit{Killed: true, Message: "killed"}, killed, preempted, killed, preempted, "qos says"},
		{"lost", Exit{Lost: true, Message: "vanished"}, 0, 0, lost, slacklinev1.Reason_REASON_AGENT_RESTARTED, "vanished"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine()
			steps := []Event{runTask("fw", "t1", ""), Launched{ContainerID: "id1", Now: t0}}
			if tc.killState != 0 || tc.killReason != 0 {
				steps = append(steps, Kill{Key: key("fw", "t1"), StateOverride: tc.killState, Reason: tc.killReason, Message: "qos says", Now: t0})
			}
			for _, ev := range steps {
				if _, err := m.Step(ev); err != nil {
					t.Fatal(err)
				}
			}
			eff, err := m.Step(Exited{ContainerID: "id1", Exit: tc.exit, Now: t0})
			if err != nil {
				t.Fatal(err)
			}
			var st *slacklinev1.TaskStatus
			for _, w := range eff.Checkpoint {
				if w.Update != nil {
					st = w.Update.Status
				}
			}
			if st.GetState() != tc.state || st.GetReason() != tc.reason || st.GetMessage() != tc.message {
				t.Fatalf("status = %v %v %q, want %v %v %q", st.GetState(), st.GetReason(), st.GetMessage(), tc.state, tc.reason, tc.message)
			}
			if st.GetSource() != slacklinev1.TaskSource_TASK_SOURCE_AGENT || !st.GetTimestamp().AsTime().Equal(t0) || st.GetFrameworkId() != "fw" {
				t.Fatalf("status fields: %v", st)
			}
		})
	}
}

// checkpointOf replays effects into a fake checkpoint, as an executor would.
type fakeCheckpoint struct {
	tasks   map[Key]*slacklinev1.AgentTaskRecord
	updates map[string]*slacklinev1.AgentStatusRecord
}

func newFakeCheckpoint() *fakeCheckpoint {
	return &fakeCheckpoint{tasks: map[Key]*slacklinev1.AgentTaskRecord{}, updates: map[string]*slacklinev1.AgentStatusRecord{}}
}

func (c *fakeCheckpoint) apply(e Effects) {
	for _, w := range e.Checkpoint {
		switch {
		case w.Task != nil:
			c.tasks[Key{w.Task.GetTask().GetFrameworkId(), w.Task.GetTask().GetTask().GetTaskId()}] = w.Task
		case w.Forget != nil:
			delete(c.tasks, *w.Forget)
		case w.Update != nil:
			c.updates[w.Update.CheckpointKey] = &slacklinev1.AgentStatusRecord{FrameworkId: w.Update.FrameworkID, Status: w.Update.Status}
		case w.Acknowledged != "":
			delete(c.updates, w.Acknowledged)
		}
	}
}

func (c *fakeCheckpoint) recovery(running, known []string, rebooted bool) Recovery {
	r := Recovery{Updates: c.updates, Running: map[string]bool{}, Known: map[string]bool{}, Rebooted: rebooted, Now: at(time.Minute)}
	for _, rec := range c.tasks {
		r.Tasks = append(r.Tasks, rec)
	}
	for _, id := range running {
		r.Running[id], r.Known[id] = true, true
	}
	for _, id := range known {
		r.Known[id] = true
	}
	return r
}

func TestRecover(t *testing.T) {
	// Before the restart: t1 runs (RUNNING unacknowledged), t2 runs and its
	// RUNNING was acknowledged, t3 was launched but RUNNING was never
	// checkpointed (STAGING), t4's launch never reached the containerizer,
	// t5 finished and its updates were all acknowledged but the agent died
	// before forgetting it... (simulated below), t6 was being preempted.
	build := func() *fakeCheckpoint {
		ckpt := newFakeCheckpoint()
		m := newMachine()
		step := func(ev Event) {
			t.Helper()
			eff, err := m.Step(ev)
			if err != nil {
				t.Fatal(err)
			}
			ckpt.apply(eff)
		}
		for _, id := range []string{"t1", "t2", "t3", "t4", "t6"} {
			step(runTask("fw", id, "")) // containers id1, id2, id3, id4, id5
		}
		step(Launched{ContainerID: "id1", Now: t0})                   // t1 RUNNING: update id6
		step(Launched{ContainerID: "id2", Now: t0})                   // t2 RUNNING: update id7
		step(Acknowledge{Key: key("fw", "t2"), UUID: "id7", Now: t0}) // drained
		step(Launched{ContainerID: "id5", Now: t0})                   // t6 RUNNING: update id8
		step(Acknowledge{Key: key("fw", "t6"), UUID: "id8", Now: t0}) // drained
		step(Kill{Key: key("fw", "t6"), StateOverride: killed, Reason: slacklinev1.Reason_REASON_CONTAINER_PREEMPTED, Message: "qos", Now: t0})
		// t5: an ended task whose record survived its last acknowledgement.
		ckpt.tasks[key("fw", "t5")] = &slacklinev1.AgentTaskRecord{
			Task: &slacklinev1.AgentTask{FrameworkId: "fw", Task: &slacklinev1.TaskInfo{TaskId: "t5"}, State: finished}, ContainerId: "c5"}
		return ckpt
	}

	t.Run("agent restart", func(t *testing.T) {
		ckpt := build()
		// id1 (t1), id3 (t3), id5 (t6) still run; id2 (t2) died while the
		// agent was down (known, its exit comes later); id4 (t4) unknown.
		m, eff := Recover(Config{RetryMin: time.Second, NewID: counter()}, ckpt.recovery([]string{"id1", "id3", "id5"}, []string{"id2"}, false))
		want := "put-task fw/t3 RUNNING; put-update fw/t3 RUNNING id1; " +
			"put-task fw/t4 LOST; put-update fw/t4 LOST id2; forget fw/t5; kill id5"
		if got := summary(eff); got != want {
			t.Fatalf("recovery effects:\n got  %s\n want %s", got, want)
		}
		ckpt.apply(eff)
		// The sequence continues after the checkpointed ones.
		for _, w := range eff.Checkpoint {
			if w.Update != nil && updateSeq(w.Update.CheckpointKey) <= 1 { // t1's RUNNING is 1
				t.Fatalf("update key %q reuses a sequence number", w.Update.CheckpointKey)
			}
		}
		// Registration lists the tasks with their states; t5 is gone.
		var states []string
		for _, at := range m.Registration() {
			states = append(states, at.GetTask().GetTaskId()+"="+short(at.GetState()))
		}
		if got := strings.Join(states, " "); got != "t1=RUNNING t2=RUNNING t3=RUNNING t4=LOST t6=RUNNING" {
			t.Fatalf("registration: %s", got)
		}
		// The dead container's exit settles t2; t1's RUNNING is re-sent in the session.
		run(t, m, []step{
			{ev: Exited{ContainerID: "id2", Exit: Exit{ExitCode: 1, Message: "exited with code 1"}, Now: t0},
				want: "put-task fw/t2 FAILED; put-update fw/t2 FAILED id3; destroy id2"},
			{ev: SessionOpened{Now: t0}, want: "send fw/t1 RUNNING id6; send fw/t2 FAILED id3; send fw/t3 RUNNING id1; send fw/t4 LOST id2"},
			{ev: Exited{ContainerID: "id5", Exit: Exit{Killed: true, Message: "killed"}, Now: t0},
				want: "put-task fw/t6 KILLED; put-update fw/t6 KILLED id4; destroy id5; send fw/t6 KILLED id4"},
		})
		if v, _ := m.Task(key("fw", "t6")); v.Unacknowledged != 1 {
			t.Fatalf("t6: %+v", v)
		}
	})

	t.Run("host reboot", func(t *testing.T) {
		ckpt := build()
		m, eff := Recover(Config{NewID: counter()}, ckpt.recovery(nil, nil, true))
		want := "put-task fw/t1 LOST; put-update fw/t1 LOST id1; put-task fw/t2 LOST; put-update fw/t2 LOST id2; " +
			"put-task fw/t3 LOST; put-update fw/t3 LOST id3; put-task fw/t4 LOST; put-update fw/t4 LOST id4; forget fw/t5; " +
			"put-task fw/t6 LOST; put-update fw/t6 LOST id5"
		if got := summary(eff); got != want {
			t.Fatalf("recovery effects:\n got  %s\n want %s", got, want)
		}
		// t1 still owes its RUNNING before LOST.
		if v, _ := m.Task(key("fw", "t1")); v.Unacknowledged != 2 || v.State != lost {
			t.Fatalf("t1: %+v", v)
		}
	})
}

func TestViews(t *testing.T) {
	m := newMachine()
	for _, ev := range []Event{runTask("fw", "b", ""), runTask("fw", "a", ""), Launched{ContainerID: "id1", Now: t0}} {
		if _, err := m.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 2 {
		t.Fatalf("Len = %d", m.Len())
	}
	views := m.Tasks()
	if views[0].Key.TaskID != "a" || views[0].State != staging || views[1].State != running || views[1].Unacknowledged != 1 {
		t.Fatalf("Tasks = %+v", views)
	}
	if k, ok := m.Container("id1"); !ok || k != key("fw", "b") {
		t.Fatalf("Container(id1) = %v %v", k, ok)
	}
	if _, ok := m.Task(key("fw", "zz")); ok {
		t.Fatal("unknown task found")
	}
}

// TestRecordsAreNotModified checks that records and statuses handed out in
// effects stay as they were when later Steps change the task, so an
// executor may marshal them without the machine's lock.
func TestRecordsAreNotModified(t *testing.T) {
	m := newMachine()
	eff, _ := m.Step(runTask("fw", "t1", ""))
	rec := eff.Checkpoint[0].Task
	for _, ev := range []Event{
		Launched{ContainerID: "id1", Now: t0},
		Kill{Key: key("fw", "t1"), StateOverride: gone, Reason: slacklinev1.Reason_REASON_CONTAINER_PREEMPTED, Now: t0},
		Exited{ContainerID: "id1", Exit: Exit{Killed: true}, Now: t0},
	} {
		if _, err := m.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	if rec.GetTask().GetState() != staging || rec.GetKillState() != 0 || rec.GetKillReason() != 0 {
		t.Fatalf("record changed after it was handed out: %v", rec)
	}
}
