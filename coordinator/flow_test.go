package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/protocol"
)

// next takes the oldest queued entry (the zero value when none is).
func (o *outbox[T]) next() T {
	v, _ := o.take()
	return v
}

func drain[T any](o *outbox[T]) []T {
	var out []T
	for v, ok := o.take(); ok; v, ok = o.take() {
		out = append(out, v)
	}
	return out
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	t.Run("keeps order through growth and compaction, and an empty one holds no buffer", func(t *testing.T) {
		o := newOutbox[int]()
		next := 0
		for round := range 5 {
			for i := range 3000 {
				o.send(round*3000 + i)
			}
			for range 2000 {
				if v := o.next(); v != next {
					t.Fatalf("took %d, want %d", v, next)
				}
				next++
			}
		}
		if o.len() != 5000 {
			t.Fatalf("len %d, want 5000", o.len())
		}
		for _, v := range drain(o) {
			if v != next {
				t.Fatalf("took %d, want %d", v, next)
			}
			next++
		}
		if o.entries != nil || o.keys != nil {
			t.Fatalf("an empty outbox holds %d slots and %d keys", cap(o.entries), len(o.keys))
		}
	})
	t.Run("replace drops the queued entry with the key and queues the new one last", func(t *testing.T) {
		o := newOutbox[string]()
		o.replace("a", "a1")
		o.send("x")
		o.replace("a", "a2")
		o.replace("b", "b1")
		if got := drain(o); !cmp.Equal(got, []string{"x", "a2", "b1"}) {
			t.Fatalf("queue %q", got)
		}
		o.replace("a", "a3") // a2 was taken: nothing to drop
		if got := drain(o); !cmp.Equal(got, []string{"a3"}) {
			t.Fatalf("queue %q", got)
		}
	})
	t.Run("edit changes or drops a queued entry found by any of its keys", func(t *testing.T) {
		o := newOutbox[[]string]()
		o.sendIndexed([]string{"o1", "o2"}, "o1", "o2")
		o.sendIndexed([]string{"o3"}, "o3")
		remove := func(id string) func([]string) bool {
			return func(v []string) bool {
				for i := range v {
					if v[i] == id {
						v[i] = "-"
					}
				}
				return strings.Join(v, "") != strings.Repeat("-", len(v))
			}
		}
		if !o.edit("o1", remove("o1")) || !o.edit("o3", remove("o3")) {
			t.Fatal("queued entries not found")
		}
		if o.edit("o1", remove("o1")) {
			t.Fatal("a key still names the entry after edit")
		}
		if got := drain(o); !cmp.Equal(got, [][]string{{"-", "o2"}}) {
			t.Fatalf("queue %q", got)
		}
		if o.edit("o2", remove("o2")) {
			t.Fatal("edit found an entry already taken")
		}
	})
	t.Run("an ended outbox queues nothing; one ending after delivery still does", func(t *testing.T) {
		o := newOutbox[int]()
		o.end(errors.New("gone"))
		if o.send(1) || o.len() != 0 {
			t.Fatal("queued after end")
		}
		f := newOutbox[int]()
		f.endAfterDelivery()
		if !f.send(1) || f.len() != 1 {
			t.Fatal("not queued after endAfterDelivery")
		}
	})
}

func offersEvent(ids ...string) *slacklinev1.Event {
	ev := &slacklinev1.OffersEvent{}
	for _, id := range ids {
		ev.Offers = append(ev.Offers, &slacklinev1.Offer{Id: id})
	}
	return &slacklinev1.Event{Event: &slacklinev1.Event_Offers{Offers: ev}}
}

func rescindEvent(id string) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Rescind{Rescind: &slacklinev1.RescindEvent{OfferId: id}}}
}

func statusEvent(taskID, uuid string, state slacklinev1.TaskState) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Update{Update: &slacklinev1.UpdateEvent{
		Status: &slacklinev1.TaskStatus{TaskId: taskID, Uuid: uuid, State: state}}}}
}

// describe names events for comparison: "offers a,b", "rescind a",
// "update t RUNNING u1".
func describe(evs []*slacklinev1.Event) []string {
	var out []string
	for _, ev := range evs {
		switch {
		case ev.GetOffers() != nil:
			var ids []string
			for _, o := range ev.GetOffers().GetOffers() {
				ids = append(ids, o.GetId())
			}
			out = append(out, "offers "+strings.Join(ids, ","))
		case ev.GetRescind() != nil:
			out = append(out, "rescind "+ev.GetRescind().GetOfferId())
		case ev.GetUpdate() != nil:
			st := ev.GetUpdate().GetStatus()
			out = append(out, strings.TrimSpace(fmt.Sprintf("update %s %s %s", st.GetTaskId(), strings.TrimPrefix(st.GetState().String(), "TASK_STATE_"), st.GetUuid())))
		case ev.GetFailure() != nil:
			out = append(out, "failure "+ev.GetFailure().GetAgentId())
		}
	}
	return out
}

func TestSubscriptionCoalesces(t *testing.T) {
	t.Parallel()
	const (
		running  = slacklinev1.TaskState_TASK_STATE_RUNNING
		finished = slacklinev1.TaskState_TASK_STATE_FINISHED
	)
	failure := &slacklinev1.Event{Event: &slacklinev1.Event_Failure{Failure: &slacklinev1.FailureEvent{AgentId: "a1"}}}
	tests := []struct {
		name   string
		queued []*slacklinev1.Event
		taken  int // events the stream took before the rest were queued
		then   []*slacklinev1.Event
		want   []string
	}{
		{"the coordinator's updates of a task supersede each other",
			[]*slacklinev1.Event{statusEvent("t1", "", running), statusEvent("t2", "", running)}, 0,
			[]*slacklinev1.Event{statusEvent("t1", "", finished)},
			[]string{"update t2 RUNNING", "update t1 FINISHED"}},
		{"updates with a uuid are all delivered",
			[]*slacklinev1.Event{statusEvent("t1", "u1", running)}, 0,
			[]*slacklinev1.Event{statusEvent("t1", "u2", finished), statusEvent("t1", "", finished)},
			[]string{"update t1 RUNNING u1", "update t1 FINISHED u2", "update t1 FINISHED"}},
		{"a rescind of an unsent offer takes it out of its event",
			[]*slacklinev1.Event{offersEvent("o1", "o2")}, 0,
			[]*slacklinev1.Event{rescindEvent("o1")},
			[]string{"offers o2"}},
		{"an event whose offers were all rescinded is dropped",
			[]*slacklinev1.Event{offersEvent("o1"), offersEvent("o2")}, 0,
			[]*slacklinev1.Event{rescindEvent("o1")},
			[]string{"offers o2"}},
		{"a rescind of a sent offer is delivered",
			[]*slacklinev1.Event{offersEvent("o1")}, 1,
			[]*slacklinev1.Event{rescindEvent("o1")},
			[]string{"rescind o1"}},
		{"an agent's failure is queued once",
			[]*slacklinev1.Event{failure}, 0,
			[]*slacklinev1.Event{failure},
			[]string{"failure a1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := &subscription{outbox: newOutbox[*slacklinev1.Event]()}
			for _, ev := range tt.queued {
				sub.queue(ev)
			}
			for range tt.taken {
				sub.next()
			}
			for _, ev := range tt.then {
				sub.queue(ev)
			}
			if diff := cmp.Diff(tt.want, describe(drain(sub.outbox))); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAgentCommandsCoalesce(t *testing.T) {
	t.Parallel()
	s := newOutbox[*slacklinev1.AgentCommand]()
	for range 3 {
		queueCommand(s, killTaskCommand("f", "t1"))
		queueCommand(s, core.AcknowledgeCommand("f", "t1", "u1"))
		queueCommand(s, shutdownFrameworkCommand("f"))
	}
	queueCommand(s, core.AcknowledgeCommand("f", "t1", "u2"))
	if got := len(drain(s)); got != 4 {
		t.Fatalf("%d commands queued, want 4 (kill, ack u1, shutdown, ack u2)", got)
	}
}

func TestTruncateStatusMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, message string
		limit         int
		want          string
	}{
		{"short", "exit 1", 64, "exit 1"},
		{"exactly the limit", strings.Repeat("a", 64), 64, strings.Repeat("a", 64)},
		{"long", strings.Repeat("a", 100), 64, strings.Repeat("a", 64-len(TruncatedMarker)) + TruncatedMarker},
		{"cut before a character", strings.Repeat("é", 50), 64, strings.Repeat("é", (64-len(TruncatedMarker))/2) + TruncatedMarker},
		{"no limit", strings.Repeat("a", 100), -1, strings.Repeat("a", 100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &slacklinev1.TaskStatus{Message: tt.message}
			cut := truncateStatusMessage(st, tt.limit)
			if st.GetMessage() != tt.want || cut != (tt.want != tt.message) {
				t.Errorf("got %q (cut %v), want %q", st.GetMessage(), cut, tt.want)
			}
			if len(st.GetMessage()) > tt.limit && tt.limit >= 0 || !utf8.ValidString(st.GetMessage()) {
				t.Errorf("%d bytes, valid UTF-8 %v", len(st.GetMessage()), utf8.ValidString(st.GetMessage()))
			}
		})
	}
}

// newLimitedDomain is newDomain with limits.
func newLimitedDomain(t *testing.T, limits Limits) *domain {
	t.Helper()
	st := newMemStore()
	c, err := New(Config{Store: st, Logger: testLogger(), Now: func() time.Time { return testNow }, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return &domain{t: t, c: c, st: st}
}

// update reports a task's status as its agent would. Caller does not hold
// c.mu.
func (d *domain) update(agentID, frameworkID, taskID, uuid string, state slacklinev1.TaskState) error {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	return d.c.handleStatus(d.c.agents[agentID], &slacklinev1.TaskStatus{
		TaskId: taskID, FrameworkId: frameworkID, AgentId: agentID, State: state, Uuid: uuid})
}

func (d *domain) acknowledge(fw *framework, taskID, uuid string) {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if _, ok := d.c.core.Acknowledge(fw.id(), taskID, uuid); !ok {
		d.t.Fatalf("no pending update %s of %s", uuid, taskID)
	}
}

func TestPendingUpdatesLimit(t *testing.T) {
	t.Parallel()
	const (
		running  = slacklinev1.TaskState_TASK_STATE_RUNNING
		finished = slacklinev1.TaskState_TASK_STATE_FINISHED
		staging  = slacklinev1.TaskState_TASK_STATE_STAGING
	)
	d := newLimitedDomain(t, Limits{MaxPendingUpdatesPerFramework: 2})
	id, sub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw"})
	agentID := d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:1024",
		agentTask(id, "t1", "cpus:1", staging), agentTask(id, "t2", "cpus:1", staging), agentTask(id, "t3", "cpus:1", staging)))
	commands(d.agent(agentID))
	fw := d.c.frameworks[id]
	for _, task := range []string{"t1", "t2"} {
		if err := d.update(agentID, id, task, task+"-u1", running); err != nil {
			t.Fatal(err)
		}
	}
	// At the limit: t3's first update waits, and changes nothing.
	err := d.update(agentID, id, "t3", "t3-u1", running)
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("third task's update: %v, want ResourceExhausted", err)
	}
	if got := d.c.core.Task(fw.id(), "t3").State; got != staging {
		t.Fatalf("t3 is %v after a refused update", got)
	}
	// The same update again is no new update.
	if err := d.update(agentID, id, "t1", "t1-u1", running); err != nil {
		t.Fatalf("a repeated update: %v", err)
	}
	// A newer update of t1 supersedes its unacknowledged one, which is
	// acknowledged to the agent on the framework's behalf.
	if err := d.update(agentID, id, "t1", "t1-u2", finished); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"update t2 RUNNING t2-u1", "update t1 FINISHED t1-u2"}, describe(events(sub))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if cmds := commands(d.agent(agentID)); len(cmds) != 1 || cmds[0].GetAcknowledge().GetUuid() != "t1-u1" {
		t.Errorf("commands %v, want the acknowledgement of t1-u1", cmds)
	}
	if all, t1 := d.c.core.PendingCount(fw.id(), "t1"); all != 2 || t1 != 1 {
		t.Fatalf("pending %d, of t1 %d; want 2 and 1", all, t1)
	}
	// An acknowledgement makes room.
	d.acknowledge(fw, "t2", "t2-u1")
	if err := d.update(agentID, id, "t3", "t3-u1", running); err != nil {
		t.Fatalf("after an acknowledgement: %v", err)
	}
}

func TestWindowsRefuseFloodsUpFront(t *testing.T) {
	t.Parallel()
	d := newLimitedDomain(t, Limits{MaxQueuedCommandsPerAgent: 2, MaxQueuedEventsPerSubscription: 2, MaxSubscriptionsPerPrincipal: 1})
	id, sub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw"})
	agentID := d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:1024"))
	d.c.mu.Lock()
	a, fw := d.c.agents[agentID], d.c.frameworks[id]
	for i := range 4 {
		err := d.c.admitLaunch(agentID)
		if want := i == 3; (connect.CodeOf(err) == connect.CodeResourceExhausted) != want {
			t.Fatalf("%d commands queued: %v", a.session.len(), err)
		}
		a.send(killTaskCommand(id, fmt.Sprint("t", i)))
	}
	for i := range 4 {
		err := d.c.admitReconcile(fw)
		if want := i == 3; (connect.CodeOf(err) == connect.CodeResourceExhausted) != want {
			t.Fatalf("%d events queued: %v", sub.len(), err)
		}
		fw.send(statusEvent(fmt.Sprint("t", i), "", slacklinev1.TaskState_TASK_STATE_RUNNING))
	}
	d.c.mu.Unlock()
	// admitSubscription and its release take c.mu.
	release, err := d.c.admitSubscription("address:10.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.admitSubscription("address:10.0.0.1", 1); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second subscription: %v", err)
	}
	if r, err := d.c.admitSubscription("address:10.0.0.2", 1); err != nil {
		t.Fatalf("another caller: %v", err)
	} else {
		r()
	}
	release()
	if _, err := d.c.admitSubscription("address:10.0.0.1", 1); err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	t.Parallel()
	const (
		staging  = slacklinev1.TaskState_TASK_STATE_STAGING
		finished = slacklinev1.TaskState_TASK_STATE_FINISHED
	)
	t.Run("completed tasks", func(t *testing.T) {
		d := newLimitedDomain(t, Limits{MaxCompletedTasksPerFramework: 2})
		id, _ := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw"})
		var tasks []*slacklinev1.AgentTask
		for i := range 3 {
			task := agentTask(id, fmt.Sprint("t", i), "cpus:1", staging)
			task.Task.Command = &slacklinev1.CommandInfo{Value: "sleep 1"}
			tasks = append(tasks, task)
		}
		agentID := d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:1024", tasks...))
		for i := range 3 {
			if err := d.update(agentID, id, fmt.Sprint("t", i), "u", finished); err != nil {
				t.Fatal(err)
			}
		}
		fw := d.c.frameworks[id]
		var kept []string
		for _, task := range d.c.core.Completed(fw.id()) {
			kept = append(kept, task.Info.GetTaskId())
			if task.Info.GetCommand() != nil {
				t.Errorf("completed task %s keeps its command", task.Info.GetTaskId())
			}
		}
		if diff := cmp.Diff([]string{"t1", "t2"}, kept); diff != "" {
			t.Errorf("completed tasks kept (-want +got):\n%s", diff)
		}
	})
	t.Run("completed frameworks", func(t *testing.T) {
		d := newLimitedDomain(t, Limits{MaxCompletedFrameworks: 1})
		var ids []string
		for i := range 3 {
			// Registered a second apart (the frameworks' records are the
			// core's): the first is the oldest.
			at := testNow.Add(time.Duration(i) * time.Second)
			d.c.cfg.Now = func() time.Time { return at }
			id, _ := d.connectFramework(&slacklinev1.FrameworkInfo{Name: fmt.Sprint("fw", i)})
			ids = append(ids, id)
		}
		done := d.c.takeTurn() // every scope, as the tick takes
		d.c.mu.Lock()
		// Torn down newest first: the registration time decides, not the
		// order of the teardowns.
		for _, id := range []string{ids[1], ids[0]} {
			d.c.record(context.Background(), d.c.removeFramework(d.c.frameworks[id], "test")...)
		}
		d.c.record(context.Background(), d.c.forgetHistory(testNow)...)
		d.c.mu.Unlock()
		done()
		if d.c.frameworks[ids[0]] != nil || d.c.frameworks[ids[1]] == nil || d.c.frameworks[ids[2]] == nil {
			t.Fatal("want the oldest completed framework forgotten, the other and the live one kept")
		}
		if d.frameworkRecord(ids[0]) != nil || !d.frameworkRecord(ids[1]).GetCompleted() {
			t.Fatal("registry records not forgotten or kept as they should")
		}
	})
	t.Run("gone agents", func(t *testing.T) {
		d := newLimitedDomain(t, Limits{GoneAgentRetention: time.Hour})
		id, sub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw", Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}})
		agentID := d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:1024", agentTask(id, "t1", "cpus:1", staging)))
		done := d.c.takeTurn() // every scope, as the tick takes
		d.c.mu.Lock()
		a := d.c.agents[agentID]
		// Silent for a month: the core finds it lost.
		d.c.core.Heartbeat(a.ID, testNow.Add(-30*24*time.Hour))
		d.c.tick(testNow)
		if a.State != slacklinev1.AgentState_AGENT_STATE_UNREACHABLE {
			t.Fatalf("agent %v after a month's silence, want UNREACHABLE", a.State)
		}
		d.c.core.Heartbeat(a.ID, testNow.Add(-30*time.Minute))
		kept := len(d.c.forgetHistory(testNow))
		d.c.core.Heartbeat(a.ID, testNow.Add(-2*time.Hour))
		writes := d.c.forgetHistory(testNow)
		d.c.mu.Unlock()
		done()
		if kept != 0 || len(writes) != 1 || d.c.agents[agentID] != nil {
			t.Fatalf("writes %d then %d; agent still known: %v", kept, len(writes), d.c.agents[agentID] != nil)
		}
		if got := updates(events(sub)); got["t1"] != slacklinev1.TaskState_TASK_STATE_GONE {
			t.Fatalf("updates %v, want t1 GONE", got)
		}
	})
}

// TestScheduleValidatedOutsideMu holds a maintenance transition in the
// middle of its computation and checks that the coordinator's memory lock
// is free meanwhile: other RPCs answer while a large schedule is validated.
func TestScheduleValidatedOutsideMu(t *testing.T) {
	t.Parallel()
	d := newDomain(t)
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- d.c.changeMaintenance(context.Background(), "test", func(st *maintenance.State) (*maintenance.State, []maintenance.Machine, error) {
			close(entered)
			<-release
			return st.UpdateSchedule(scheduleOf(machineWindow(testNow, time.Hour, "host-a")))
		})
	}()
	<-entered
	if !d.c.mu.TryLock() {
		t.Error("c.mu is held while a transition is computed")
	} else {
		d.c.mu.Unlock()
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := d.mode("host-a"); got != maintenance.ModeDraining {
		t.Fatalf("host-a is %v, want DRAINING", got)
	}
}

// TestOffStack checks that an offStack runs concurrent calls at once, up
// to maxOffStackGoroutines, the others waiting for a goroutine (counted by
// full), each before run returns; that an idle goroutine takes the next
// call; that its goroutines end once idle for offStackIdle, and that a
// later call starts one again.
func TestOffStack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var o offStack
		var mu sync.Mutex
		running, most, ran, full := 0, 0, 0, 0
		o.full = func() { mu.Lock(); full++; mu.Unlock() }
		release := make(chan struct{})
		call := func() {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			ran++
			mu.Unlock()
		}
		goroutines := func() int {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.goroutines
		}
		n := maxOffStackGoroutines + 3
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { o.run(call) })
		}
		synctest.Wait()
		mu.Lock()
		if running != maxOffStackGoroutines || full != 3 || goroutines() != maxOffStackGoroutines {
			t.Errorf("%d calls running on %d goroutines, %d waited; want %d, %d and 3", running, goroutines(), full, maxOffStackGoroutines, maxOffStackGoroutines)
		}
		mu.Unlock()
		close(release)
		wg.Wait()
		if ran != n || most != maxOffStackGoroutines {
			t.Fatalf("%d calls ran, at most %d at once; want %d, %d at once", ran, most, n, maxOffStackGoroutines)
		}
		o.run(call) // on an idle goroutine
		if ran != n+1 || goroutines() != maxOffStackGoroutines {
			t.Fatalf("a call on idle goroutines: %d ran on %d goroutines, want %d on %d", ran, goroutines(), n+1, maxOffStackGoroutines)
		}
		time.Sleep(offStackIdle)
		synctest.Wait()
		if g := goroutines(); g != 0 {
			t.Fatalf("%d goroutines still running after offStackIdle without calls", g)
		}
		o.run(call)
		if ran != n+2 || goroutines() != 1 {
			t.Fatalf("a call after the goroutines ended: %d ran on %d goroutines, want %d on 1", ran, goroutines(), n+2)
		}
		time.Sleep(offStackIdle) // the goroutine ends before the bubble does
	})
}

// TestReconcileOf16800TasksDeliversEveryUpdate has four agents report
// 16,800 RUNNING tasks and the framework reconcile them all at once: the
// subscription holds all 16,800 answers and is not cut (the event queue
// used to overflow at 16,384 and end the subscription). It had 20,000,
// the package's second CPU cost: the answers are queued in one Reconcile,
// so 16,800 still overflow the old queue, by 416.
func TestReconcileOf16800TasksDeliversEveryUpdate(t *testing.T) {
	t.Parallel()
	const agents, perAgent = 4, 4200
	d := newDomain(t)
	id, sub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw"})
	for a := range agents {
		tasks := make([]*slacklinev1.AgentTask, perAgent)
		for i := range tasks {
			tasks[i] = agentTask(id, fmt.Sprintf("t%d-%d", a, i), "cpus:0.01;mem:8", slacklinev1.TaskState_TASK_STATE_RUNNING)
		}
		d.mustRegister(registerRequest("", fmt.Sprint("host-", a), "cpus:64;mem:65536", tasks...))
	}
	events(sub)
	req := connect.NewRequest(&slacklinev1.ReconcileRequest{FrameworkId: id})
	req.Header().Set(protocol.StreamIDHeader, sub.id)
	if _, err := (schedulerService{d.c}).Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	answered := map[string]bool{}
	var delivered int
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The subscription's stream loop, with a send that counts.
	err := sub.serve(ctx, heartbeatEvent, d.c.frameworkHeartbeats, func(ev *slacklinev1.Event) error {
		st := ev.GetUpdate().GetStatus()
		if st.GetReason() == slacklinev1.Reason_REASON_RECONCILIATION && st.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
			answered[st.GetTaskId()] = true
		}
		if delivered++; delivered == agents*perAgent {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || sub.hasEnded() {
		t.Fatalf("serve: %v (ended %v) after %d events", err, sub.hasEnded(), delivered)
	}
	if len(answered) != agents*perAgent {
		t.Fatalf("%d of %d tasks answered", len(answered), agents*perAgent)
	}
}

// TestOffStackSecondCallDoesNotQueueBehindAWokenGoroutine checks that two
// calls made together while one goroutine is idle both run: the first is
// handed to the idle goroutine, and the second, made before that goroutine
// ran, must start another instead of queueing behind the first (which, in
// a subscription, may wait long for its framework's turn). The two calls
// are queued back to back on the test's goroutine, so the woken goroutine
// cannot have run in between: the old counting took it as idle until it
// ran, and left the second call queued.
func TestOffStackSecondCallDoesNotQueueBehindAWokenGoroutine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var o offStack
		o.run(func() {}) // one goroutine, idle after it
		synctest.Wait()
		release := make(chan struct{})
		first := o.start(func() { <-release })
		second := o.start(func() {})
		synctest.Wait()
		select {
		case <-second:
		default:
			t.Errorf("the second call waits behind a call that blocks, with goroutines to spare")
		}
		close(release)
		<-first
		time.Sleep(offStackIdle) // the bubble's clock: its goroutines end
		synctest.Wait()
	})
}
