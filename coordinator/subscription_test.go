package coordinator

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestPlanSubscription: the plan is the core's persist step
// (core.SubscribeFramework; its transcript is core/testdata/frameworks.txt);
// the shell maps its refusals to codes and changes nothing.
func TestPlanSubscription(t *testing.T) {
	t.Parallel()
	k := core.New(core.Config{})
	for id, completed := range map[string]bool{"known": false, "completed": true} {
		k.LoadFramework(&slacklinev1.FrameworkRecord{Info: &slacklinev1.FrameworkInfo{Id: id, Name: id, Roles: []string{"*"}},
			RegisteredTime: timestamppb.New(testNow.Add(-time.Hour)), Completed: completed}, testNow.Add(time.Hour))
	}
	tests := []struct {
		name             string
		id               string
		wantCode         connect.Code // 0: planned
		wantRegisteredAt time.Time
	}{
		{"new framework", "", 0, testNow},
		{"failover of a known framework keeps its registration time", "known", 0, testNow.Add(-time.Hour)},
		{"an unknown id is refused", "never-seen", connect.CodeNotFound, time.Time{}},
		{"a torn-down framework is refused", "completed", connect.CodeFailedPrecondition, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := planSubscription(k, &slacklinev1.FrameworkInfo{Id: tt.id, Name: "fw"}, "new-id", testNow)
			if (err == nil) != (tt.wantCode == 0) || (err != nil && connect.CodeOf(err) != tt.wantCode) {
				t.Fatalf("err = %v, want code %v", err, tt.wantCode)
			}
			if err != nil {
				return
			}
			if len(r.Persist) != 1 || r.Persist[0].Kind != core.RecordFramework {
				t.Fatalf("persist = %v, want the framework's record", r.Persist)
			}
			if got := r.Persist[0].Framework.GetRegisteredTime().AsTime(); !got.Equal(tt.wantRegisteredAt) {
				t.Errorf("registered at %v, want %v", got, tt.wantRegisteredAt)
			}
			want := tt.id
			if want == "" {
				want = "new-id"
			}
			if id := r.Apply.Subscribed().GetId(); id != want {
				t.Errorf("subscribes %q", id)
			}
		})
	}
	if k.FrameworkRecord("new-id") != nil || !k.FrameworkRecord("completed").GetCompleted() || k.RegisteredFrameworks("") != 1 {
		t.Error("planSubscription changed the records")
	}
}

// frameworkRecord returns the persisted record of a framework.
func (d *domain) frameworkRecord(id string) *slacklinev1.FrameworkRecord {
	d.t.Helper()
	raw, _ := d.st.Load(context.Background(), store.BucketFrameworks)
	if raw[id] == nil {
		return nil
	}
	var rec slacklinev1.FrameworkRecord
	if err := proto.Unmarshal(raw[id], &rec); err != nil {
		d.t.Fatal(err)
	}
	return &rec
}

func (d *domain) framework(id string) *framework {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	return d.c.frameworks[id]
}

// roleMembers returns the allocator's frameworks by role.
func (d *domain) roleMembers() map[string][]string {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	out := map[string][]string{}
	for _, rs := range d.c.core.Allocator().RoleStates() {
		if len(rs.Frameworks) > 0 {
			out[rs.Name] = rs.Frameworks
		}
	}
	return out
}

func TestSubscribe(t *testing.T) {
	t.Parallel()
	const (
		connected    = slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED
		disconnected = slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED
		completed    = slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED
	)
	tests := []struct {
		name string
		run  func(t *testing.T, d *domain)
	}{
		{"a new framework gets an id, a durable record and a Subscribed event", func(t *testing.T, d *domain) {
			fw, sub, err := d.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
			if err != nil {
				t.Fatal(err)
			}
			if fw.id() == "" || fw.state != connected || fw.sub != sub {
				t.Fatalf("framework %+v", fw)
			}
			ev := sub.next().GetSubscribed()
			if ev.GetFrameworkId() != fw.id() || ev.GetStreamId() != sub.id {
				t.Fatalf("first event %v", ev)
			}
			if rec := d.frameworkRecord(fw.id()); rec == nil || rec.GetCompleted() || rec.GetInfo().GetName() != "fw" {
				t.Fatalf("record %v", rec)
			}
			if diff := cmp.Diff(map[string][]string{"*": {fw.id()}}, d.roleMembers()); diff != "" {
				t.Fatalf("allocator roles (-want +got):\n%s", diff)
			}
		}},
		{"failover with the same id ends the old stream and drops its offers", func(t *testing.T, d *domain) {
			d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			id, old := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60})
			d.allocate()
			if n := countEvents(events(old), isOffers); n != 1 {
				t.Fatalf("%d offers events", n)
			}
			fw, sub, err := d.subscribe(&slacklinev1.FrameworkInfo{Id: id, Name: "fw", FailoverTimeoutSeconds: 60})
			if err != nil {
				t.Fatal(err)
			}
			if !old.hasEnded() {
				t.Fatal("old subscription not ended")
			}
			if !errors.Is(old.reason, errFailedOver) || countEvents(events(old), func(ev *slacklinev1.Event) bool { return ev.GetError() != nil }) != 1 {
				t.Fatalf("old subscription ended with %v, want an error event and errFailedOver", old.reason)
			}
			if sub.id == old.id || fw.state != connected || !d.c.core.FrameworkOffered(fw.id()).IsEmpty() || func() bool { n, _ := d.c.core.Offers(); return n != 0 }() {
				t.Fatalf("after failover: stream %q (old %q), state %v, offers %d", sub.id, old.id, fw.state, d.c.core.FrameworkOffered(fw.id()))
			}
			if at := d.c.core.FrameworkRecord(fw.id()).GetRegisteredTime().AsTime(); !at.Equal(testNow) {
				t.Fatalf("registeredAt %v changed", at)
			}
			// The old stream's end does not disconnect the new subscription.
			d.c.subscriptionEnded(fw, old)
			if fw.state != connected || fw.sub != sub {
				t.Fatalf("state %v after the old stream ended", fw.state)
			}
		}},
		{"failover replays unacknowledged updates", func(t *testing.T, d *domain) {
			id, _ := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60})
			agentID := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024", agentTask(id, "t1", "cpus:1", slacklinev1.TaskState_TASK_STATE_STAGING)))
			d.c.mu.Lock()
			d.c.handleStatus(d.c.agents[agentID], &slacklinev1.TaskStatus{TaskId: "t1", FrameworkId: id, AgentId: agentID,
				State: slacklinev1.TaskState_TASK_STATE_RUNNING, Uuid: "u1"})
			d.c.mu.Unlock()
			_, sub, err := d.subscribe(&slacklinev1.FrameworkInfo{Id: id, Name: "fw", FailoverTimeoutSeconds: 60})
			if err != nil {
				t.Fatal(err)
			}
			if len(sub.replay) != 1 || sub.replay[0].GetUpdate().GetStatus().GetUuid() != "u1" {
				t.Fatalf("replay %v", sub.replay)
			}
		}},
		{"failover changes roles and capabilities", func(t *testing.T, d *domain) {
			id, _ := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw", Roles: []string{"a"}})
			fw, _, err := d.subscribe(&slacklinev1.FrameworkInfo{Id: id, Name: "fw", Roles: []string{"a", "b"}, Capabilities: revocableCapable})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string][]string{"a": {id}, "b": {id}}, d.roleMembers()); diff != "" {
				t.Fatalf("allocator roles (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"a", "b"}, d.frameworkRecord(id).GetInfo().GetRoles()); diff != "" || !hasCapability(fw.info, revocableCapable[0]) {
				t.Fatalf("info %v, record roles (-want +got):\n%s", fw.info, diff)
			}
		}},
		{"a torn-down framework cannot subscribe again", func(t *testing.T, d *domain) {
			id, _ := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw"})
			done := d.c.takeTurn() // every scope, as the tick takes
			d.c.mu.Lock()
			writes := d.c.removeFramework(d.c.frameworks[id], "test")
			d.c.mu.Unlock()
			done()
			if err := d.st.Apply(context.Background(), writes...); err != nil {
				t.Fatal(err)
			}
			_, _, err := d.subscribe(&slacklinev1.FrameworkInfo{Id: id, Name: "fw"})
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("err = %v, want FailedPrecondition", err)
			}
			if !d.frameworkRecord(id).GetCompleted() || d.framework(id).state != completed {
				t.Fatal("the refused subscription changed the framework")
			}
		}},
		{"a failed write is Unavailable and applies nothing", func(t *testing.T, d *domain) {
			d.st.err = errDiskFull
			_, _, err := d.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("err = %v", err)
			}
			if len(d.c.frameworks) != 0 {
				t.Fatal("framework admitted without its record")
			}
		}},
		{"the end of the stream disconnects; a zero failover timeout tears down", func(t *testing.T, d *domain) {
			keep, keepSub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "keep", FailoverTimeoutSeconds: 60})
			gone, goneSub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "gone"})
			d.c.subscriptionEnded(d.framework(keep), keepSub)
			d.c.subscriptionEnded(d.framework(gone), goneSub)
			if fw := d.framework(keep); fw.state != disconnected || fw.sub != nil {
				t.Fatalf("keep: state %v", fw.state)
			}
			// Its failover timeout runs from the disconnection: the core
			// reports it expired once a minute has passed, not before.
			if r := d.c.core.Tick(testNow.Add(time.Minute)); len(r.Expired) != 0 {
				t.Fatalf("expired at the deadline: %v", r.Expired)
			}
			if r := d.c.core.Tick(testNow.Add(time.Minute + time.Second)); !slices.Equal(r.Expired, []string{keep}) {
				t.Fatalf("expired after the deadline: %v, want %s", r.Expired, keep)
			}
			if d.framework(gone).state != completed || !d.frameworkRecord(gone).GetCompleted() {
				t.Fatal("a framework with a zero failover timeout was not torn down")
			}
			if d.frameworkRecord(keep).GetCompleted() {
				t.Fatal("keep's record is completed")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newDomain(t)) })
	}
}
