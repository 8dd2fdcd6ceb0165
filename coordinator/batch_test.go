package coordinator

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/protocol"
)

// batchDomain is the setting of the batch tests (#30): framework "fw"
// with tasks t1-t3 on agent "a" and t4 on agent "b", and framework "fw2"
// with none. ids maps those names to the coordinator's ids.
type batchDomain struct {
	*domain
	ids  map[string]string
	subs map[string]*subscription
}

func newBatchDomain(t *testing.T) *batchDomain {
	t.Helper()
	const staging = slacklinev1.TaskState_TASK_STATE_STAGING
	d := &batchDomain{domain: newDomain(t), ids: map[string]string{}, subs: map[string]*subscription{}}
	for _, name := range []string{"fw", "fw2"} {
		d.ids[name], d.subs[name] = d.connectFramework(&slacklinev1.FrameworkInfo{Name: name})
	}
	fw := d.ids["fw"]
	d.ids["a"] = d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:1024",
		agentTask(fw, "t1", "cpus:1", staging), agentTask(fw, "t2", "cpus:1", staging), agentTask(fw, "t3", "cpus:1", staging)))
	d.ids["b"] = d.mustRegister(registerRequest("", "host-b", "cpus:4;mem:1024", agentTask(fw, "t4", "cpus:1", staging)))
	d.drain()
	return d
}

// drain forgets the events and commands queued so far.
func (d *batchDomain) drain() {
	for _, sub := range d.subs {
		events(sub)
	}
	commands(d.agent(d.ids["a"]))
	commands(d.agent(d.ids["b"]))
}

// updateStatus calls UpdateStatus as agent "a", on its session unless
// the request names one; the request's framework ids are names of d.
func (d *batchDomain) updateStatus(req *slacklinev1.UpdateStatusRequest) ([]*slacklinev1.BatchResult, error) {
	d.t.Helper()
	req.AgentId = d.ids["a"]
	if req.SessionId == "" {
		req.SessionId = d.agent(req.AgentId).session.id
	}
	if req.FrameworkId != "" {
		req.FrameworkId = d.ids[req.FrameworkId]
	}
	for _, u := range req.Updates {
		u.FrameworkId = d.ids[u.FrameworkId]
	}
	resp, err := (agentService{d.c}).UpdateStatus(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetResults(), nil
}

// acknowledge calls Acknowledge as framework name on its stream.
func (d *batchDomain) acknowledge(name string, req *slacklinev1.AcknowledgeRequest) ([]*slacklinev1.BatchResult, error) {
	d.t.Helper()
	req.FrameworkId = d.ids[name]
	r := connect.NewRequest(req)
	r.Header().Set(protocol.StreamIDHeader, d.subs[name].id)
	resp, err := (schedulerService{d.c}).Acknowledge(context.Background(), r)
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetResults(), nil
}

// checkAcknowledged checks the uuids acknowledged to agent a and the
// number of fw's updates still unacknowledged.
func (d *batchDomain) checkAcknowledged(t *testing.T, want []string, pending int) {
	t.Helper()
	if diff := cmp.Diff(want, d.acknowledged("a")); diff != "" {
		t.Errorf("acknowledged to the agent (-want +got):\n%s", diff)
	}
	if got := d.pending("fw"); got != pending {
		t.Errorf("fw has %d unacknowledged updates, want %d", got, pending)
	}
}

// acknowledged returns the uuids of the acknowledgements queued for
// agent name.
func (d *batchDomain) acknowledged(name string) []string {
	var uuids []string
	for _, cmd := range commands(d.agent(d.ids[name])) {
		if ack := cmd.GetAcknowledge(); ack != nil {
			uuids = append(uuids, ack.GetUuid())
		}
	}
	return uuids
}

func (d *batchDomain) pending(name string) int {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	all, _ := d.c.core.PendingCount(d.ids[name], "")
	return all
}

func statusUpdate(framework, task string, state slacklinev1.TaskState, uuid string) *slacklinev1.StatusUpdate {
	return &slacklinev1.StatusUpdate{FrameworkId: framework, Status: &slacklinev1.TaskStatus{TaskId: task, State: state, Uuid: uuid}}
}

func codes(results []*slacklinev1.BatchResult) []connect.Code {
	out := make([]connect.Code, len(results))
	for i, r := range results {
		out[i] = connect.Code(r.GetCode())
	}
	return out
}

// TestStatusBatches: a batch of status updates is applied in order, each
// entry as a single update would be, and answered entry by entry; a
// refused entry refuses the later entries of its task (Aborted) and no
// other.
func TestStatusBatches(t *testing.T) {
	t.Parallel()
	const (
		ok       = connect.Code(0)
		running  = slacklinev1.TaskState_TASK_STATE_RUNNING
		finished = slacklinev1.TaskState_TASK_STATE_FINISHED
	)
	for _, tc := range []struct {
		name    string
		updates []*slacklinev1.StatusUpdate
		codes   []connect.Code
		// refusal is in the first refused entry's message.
		refusal string
		// events are fw's; acknowledged are the uuids acknowledged to agent
		// a on a framework's behalf; pending is fw's count of
		// unacknowledged updates.
		events       []string
		acknowledged []string
		pending      int
	}{{
		name: "in order",
		updates: []*slacklinev1.StatusUpdate{
			statusUpdate("fw", "t1", running, "u1"), statusUpdate("fw", "t2", running, "u2"), statusUpdate("fw", "t1", finished, "u3")},
		codes:   []connect.Code{ok, ok, ok},
		events:  []string{"update t1 RUNNING u1", "update t2 RUNNING u2", "update t1 FINISHED u3"},
		pending: 3,
	}, {
		name:    "a duplicate is one update",
		updates: []*slacklinev1.StatusUpdate{statusUpdate("fw", "t1", running, "u1"), statusUpdate("fw", "t1", running, "u1")},
		codes:   []connect.Code{ok, ok},
		events:  []string{"update t1 RUNNING u1"},
		pending: 1,
	}, {
		name:         "an unknown task is acknowledged and dropped",
		updates:      []*slacklinev1.StatusUpdate{statusUpdate("fw", "t9", running, "u9"), statusUpdate("fw", "t1", running, "u1")},
		codes:        []connect.Code{ok, ok},
		events:       []string{"update t1 RUNNING u1"},
		acknowledged: []string{"u9"},
		pending:      1,
	}, {
		name: "another agent's task is refused, and its later updates",
		updates: []*slacklinev1.StatusUpdate{
			statusUpdate("fw", "t4", running, "u4"), statusUpdate("fw", "t1", running, "u1"), statusUpdate("fw", "t4", finished, "u5")},
		codes:   []connect.Code{connect.CodePermissionDenied, ok, connect.CodeAborted},
		refusal: `updates[0]: task "t4" of framework`,
		events:  []string{"update t1 RUNNING u1"},
		pending: 1,
	}, {
		name:         "another framework's task is unknown to it",
		updates:      []*slacklinev1.StatusUpdate{statusUpdate("fw2", "t1", running, "u1"), statusUpdate("fw", "t2", running, "u2")},
		codes:        []connect.Code{ok, ok},
		events:       []string{"update t2 RUNNING u2"},
		acknowledged: []string{"u1"},
		pending:      1,
	}, {
		name: "an invalid entry is refused, and its task's later updates",
		updates: []*slacklinev1.StatusUpdate{
			statusUpdate("fw", "t1", running, ""), statusUpdate("fw", "t2", running, "u2"), statusUpdate("fw", "t1", finished, "u3")},
		codes:   []connect.Code{connect.CodeInvalidArgument, ok, connect.CodeAborted},
		refusal: "updates[0]: status.uuid is empty",
		events:  []string{"update t2 RUNNING u2"},
		pending: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newBatchDomain(t)
			results, err := d.updateStatus(&slacklinev1.UpdateStatusRequest{Updates: tc.updates})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.codes, codes(results)); diff != "" {
				t.Errorf("codes (-want +got):\n%s", diff)
			}
			for _, r := range results {
				if r.GetCode() != 0 {
					if !strings.Contains(r.GetMessage(), tc.refusal) {
						t.Errorf("refusal %q, want it to contain %q", r.GetMessage(), tc.refusal)
					}
					break
				}
			}
			if diff := cmp.Diff(tc.events, describe(events(d.subs["fw"]))); diff != "" {
				t.Errorf("fw's events (-want +got):\n%s", diff)
			}
			if evs := events(d.subs["fw2"]); len(evs) > 0 {
				t.Errorf("fw2 got %v", describe(evs))
			}
			d.checkAcknowledged(t, tc.acknowledged, tc.pending)
		})
	}
}

// TestStatusBatchRefusedWhole: a request is refused as a whole, nothing
// applied, only for what concerns all of it: its session, its size, a
// batch and a single update in one request.
func TestStatusBatchRefusedWhole(t *testing.T) {
	t.Parallel()
	running := slacklinev1.TaskState_TASK_STATE_RUNNING
	tooMany := make([]*slacklinev1.StatusUpdate, maxUpdatesPerCall+1)
	for i := range tooMany {
		tooMany[i] = statusUpdate("fw", "t1", running, "u1")
	}
	for _, tc := range []struct {
		name string
		req  *slacklinev1.UpdateStatusRequest
		code connect.Code
	}{
		{"both kinds", &slacklinev1.UpdateStatusRequest{FrameworkId: "fw", Status: &slacklinev1.TaskStatus{TaskId: "t2", State: running, Uuid: "u2"},
			Updates: []*slacklinev1.StatusUpdate{statusUpdate("fw", "t1", running, "u1")}}, connect.CodeInvalidArgument},
		{"too many", &slacklinev1.UpdateStatusRequest{Updates: tooMany}, connect.CodeInvalidArgument},
		{"a stale session", &slacklinev1.UpdateStatusRequest{SessionId: "stale",
			Updates: []*slacklinev1.StatusUpdate{statusUpdate("fw", "t1", running, "u1")}}, connect.CodeFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newBatchDomain(t)
			if _, err := d.updateStatus(tc.req); connect.CodeOf(err) != tc.code {
				t.Fatalf("UpdateStatus: %v, want %v", err, tc.code)
			}
			if evs := events(d.subs["fw"]); len(evs) > 0 {
				t.Errorf("a refused request was applied: %v", describe(evs))
			}
			if got := d.pending("fw"); got != 0 {
				t.Errorf("a refused request left %d unacknowledged updates", got)
			}
		})
	}
}

// TestSingleStatusUpdate: a request with only the single update (agents
// before #30) is applied as before and answered with no results; its
// refusal fails the call.
func TestSingleStatusUpdate(t *testing.T) {
	t.Parallel()
	running := slacklinev1.TaskState_TASK_STATE_RUNNING
	d := newBatchDomain(t)
	results, err := d.updateStatus(&slacklinev1.UpdateStatusRequest{FrameworkId: "fw", Status: &slacklinev1.TaskStatus{TaskId: "t1", State: running, Uuid: "u1"}})
	if err != nil || len(results) != 0 {
		t.Fatalf("UpdateStatus: %v, %v; want no results", results, err)
	}
	if diff := cmp.Diff([]string{"update t1 RUNNING u1"}, describe(events(d.subs["fw"]))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	_, err = d.updateStatus(&slacklinev1.UpdateStatusRequest{FrameworkId: "fw", Status: &slacklinev1.TaskStatus{TaskId: "t4", State: running, Uuid: "u4"}})
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("another agent's task: %v, want PermissionDenied", err)
	}
}

// TestAcknowledgeBatches: a batch of acknowledgements is applied in order,
// each as a single one would be, and answered entry by entry; a framework
// acknowledges only its own updates.
func TestAcknowledgeBatches(t *testing.T) {
	t.Parallel()
	const ok = connect.Code(0)
	ack := func(task, uuid string) *slacklinev1.Acknowledgement {
		return &slacklinev1.Acknowledgement{TaskId: task, Uuid: uuid}
	}
	for _, tc := range []struct {
		name string
		// by is the framework that acknowledges fw's t1/u1 and t2/u2.
		by    string
		acks  []*slacklinev1.Acknowledgement
		codes []connect.Code
		// acknowledged are the uuids forwarded to agent a; pending is
		// fw's count of unacknowledged updates after.
		acknowledged []string
		pending      int
	}{
		{"in order", "fw", []*slacklinev1.Acknowledgement{ack("t2", "u2"), ack("t1", "u1")}, []connect.Code{ok, ok}, []string{"u2", "u1"}, 0},
		{"a duplicate", "fw", []*slacklinev1.Acknowledgement{ack("t1", "u1"), ack("t1", "u1")}, []connect.Code{ok, connect.CodeNotFound}, []string{"u1"}, 1},
		{"an unknown update", "fw", []*slacklinev1.Acknowledgement{ack("t1", "u9"), ack("t2", "u2")}, []connect.Code{connect.CodeNotFound, ok}, []string{"u2"}, 1},
		{"no uuid", "fw", []*slacklinev1.Acknowledgement{ack("t1", ""), ack("t2", "u2")}, []connect.Code{connect.CodeInvalidArgument, ok}, []string{"u2"}, 1},
		{"another framework's updates", "fw2", []*slacklinev1.Acknowledgement{ack("t1", "u1"), ack("t2", "u2")}, []connect.Code{connect.CodeNotFound, connect.CodeNotFound}, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newBatchDomain(t)
			running := slacklinev1.TaskState_TASK_STATE_RUNNING
			if _, err := d.updateStatus(&slacklinev1.UpdateStatusRequest{Updates: []*slacklinev1.StatusUpdate{
				statusUpdate("fw", "t1", running, "u1"), statusUpdate("fw", "t2", running, "u2")}}); err != nil {
				t.Fatal(err)
			}
			d.drain()
			results, err := d.acknowledge(tc.by, &slacklinev1.AcknowledgeRequest{Acknowledgements: tc.acks})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.codes, codes(results)); diff != "" {
				t.Errorf("codes (-want +got):\n%s", diff)
			}
			for i, r := range results {
				if r.GetCode() != 0 && !strings.HasPrefix(r.GetMessage(), "acknowledgements[") {
					t.Errorf("result %d: %q does not name its entry", i, r.GetMessage())
				}
			}
			d.checkAcknowledged(t, tc.acknowledged, tc.pending)
		})
	}
}

// TestAcknowledgeBatchRefusedWhole: an Acknowledge is refused as a whole,
// nothing applied, for its framework's authorization, its size, or a
// batch and a single acknowledgement in one request; a single one (SDKs
// before #30) works as before.
func TestAcknowledgeBatchRefusedWhole(t *testing.T) {
	t.Parallel()
	d := newBatchDomain(t)
	running := slacklinev1.TaskState_TASK_STATE_RUNNING
	if _, err := d.updateStatus(&slacklinev1.UpdateStatusRequest{Updates: []*slacklinev1.StatusUpdate{
		statusUpdate("fw", "t1", running, "u1"), statusUpdate("fw", "t2", running, "u2")}}); err != nil {
		t.Fatal(err)
	}
	d.drain()
	one := []*slacklinev1.Acknowledgement{{TaskId: "t1", Uuid: "u1"}}
	tooMany := make([]*slacklinev1.Acknowledgement, maxAcknowledgementsPerCall+1)
	for i := range tooMany {
		tooMany[i] = one[0]
	}
	if _, err := d.acknowledge("fw", &slacklinev1.AcknowledgeRequest{TaskId: "t2", Uuid: "u2", Acknowledgements: one}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("both kinds: %v, want InvalidArgument", err)
	}
	if _, err := d.acknowledge("fw", &slacklinev1.AcknowledgeRequest{Acknowledgements: tooMany}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("too many: %v, want InvalidArgument", err)
	}
	// fw2's stream does not authorize fw.
	r := connect.NewRequest(&slacklinev1.AcknowledgeRequest{FrameworkId: d.ids["fw"], Acknowledgements: one})
	r.Header().Set(protocol.StreamIDHeader, d.subs["fw2"].id)
	if _, err := (schedulerService{d.c}).Acknowledge(context.Background(), r); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("on another framework's stream: %v, want PermissionDenied", err)
	}
	if got, acked := d.pending("fw"), d.acknowledged("a"); got != 2 || len(acked) > 0 {
		t.Fatalf("refused requests left %d pending (want 2) and acknowledged %v", got, acked)
	}
	results, err := d.acknowledge("fw", &slacklinev1.AcknowledgeRequest{TaskId: "t1", Uuid: "u1"})
	if err != nil || len(results) != 0 {
		t.Fatalf("a single acknowledgement: %v, %v; want no results", results, err)
	}
	if _, err := d.acknowledge("fw", &slacklinev1.AcknowledgeRequest{TaskId: "t1", Uuid: "u1"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a single acknowledgement again: %v, want NotFound", err)
	}
	if diff := cmp.Diff([]string{"u1"}, d.acknowledged("a")); diff != "" {
		t.Errorf("acknowledged to the agent (-want +got):\n%s", diff)
	}
}
