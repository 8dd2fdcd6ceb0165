package frameworkapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// recorder is a Handler that writes one line per event it receives.
type recorder struct {
	frameworkapi.BaseHandler
	mu     sync.Mutex
	lines  []string
	errs   []error
	onCall func(ctx context.Context, c *frameworkapi.Client, line string)
}

func (r *recorder) add(ctx context.Context, c *frameworkapi.Client, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
	if r.onCall != nil {
		r.onCall(ctx, c, line)
	}
}

func (r *recorder) Subscribed(ctx context.Context, c *frameworkapi.Client, ev *slacklinev1.SubscribedEvent) {
	r.add(ctx, c, "subscribed %s %s", ev.GetFrameworkId(), ev.GetStreamId())
}

func (r *recorder) Offers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
	ids := make([]string, len(offers))
	for i, o := range offers {
		ids[i] = o.GetId()
	}
	r.add(ctx, c, "offers %s", strings.Join(ids, ","))
}

func (r *recorder) InverseOffers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.InverseOffer) {
	ids := make([]string, len(offers))
	for i, o := range offers {
		ids[i] = o.GetId()
	}
	r.add(ctx, c, "inverse offers %s", strings.Join(ids, ","))
}

func (r *recorder) Rescind(ctx context.Context, c *frameworkapi.Client, id string) {
	r.add(ctx, c, "rescind %s", id)
}

func (r *recorder) RescindInverseOffer(ctx context.Context, c *frameworkapi.Client, id string) {
	r.add(ctx, c, "rescind inverse offer %s", id)
}

func (r *recorder) Update(ctx context.Context, c *frameworkapi.Client, s *slacklinev1.TaskStatus) {
	r.add(ctx, c, "update %s %s", s.GetTaskId(), s.GetState())
}

func (r *recorder) Failure(ctx context.Context, c *frameworkapi.Client, agentID string) {
	r.add(ctx, c, "failure %s", agentID)
}

func (r *recorder) Error(ctx context.Context, c *frameworkapi.Client, msg string) {
	r.add(ctx, c, "error %s", msg)
}

func (r *recorder) Disconnected(ctx context.Context, c *frameworkapi.Client, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.add(ctx, c, "disconnected")
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

func (r *recorder) disconnectErrors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// forEachProtocol runs test in a synctest bubble once per wire protocol.
func forEachProtocol(t *testing.T, test func(t *testing.T, p protocol)) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { test(t, p) })
		})
	}
}

func update(taskID string, state slacklinev1.TaskState, uuid string) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Update{Update: &slacklinev1.UpdateEvent{Status: &slacklinev1.TaskStatus{
		TaskId: taskID, AgentId: "agent-1", State: state, Uuid: uuid,
	}}}}
}

var heartbeat = &slacklinev1.Event{Event: &slacklinev1.Event_Heartbeat{Heartbeat: &slacklinev1.HeartbeatEvent{}}}

func TestRunDispatchesEventsInOrder(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		fake := newFakeScheduler()
		c := startFake(t, p, fake, frameworkapi.Config{ManualAcknowledge: true})
		h := &recorder{}
		runClient(t, c, h)

		s := fake.nextSession(t)
		if got := s.req.GetFrameworkInfo().GetId(); got != "" {
			t.Errorf("first subscription carries framework id %q, want none", got)
		}
		s.subscribe(t, "fw-1", "stream-1", 15)
		for _, ev := range []*slacklinev1.Event{
			{Event: &slacklinev1.Event_Offers{Offers: &slacklinev1.OffersEvent{
				Offers:        []*slacklinev1.Offer{{Id: "o1"}, {Id: "o2"}},
				InverseOffers: []*slacklinev1.InverseOffer{{Id: "i1"}},
			}}},
			heartbeat,
			{Event: &slacklinev1.Event_Rescind{Rescind: &slacklinev1.RescindEvent{OfferId: "o1"}}},
			{Event: &slacklinev1.Event_RescindInverseOffer{RescindInverseOffer: &slacklinev1.RescindInverseOfferEvent{InverseOfferId: "i1"}}},
			update("t1", slacklinev1.TaskState_TASK_STATE_RUNNING, ""),
			{Event: &slacklinev1.Event_Failure{Failure: &slacklinev1.FailureEvent{AgentId: "agent-9"}}},
		} {
			s.send(t, ev)
		}
		synctest.Wait()

		want := []string{
			"subscribed fw-1 stream-1",
			"offers o1,o2",
			"inverse offers i1",
			"rescind o1",
			"rescind inverse offer i1",
			"update t1 TASK_STATE_RUNNING",
			"failure agent-9",
		}
		if diff := cmp.Diff(want, h.got()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if got, want := c.FrameworkID(), "fw-1"; got != want {
			t.Errorf("FrameworkID() = %q, want %q", got, want)
		}
		if got, want := c.StreamID(), "stream-1"; got != want {
			t.Errorf("StreamID() = %q, want %q", got, want)
		}
		// A first subscription without framework id needs no reconciliation.
		fake.noCall(t)
	})
}

func TestCallsCarryStreamIDAndFrameworkID(t *testing.T) {
	ctx := context.Background()
	status := &slacklinev1.TaskStatus{TaskId: "t1", AgentId: "a1", Uuid: "u1"}
	task := &slacklinev1.TaskInfo{TaskId: "t1", AgentId: "a1"}
	launch := &slacklinev1.Operation{Operation: &slacklinev1.Operation_Launch{Launch: &slacklinev1.LaunchOperation{TaskInfos: []*slacklinev1.TaskInfo{task}}}}
	tests := []struct {
		name string
		call func(c *frameworkapi.Client) error
		want proto.Message
	}{
		{"accept", func(c *frameworkapi.Client) error {
			return c.Accept(ctx, []string{"o1"}, []*slacklinev1.Operation{launch}, frameworkapi.Filters(0))
		}, &slacklinev1.AcceptRequest{FrameworkId: "fw-1", OfferIds: []string{"o1"}, Operations: []*slacklinev1.Operation{launch}, Filters: frameworkapi.Filters(0)}},
		{"launch", func(c *frameworkapi.Client) error {
			return c.Launch(ctx, []string{"o1"}, []*slacklinev1.TaskInfo{task}, nil)
		}, &slacklinev1.AcceptRequest{FrameworkId: "fw-1", OfferIds: []string{"o1"}, Operations: []*slacklinev1.Operation{launch}}},
		{"decline", func(c *frameworkapi.Client) error {
			return c.Decline(ctx, []string{"o1", "o2"}, frameworkapi.Filters(5))
		}, &slacklinev1.DeclineRequest{FrameworkId: "fw-1", OfferIds: []string{"o1", "o2"}, Filters: frameworkapi.Filters(5)}},
		{"accept inverse offers", func(c *frameworkapi.Client) error {
			return c.AcceptInverseOffers(ctx, []string{"i1"}, nil)
		}, &slacklinev1.AcceptInverseOffersRequest{FrameworkId: "fw-1", InverseOfferIds: []string{"i1"}}},
		{"decline inverse offers", func(c *frameworkapi.Client) error {
			return c.DeclineInverseOffers(ctx, []string{"i1"}, frameworkapi.Filters(60))
		}, &slacklinev1.DeclineInverseOffersRequest{FrameworkId: "fw-1", InverseOfferIds: []string{"i1"}, Filters: frameworkapi.Filters(60)}},
		{"revive", func(c *frameworkapi.Client) error { return c.Revive(ctx, "eng") },
			&slacklinev1.ReviveRequest{FrameworkId: "fw-1", Roles: []string{"eng"}}},
		{"suppress", func(c *frameworkapi.Client) error { return c.Suppress(ctx) },
			&slacklinev1.SuppressRequest{FrameworkId: "fw-1"}},
		{"kill", func(c *frameworkapi.Client) error { return c.Kill(ctx, "t1", "a1") },
			&slacklinev1.KillRequest{FrameworkId: "fw-1", TaskId: "t1", AgentId: "a1"}},
		{"acknowledge", func(c *frameworkapi.Client) error { return c.Acknowledge(ctx, status) },
			&slacklinev1.AcknowledgeRequest{FrameworkId: "fw-1", TaskId: "t1", AgentId: "a1", Uuid: "u1"}},
		{"reconcile", func(c *frameworkapi.Client) error {
			return c.Reconcile(ctx, []*slacklinev1.ReconcileTask{{TaskId: "t1"}})
		}, &slacklinev1.ReconcileRequest{FrameworkId: "fw-1", Tasks: []*slacklinev1.ReconcileTask{{TaskId: "t1"}}}},
		{"teardown", func(c *frameworkapi.Client) error { return c.Teardown(ctx) },
			&slacklinev1.TeardownRequest{FrameworkId: "fw-1"}},
	}
	forEachProtocol(t, func(t *testing.T, p protocol) {
		fake := newFakeScheduler()
		c := startFake(t, p, fake, frameworkapi.Config{})
		for _, tt := range tests {
			if err := tt.call(c); !errors.Is(err, frameworkapi.ErrNotSubscribed) {
				t.Errorf("%s before subscribing: err = %v, want ErrNotSubscribed", tt.name, err)
			}
		}
		runClient(t, c, &recorder{})
		fake.nextSession(t).subscribe(t, "fw-1", "stream-1", 15)
		synctest.Wait()
		for _, tt := range tests {
			if err := tt.call(c); err != nil {
				t.Errorf("%s: %v", tt.name, err)
				continue
			}
			got := fake.nextCall(t)
			if got.streamID != "stream-1" {
				t.Errorf("%s: %s header = %q, want stream-1", tt.name, frameworkapi.StreamIDHeader, got.streamID)
			}
			if diff := cmp.Diff(tt.want, got.msg, protocmp.Transform()); diff != "" {
				t.Errorf("%s: request (-want +got):\n%s", tt.name, diff)
			}
		}
	})
}

func TestAcknowledgements(t *testing.T) {
	for _, manual := range []bool{false, true} {
		t.Run(fmt.Sprintf("manual=%v", manual), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFakeScheduler()
				c := startFake(t, protocols[0], fake, frameworkapi.Config{ManualAcknowledge: manual})
				runClient(t, c, &recorder{})
				s := fake.nextSession(t)
				s.subscribe(t, "fw-1", "stream-1", 15)
				s.send(t, update("t1", slacklinev1.TaskState_TASK_STATE_RUNNING, "")) // reconciliation: no ack
				s.send(t, update("t1", slacklinev1.TaskState_TASK_STATE_FINISHED, "uuid-2"))
				synctest.Wait()
				if manual {
					fake.noCall(t)
					return
				}
				got := fake.nextCall(t)
				want := &slacklinev1.AcknowledgeRequest{FrameworkId: "fw-1", AgentId: "agent-1", TaskId: "t1", Uuid: "uuid-2"}
				if diff := cmp.Diff(want, got.msg, protocmp.Transform()); diff != "" {
					t.Errorf("acknowledgement (-want +got):\n%s", diff)
				}
				fake.noCall(t)
			})
		})
	}
}

// TestAcknowledgementsAreBatched: the automatic acknowledgements of the
// updates handled while an Acknowledge is in flight go in the next call
// together (#30), in order; to a coordinator that takes no batches, one
// per call.
func TestAcknowledgementsAreBatched(t *testing.T) {
	for _, batches := range []bool{true, false} {
		t.Run(fmt.Sprintf("batches=%v", batches), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFakeScheduler()
				fake.ackGate = make(chan struct{})
				c := startFake(t, protocols[0], fake, frameworkapi.Config{})
				runClient(t, c, &recorder{})
				s := fake.nextSession(t)
				s.send(t, &slacklinev1.Event{Event: &slacklinev1.Event_Subscribed{Subscribed: &slacklinev1.SubscribedEvent{
					FrameworkId: "fw-1", StreamId: "stream-1", HeartbeatIntervalSeconds: 15, AcknowledgeBatches: batches}}})
				s.send(t, update("t0", slacklinev1.TaskState_TASK_STATE_FINISHED, "u0"))
				synctest.Wait() // its acknowledgement waits at the gate
				single := func(task, uuid string) *slacklinev1.AcknowledgeRequest {
					return &slacklinev1.AcknowledgeRequest{FrameworkId: "fw-1", AgentId: "agent-1", TaskId: task, Uuid: uuid}
				}
				want := []*slacklinev1.AcknowledgeRequest{single("t0", "u0")}
				batch := &slacklinev1.AcknowledgeRequest{FrameworkId: "fw-1"}
				for i := 1; i <= 5; i++ {
					task, uuid := fmt.Sprint("t", i), fmt.Sprint("u", i)
					s.send(t, update(task, slacklinev1.TaskState_TASK_STATE_RUNNING, uuid))
					batch.Acknowledgements = append(batch.Acknowledgements, &slacklinev1.Acknowledgement{AgentId: "agent-1", TaskId: task, Uuid: uuid})
					if !batches {
						want = append(want, single(task, uuid))
					}
				}
				if batches {
					want = append(want, batch)
				}
				synctest.Wait()
				var got []*slacklinev1.AcknowledgeRequest
				for range want {
					fake.ackGate <- struct{}{}
					got = append(got, fake.nextCall(t).msg.(*slacklinev1.AcknowledgeRequest))
				}
				synctest.Wait()
				fake.noCall(t)
				if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
					t.Errorf("acknowledgements (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestAcknowledgeBatch: AcknowledgeBatch sends at most
// MaxAcknowledgementsPerCall per call and skips updates without a uuid.
func TestAcknowledgeBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeScheduler()
		c := startFake(t, protocols[0], fake, frameworkapi.Config{ManualAcknowledge: true})
		runClient(t, c, &recorder{})
		s := fake.nextSession(t)
		s.send(t, &slacklinev1.Event{Event: &slacklinev1.Event_Subscribed{Subscribed: &slacklinev1.SubscribedEvent{
			FrameworkId: "fw-1", StreamId: "stream-1", HeartbeatIntervalSeconds: 15, AcknowledgeBatches: true}}})
		synctest.Wait()
		const n = frameworkapi.MaxAcknowledgementsPerCall + 44
		statuses := []*slacklinev1.TaskStatus{{TaskId: "reconciled"}} // no uuid
		for i := range n {
			statuses = append(statuses, &slacklinev1.TaskStatus{TaskId: fmt.Sprint("t", i), AgentId: "agent-1", Uuid: fmt.Sprint("u", i)})
		}
		done := make(chan error, 1)
		go func() { done <- c.AcknowledgeBatch(context.Background(), statuses) }()
		var sizes []int
		var uuids []string
		for range 2 {
			req := fake.nextCall(t).msg.(*slacklinev1.AcknowledgeRequest)
			sizes = append(sizes, len(req.GetAcknowledgements()))
			for _, ack := range req.GetAcknowledgements() {
				uuids = append(uuids, ack.GetUuid())
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("AcknowledgeBatch: %v", err)
		}
		synctest.Wait()
		fake.noCall(t)
		if diff := cmp.Diff([]int{frameworkapi.MaxAcknowledgementsPerCall, 44}, sizes); diff != "" {
			t.Errorf("acknowledgements per call (-want +got):\n%s", diff)
		}
		if len(uuids) != n {
			t.Fatalf("%d acknowledged, want %d", len(uuids), n)
		}
		for i, uuid := range uuids {
			if uuid != fmt.Sprint("u", i) {
				t.Fatalf("acknowledgement %d is %s, want u%d", i, uuid, i)
			}
		}
	})
}

func TestAutoAcknowledgementSurvivesCancelInHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeScheduler()
		c := startFake(t, protocols[0], fake, frameworkapi.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h := frameworkapi.HandlerFuncs{UpdateFunc: func(context.Context, *frameworkapi.Client, *slacklinev1.TaskStatus) {
			cancel() // the last task finished: stop
		}}
		result := make(chan error, 1)
		go func() { result <- c.Run(ctx, h) }()
		s := fake.nextSession(t)
		s.subscribe(t, "fw-1", "stream-1", 15)
		s.send(t, update("t1", slacklinev1.TaskState_TASK_STATE_FINISHED, "uuid-1"))
		if err := <-result; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
		if call := fake.nextCall(t); call.procedure != "Acknowledge" {
			t.Errorf("call %s, want Acknowledge", call.procedure)
		}
	})
}

func TestReconnectResubscribesWithFrameworkIDAndReconciles(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		fake := newFakeScheduler()
		c := startFake(t, p, fake, frameworkapi.Config{})
		h := &recorder{}
		runClient(t, c, h)

		first := fake.nextSession(t)
		first.subscribe(t, "fw-1", "stream-1", 15)
		first.close(t, connect.NewError(connect.CodeUnavailable, errors.New("coordinator restarting")))

		second := fake.nextSession(t)
		if got := second.req.GetFrameworkInfo().GetId(); got != "fw-1" {
			t.Errorf("resubscription framework id = %q, want fw-1", got)
		}
		if got := second.req.GetFrameworkInfo().GetName(); got != "test" {
			t.Errorf("resubscription framework name = %q, want test", got)
		}
		second.subscribe(t, "fw-1", "stream-2", 15)
		call := fake.nextCall(t)
		want := &slacklinev1.ReconcileRequest{FrameworkId: "fw-1"}
		if call.procedure != "Reconcile" || call.streamID != "stream-2" {
			t.Errorf("after resubscribing: call %s with stream id %q, want Reconcile with stream-2", call.procedure, call.streamID)
		}
		if diff := cmp.Diff(want, call.msg, protocmp.Transform()); diff != "" {
			t.Errorf("implicit reconciliation (-want +got):\n%s", diff)
		}
		synctest.Wait()
		if diff := cmp.Diff([]string{"subscribed fw-1 stream-1", "disconnected", "subscribed fw-1 stream-2"}, h.got()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if got := c.StreamID(); got != "stream-2" {
			t.Errorf("StreamID() = %q, want stream-2", got)
		}
	})
}

func TestFailoverWithConfiguredFrameworkIDReconciles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeScheduler()
		c := startFake(t, protocols[0], fake, frameworkapi.Config{
			Framework: &slacklinev1.FrameworkInfo{Id: "fw-old", Name: "test"},
		})
		if got := c.FrameworkID(); got != "fw-old" {
			t.Errorf("FrameworkID() before Run = %q, want fw-old", got)
		}
		runClient(t, c, &recorder{})
		s := fake.nextSession(t)
		if got := s.req.GetFrameworkInfo().GetId(); got != "fw-old" {
			t.Errorf("subscription framework id = %q, want fw-old", got)
		}
		s.subscribe(t, "fw-old", "stream-1", 15)
		if call := fake.nextCall(t); call.procedure != "Reconcile" {
			t.Errorf("first call after failover = %s, want Reconcile", call.procedure)
		}
	})
}

func TestMissedHeartbeatsReconnect(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		fake := newFakeScheduler()
		c := startFake(t, p, fake, frameworkapi.Config{})
		h := &recorder{}
		runClient(t, c, h)

		first := fake.nextSession(t)
		first.subscribe(t, "fw-1", "stream-1", 1)
		// Heartbeats on time, and a gap just under three intervals: the
		// connection stays.
		for range 5 {
			time.Sleep(time.Second)
			first.send(t, heartbeat)
		}
		time.Sleep(2900 * time.Millisecond)
		first.send(t, heartbeat)
		synctest.Wait()
		select {
		case s := <-fake.sessions:
			t.Fatalf("reconnected (subscription %v) although heartbeats arrived", s.req)
		default:
		}

		// Silence: the client gives up on the stream and resubscribes.
		second := fake.nextSession(t)
		if got := second.req.GetFrameworkInfo().GetId(); got != "fw-1" {
			t.Errorf("resubscription framework id = %q, want fw-1", got)
		}
		errs := h.disconnectErrors()
		if len(errs) != 1 || !errors.Is(errs[0], frameworkapi.ErrMissedHeartbeats) {
			t.Errorf("Disconnected errors = %v, want one ErrMissedHeartbeats", errs)
		}
	})
}

func TestSlowHandlerIsNotMissedHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeScheduler()
		c := startFake(t, protocols[0], fake, frameworkapi.Config{})
		h := &recorder{onCall: func(_ context.Context, _ *frameworkapi.Client, line string) {
			if strings.HasPrefix(line, "offers") {
				time.Sleep(time.Minute) // far longer than three heartbeat intervals
			}
		}}
		runClient(t, c, h)
		s := fake.nextSession(t)
		s.subscribe(t, "fw-1", "stream-1", 1)
		s.send(t, &slacklinev1.Event{Event: &slacklinev1.Event_Offers{Offers: &slacklinev1.OffersEvent{
			Offers: []*slacklinev1.Offer{{Id: "o1"}},
		}}})
		for range 70 {
			time.Sleep(time.Second)
			s.send(t, heartbeat)
		}
		synctest.Wait()
		if errs := h.disconnectErrors(); len(errs) != 0 {
			t.Errorf("Disconnected(%v) while the handler was busy", errs)
		}
	})
}

func TestRunEndsWithErrTornDown(t *testing.T) {
	notFound := func(req *slacklinev1.SubscribeRequest) error {
		if req.GetFrameworkInfo().GetId() != "" {
			return connect.NewError(connect.CodeNotFound, errors.New("framework fw-1 was removed"))
		}
		return nil
	}
	tests := []struct {
		name   string
		refuse func(*slacklinev1.SubscribeRequest) error
		end    func(t *testing.T, fake *fakeScheduler, s *fakeSession)
		want   []string
		// wantCode is the connect code the error wraps besides ErrTornDown.
		wantCode connect.Code
	}{
		{
			name: "error event then clean end",
			end: func(t *testing.T, _ *fakeScheduler, s *fakeSession) {
				s.send(t, &slacklinev1.Event{Event: &slacklinev1.Event_Error{Error: &slacklinev1.ErrorEvent{Message: "framework removed"}}})
				s.close(t, nil)
			},
			want: []string{"subscribed fw-1 stream-1", "error framework removed"},
		},
		{
			name: "error event then failed stream",
			end: func(t *testing.T, _ *fakeScheduler, s *fakeSession) {
				s.send(t, &slacklinev1.Event{Event: &slacklinev1.Event_Error{Error: &slacklinev1.ErrorEvent{Message: "failover timeout"}}})
				s.close(t, connect.NewError(connect.CodeAborted, errors.New("bye")))
			},
			want: []string{"subscribed fw-1 stream-1", "error failover timeout"},
		},
		{
			name:   "resubscription not found",
			refuse: notFound,
			end: func(t *testing.T, _ *fakeScheduler, s *fakeSession) {
				s.close(t, connect.NewError(connect.CodeUnavailable, errors.New("restarting")))
			},
			want:     []string{"subscribed fw-1 stream-1", "disconnected"},
			wantCode: connect.CodeNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFakeScheduler()
				fake.refuse = tt.refuse
				c := startFake(t, protocols[0], fake, frameworkapi.Config{})
				h := &recorder{}
				_, result := runClient(t, c, h)
				s := fake.nextSession(t)
				s.subscribe(t, "fw-1", "stream-1", 15)
				tt.end(t, fake, s)
				err := <-result
				if !errors.Is(err, frameworkapi.ErrTornDown) {
					t.Errorf("Run() = %v, want ErrTornDown", err)
				}
				if tt.wantCode != 0 && connect.CodeOf(err) != tt.wantCode {
					t.Errorf("connect.CodeOf(Run()) = %v, want %v", connect.CodeOf(err), tt.wantCode)
				}
				if diff := cmp.Diff(tt.want, h.got()); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
				if err := c.Kill(context.Background(), "t", ""); !errors.Is(err, frameworkapi.ErrNotSubscribed) {
					t.Errorf("Kill after Run returned: %v, want ErrNotSubscribed", err)
				}
			})
		})
	}
}

func TestRunReturnsPermanentSubscribeErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeScheduler()
		fake.refuse = func(*slacklinev1.SubscribeRequest) error {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("framework name is empty"))
		}
		c := startFake(t, protocols[0], fake, frameworkapi.Config{})
		err := c.Run(context.Background(), &recorder{})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || errors.Is(err, frameworkapi.ErrTornDown) {
			t.Errorf("Run() = %v, want an InvalidArgument error that is not ErrTornDown", err)
		}
	})
}

func TestRunRetriesUnavailableAndReturnsNilOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeScheduler()
		var mu sync.Mutex
		refusals := 0
		fake.refuse = func(*slacklinev1.SubscribeRequest) error {
			mu.Lock()
			defer mu.Unlock()
			if refusals < 5 {
				refusals++
				return connect.NewError(connect.CodeUnavailable, errors.New("not the leader"))
			}
			return nil
		}
		c := startFake(t, protocols[0], fake, frameworkapi.Config{})
		h := &recorder{}
		cancel, result := runClient(t, c, h)
		fake.nextSession(t).subscribe(t, "fw-1", "stream-1", 15)
		synctest.Wait()
		if diff := cmp.Diff([]string{"subscribed fw-1 stream-1"}, h.got()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		cancel()
		if err := <-result; err != nil {
			t.Errorf("Run() after cancel = %v, want nil", err)
		}
	})
}

func TestRunTwiceIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeScheduler()
		c := startFake(t, protocols[0], fake, frameworkapi.Config{})
		runClient(t, c, &recorder{})
		fake.nextSession(t)
		if err := c.Run(context.Background(), &recorder{}); !errors.Is(err, frameworkapi.ErrAlreadyRunning) {
			t.Errorf("second Run() = %v, want ErrAlreadyRunning", err)
		}
	})
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  frameworkapi.Config
	}{
		{"no framework", frameworkapi.Config{}},
		{"bad url", frameworkapi.Config{Coordinator: "127.0.0.1:5050", Framework: &slacklinev1.FrameworkInfo{Name: "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := frameworkapi.New(tt.cfg); err == nil {
				t.Error("New() succeeded, want an error")
			}
		})
	}
	info := &slacklinev1.FrameworkInfo{Name: "x", Id: "fw-7"}
	c, err := frameworkapi.New(frameworkapi.Config{Framework: info})
	if err != nil {
		t.Fatal(err)
	}
	info.Id = "changed"
	if got := c.FrameworkID(); got != "fw-7" {
		t.Errorf("FrameworkID() = %q after the caller changed its FrameworkInfo, want fw-7", got)
	}
}
