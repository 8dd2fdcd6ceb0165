package coordinator

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Ports of the intent of Mesos's master maintenance tests
// (src/tests/master_maintenance_tests.cpp) through the real services.

func machineWindow(start time.Time, d time.Duration, hosts ...string) *slacklinev1.Window {
	w := &slacklinev1.Window{Unavailability: &slacklinev1.Unavailability{Start: timestamppb.New(start), Duration: durationpb.New(d)}}
	for _, h := range hosts {
		w.MachineIds = append(w.MachineIds, &slacklinev1.MachineID{Hostname: h})
	}
	return w
}

func (tc *testCluster) updateSchedule(windows ...*slacklinev1.Window) error {
	_, err := tc.operator.UpdateMaintenanceSchedule(context.Background(), connect.NewRequest(&slacklinev1.UpdateMaintenanceScheduleRequest{
		Schedule: &slacklinev1.Schedule{Windows: windows}}))
	return err
}

func machines(hosts ...string) []*slacklinev1.MachineID {
	var out []*slacklinev1.MachineID
	for _, h := range hosts {
		out = append(out, &slacklinev1.MachineID{Hostname: h})
	}
	return out
}

func (tc *testCluster) startMaintenance(hosts ...string) error {
	_, err := tc.operator.StartMaintenance(context.Background(), connect.NewRequest(&slacklinev1.StartMaintenanceRequest{Machines: machines(hosts...)}))
	return err
}

func (tc *testCluster) stopMaintenance(hosts ...string) error {
	_, err := tc.operator.StopMaintenance(context.Background(), connect.NewRequest(&slacklinev1.StopMaintenanceRequest{Machines: machines(hosts...)}))
	return err
}

func (tc *testCluster) maintenanceStatus() *slacklinev1.ClusterStatus {
	tc.t.Helper()
	resp, err := tc.operator.GetMaintenanceStatus(context.Background(), connect.NewRequest(&slacklinev1.GetMaintenanceStatusRequest{}))
	if err != nil {
		tc.t.Fatal(err)
	}
	return resp.Msg.GetStatus()
}

// offers returns the next n offers, from one or more events.
func (fw *testFramework) offers(n int) []*slacklinev1.Offer {
	fw.t.Helper()
	var out []*slacklinev1.Offer
	for len(out) < n {
		out = append(out, fw.next(isOffers).GetOffers().GetOffers()...)
	}
	return out
}

func (fw *testFramework) nextInverseOffer() *slacklinev1.InverseOffer {
	fw.t.Helper()
	return fw.next(func(ev *slacklinev1.Event) bool { return len(ev.GetOffers().GetInverseOffers()) > 0 }).GetOffers().GetInverseOffers()[0]
}

func (fw *testFramework) answerInverse(accept bool, filters *slacklinev1.Filters, ids ...string) error {
	if accept {
		_, err := fw.client.AcceptInverseOffers(context.Background(), call(fw, &slacklinev1.AcceptInverseOffersRequest{
			FrameworkId: fw.id, InverseOfferIds: ids, Filters: filters}))
		return err
	}
	_, err := fw.client.DeclineInverseOffers(context.Background(), call(fw, &slacklinev1.DeclineInverseOffersRequest{
		FrameworkId: fw.id, InverseOfferIds: ids, Filters: filters}))
	return err
}

// runTask launches a task on the framework's next offer and reports it
// RUNNING from the agent.
func runTask(t *testing.T, fw *testFramework, a *testAgent, id string) {
	t.Helper()
	offer := fw.nextOffer()
	if err := launch(fw, offer, refuse(0), taskInfo(id, "cpus:1;mem:128")); err != nil {
		t.Fatal(err)
	}
	if cmd := a.nextCommand(); cmd.GetRunTask().GetTask().GetTaskId() != id {
		t.Fatalf("agent command %v, want RunTask %s", cmd, id)
	}
	a.sendStatus(fw.id, id, slacklinev1.TaskState_TASK_STATE_RUNNING, "u-"+id)
	if st := fw.nextUpdate(); st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("update %v, want RUNNING", st)
	}
}

// TestMaintenanceScheduleValidation: invalid schedules are refused with
// InvalidArgument naming the window and the machine; a valid one is
// returned by GetMaintenanceSchedule.
func TestMaintenanceScheduleValidation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		start := time.Now().Add(time.Hour)
		for _, tt := range []struct {
			name    string
			windows []*slacklinev1.Window
			want    string
		}{
			{"machine in two windows", []*slacklinev1.Window{machineWindow(start, time.Hour, "a"), machineWindow(start, time.Hour, "b", "a")},
				"windows[1]: machine a is already in windows[0]"},
			{"negative duration", []*slacklinev1.Window{machineWindow(start, -time.Hour, "a")}, "windows[0] (machine a): unavailability.duration -1h0m0s is negative"},
			{"empty machine id", []*slacklinev1.Window{{MachineIds: []*slacklinev1.MachineID{{}}, Unavailability: machineWindow(start, 0).Unavailability}},
				"windows[0].machine_ids[0]: machine id has neither hostname nor ip"},
		} {
			err := tc.updateSchedule(tt.windows...)
			if connectCode(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %v, want InvalidArgument containing %q", tt.name, err, tt.want)
			}
		}
		want := []*slacklinev1.Window{machineWindow(start, time.Hour, "a", "b")}
		if err := tc.updateSchedule(want...); err != nil {
			t.Fatal(err)
		}
		got, err := tc.operator.GetMaintenanceSchedule(context.Background(), connect.NewRequest(&slacklinev1.GetMaintenanceScheduleRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.Msg.GetSchedule(), &slacklinev1.Schedule{Windows: want}) {
			t.Fatalf("schedule = %v, want %v", got.Msg.GetSchedule(), want)
		}
	})
}

// TestUnavailabilityInOffersAndInverseOffers: posting a schedule rescinds
// the outstanding offer, re-offers with the unavailability and sends an
// inverse offer for the whole agent; an update rescinds the inverse offer
// and sends one with the new window; answers are refused for unknown ids
// and kept for GetMaintenanceStatus; a decline's filter decides when the
// inverse offer comes again.
func TestUnavailabilityInOffersAndInverseOffers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:4;mem:4096")
		tc.registerAgent("host-b", "cpus:4;mem:4096")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		// Hold host-a's offer so that the framework uses the agent.
		var held *slacklinev1.Offer
		for _, o := range fw.offers(2) {
			if o.GetUnavailability() != nil {
				t.Fatalf("offer before any schedule has unavailability %v", o.GetUnavailability())
			}
			if o.GetHostname() == "host-a" {
				held = o
			}
		}
		start := time.Now().Add(time.Hour).Truncate(time.Second)
		if err := tc.updateSchedule(machineWindow(start, time.Hour, "host-a")); err != nil {
			t.Fatal(err)
		}
		{
			rescind := fw.next(func(ev *slacklinev1.Event) bool { return ev.GetRescind() != nil })
			if rescind.GetRescind().GetOfferId() != held.GetId() {
				t.Fatalf("rescinded %v, want %s", rescind, held.GetId())
			}
		}
		reoffer := fw.next(func(ev *slacklinev1.Event) bool {
			return isOffers(ev) && ev.GetOffers().GetOffers()[0].GetHostname() == "host-a"
		}).GetOffers().GetOffers()[0]
		if u := reoffer.GetUnavailability(); !u.GetStart().AsTime().Equal(start) || u.GetDuration().AsDuration() != time.Hour {
			t.Fatalf("re-sent offer unavailability = %v, want start %v for 1h", u, start)
		}
		inv := fw.nextInverseOffer()
		if inv.GetAgentId() != agent.id || inv.GetHostname() != "host-a" || !inv.GetUnavailability().GetStart().AsTime().Equal(start) {
			t.Fatalf("inverse offer = %v, want one for host-a starting %v", inv, start)
		}
		if res := inv.GetResources(); len(res) == 0 {
			t.Fatal("inverse offer names no resources; want the whole agent")
		}

		// Moving the window rescinds the inverse offer and sends an updated one.
		later := start.Add(time.Hour)
		if err := tc.updateSchedule(machineWindow(later, time.Hour, "host-a")); err != nil {
			t.Fatal(err)
		}
		if ev := fw.next(func(ev *slacklinev1.Event) bool { return ev.GetRescindInverseOffer() != nil }); ev.GetRescindInverseOffer().GetInverseOfferId() != inv.GetId() {
			t.Fatalf("rescinded inverse offer %v, want %s", ev, inv.GetId())
		}
		updated := fw.nextInverseOffer()
		if !updated.GetUnavailability().GetStart().AsTime().Equal(later) {
			t.Fatalf("updated inverse offer starts %v, want %v", updated.GetUnavailability().GetStart().AsTime(), later)
		}
		// The rescinded one cannot be answered.
		if err := fw.answerInverse(true, nil, inv.GetId()); connectCode(err) != connect.CodeNotFound {
			t.Fatalf("accept a rescinded inverse offer: %v, want NotFound", err)
		}

		// Accepting an invalid inverse offer is refused and answers nothing.
		for _, tt := range []struct {
			ids  []string
			code connect.Code
		}{
			{nil, connect.CodeInvalidArgument},
			{[]string{"no-such-inverse-offer"}, connect.CodeNotFound},
			{[]string{updated.GetId(), "no-such-inverse-offer"}, connect.CodeNotFound},
			{[]string{updated.GetId(), updated.GetId()}, connect.CodeInvalidArgument},
			{[]string{"bad id"}, connect.CodeInvalidArgument},
		} {
			if err := fw.answerInverse(true, nil, tt.ids...); connectCode(err) != tt.code {
				t.Errorf("accept %q: %v, want %v", tt.ids, err, tt.code)
			}
		}
		if err := fw.answerInverse(true, refuse(nan()), updated.GetId()); connectCode(err) != connect.CodeInvalidArgument {
			t.Errorf("accept with NaN filter: %v, want InvalidArgument", err)
		}
		if st := tc.maintenanceStatus(); len(st.GetDrainingMachines()) != 1 || st.GetDrainingMachines()[0].GetStatuses()[0].GetStatus() == slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_ACCEPT {
			t.Fatalf("status after refused answers = %v, want host-a draining, not accepted", st)
		}

		// Decline with a short filter: the inverse offer comes back.
		before := time.Now()
		if err := fw.answerInverse(false, refuse(0.2), updated.GetId()); err != nil {
			t.Fatal(err)
		}
		status := tc.maintenanceStatus().GetDrainingMachines()[0]
		if got := status.GetStatuses(); len(got) != 1 || got[0].GetFrameworkId() != fw.id ||
			got[0].GetStatus() != slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_DECLINE || got[0].GetTimestamp().AsTime().Before(before.Add(-time.Second)) {
			t.Fatalf("statuses after decline = %v", got)
		}
		if status.GetId().GetHostname() != "host-a" || len(status.GetAgentIds()) != 1 || status.GetAgentIds()[0] != agent.id {
			t.Fatalf("draining machine = %v, want host-a with its agent", status)
		}
		again := fw.nextInverseOffer()
		if again.GetId() == updated.GetId() {
			t.Fatal("the declined inverse offer was re-sent with the same id")
		}
		// Accept with a long filter: no inverse offer for a while.
		if err := fw.answerInverse(true, refuse(60), again.GetId()); err != nil {
			t.Fatal(err)
		}
		if got := tc.maintenanceStatus().GetDrainingMachines()[0].GetStatuses()[0].GetStatus(); got != slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_ACCEPT {
			t.Fatalf("status after accept = %v", got)
		}
		fw.quiet(300*time.Millisecond, func(ev *slacklinev1.Event) bool { return len(ev.GetOffers().GetInverseOffers()) > 0 })
		if v := metricValue(t, tc.c, "slackline_coordinator_inverse_offers_sent_total"); v < 3 {
			t.Errorf("inverse offers sent metric = %v, want >= 3", v)
		}
		if v := metricValue(t, tc.c, "slackline_coordinator_inverse_offers_accepted_total"); v != 1 {
			t.Errorf("inverse offers accepted metric = %v, want 1", v)
		}

		// Leaving the schedule: host-a is UP again and offered without unavailability.
		if err := tc.updateSchedule(); err != nil {
			t.Fatal(err)
		}
		up := fw.next(func(ev *slacklinev1.Event) bool {
			return isOffers(ev) && ev.GetOffers().GetOffers()[0].GetHostname() == "host-a" && ev.GetOffers().GetOffers()[0].GetUnavailability() == nil
		})
		if up == nil {
			t.Fatal("no offer without unavailability")
		}
		if st := tc.maintenanceStatus(); len(st.GetDrainingMachines())+len(st.GetDownMachines()) != 0 {
			t.Fatalf("status with an empty schedule = %v", st)
		}
	})
}

// TestStartAndStopMaintenance: StartMaintenance needs a scheduled machine,
// shuts its agent down, ends its tasks as GONE_BY_OPERATOR and refuses its
// re-registration; StopMaintenance brings it UP, out of the schedule, and
// the agent registers again and is offered resources.
func TestStartAndStopMaintenance(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:4;mem:4096")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", Capabilities: []slacklinev1.FrameworkCapability{
			slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}})
		runTask(t, fw, agent, "t1")

		if err := tc.startMaintenance("host-a"); connectCode(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "not in the maintenance schedule") {
			t.Fatalf("StartMaintenance of an unscheduled machine: %v, want FailedPrecondition", err)
		}
		if err := tc.stopMaintenance("host-a"); connectCode(err) != connect.CodeFailedPrecondition {
			t.Fatalf("StopMaintenance of an UP machine: %v, want FailedPrecondition", err)
		}
		if err := tc.updateSchedule(machineWindow(time.Now(), time.Hour, "HOST-A")); err != nil {
			t.Fatal(err)
		}
		fw.nextInverseOffer()
		if err := tc.startMaintenance("host-a"); err != nil {
			t.Fatal(err)
		}
		if cmd := agent.nextCommand(); cmd.GetShutdownAgent() == nil || !strings.Contains(cmd.GetShutdownAgent().GetMessage(), "DOWN") {
			t.Fatalf("agent command %v, want ShutdownAgent", cmd)
		}
		st := fw.nextUpdate()
		if st.GetTaskId() != "t1" || st.GetState() != slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR {
			t.Fatalf("update %v, want t1 GONE_BY_OPERATOR", st)
		}
		// The command stream ends after the shutdown; calls on the session fail.
		if _, ok := <-agent.commands; ok {
			t.Fatal("agent command stream still open after the shutdown")
		}
		_, err := agent.client.Heartbeat(context.Background(), connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: agent.id, SessionId: agent.session}))
		if connectCode(err) != connect.CodeFailedPrecondition {
			t.Fatalf("heartbeat of a shut down agent: %v, want FailedPrecondition", err)
		}
		agents, _ := tc.operator.GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		if a := agents.Msg.GetAgents()[0]; a.GetState() != slacklinev1.AgentState_AGENT_STATE_GONE || a.GetMode() != slacklinev1.MachineMode_MACHINE_MODE_DOWN {
			t.Fatalf("agent after StartMaintenance = %v %v, want GONE and DOWN", a.GetState(), a.GetMode())
		}
		if got := tc.maintenanceStatus(); len(got.GetDownMachines()) != 1 || got.GetDownMachines()[0].GetHostname() != "host-a" {
			t.Fatalf("status = %v, want host-a down", got)
		}
		// A DOWN machine cannot re-register, with its id or a new one, nor leave the schedule.
		for _, id := range []string{agent.id, ""} {
			_, err := newAgentClient(tc).Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
				ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
				AgentInfo:       &slacklinev1.AgentInfo{Id: id, Hostname: "host-a", Resources: agentResources("cpus:4;mem:4096")},
			}))
			if connectCode(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "DOWN for maintenance") {
				t.Fatalf("register on a DOWN machine (id %q): %v, want FailedPrecondition", id, err)
			}
		}
		if err := tc.updateSchedule(); connectCode(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "host-a is DOWN") {
			t.Fatalf("schedule without the DOWN machine: %v, want InvalidArgument", err)
		}
		if err := tc.startMaintenance("host-a"); connectCode(err) != connect.CodeFailedPrecondition {
			t.Fatalf("StartMaintenance of a DOWN machine: %v, want FailedPrecondition", err)
		}

		if err := tc.stopMaintenance("host-a"); err != nil {
			t.Fatal(err)
		}
		sched, _ := tc.operator.GetMaintenanceSchedule(context.Background(), connect.NewRequest(&slacklinev1.GetMaintenanceScheduleRequest{}))
		if n := len(sched.Msg.GetSchedule().GetWindows()); n != 0 {
			t.Fatalf("schedule after StopMaintenance has %d windows, want none", n)
		}
		back := tc.registerAgentWithID(agent.id, "host-a", "cpus:4;mem:4096")
		if back.id != agent.id {
			t.Fatalf("agent came back as %s, want its id %s", back.id, agent.id)
		}
		// An offer made between the schedule and StartMaintenance (with the
		// window's unavailability, rescinded since) may still wait in the
		// backlog: the one that counts is host-a's, without unavailability.
		fw.next(func(ev *slacklinev1.Event) bool {
			for _, o := range ev.GetOffers().GetOffers() {
				if o.GetAgentId() == agent.id && o.GetUnavailability() == nil {
					return true
				}
			}
			return false
		})
	})
}

// TestMaintenanceSurvivesRestart: the schedule and the DOWN mode are
// persisted; after a restart the DOWN machine still cannot register and the
// draining one gets inverse offers again.
func TestMaintenanceSurvivesRestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		tc := startPipeCluster(t, fastConfig(dir))
		tc.registerAgent("host-a", "cpus:4;mem:4096")
		start := time.Now().Add(time.Hour).Truncate(time.Second)
		if err := tc.updateSchedule(machineWindow(start, time.Hour, "host-a"), machineWindow(start, 0, "host-b")); err != nil {
			t.Fatal(err)
		}
		if err := tc.startMaintenance("host-b"); err != nil {
			t.Fatal(err)
		}
		tc.stop()

		tc2 := startPipeCluster(t, fastConfig(dir))
		got := tc2.maintenanceStatus()
		if len(got.GetDrainingMachines()) != 1 || got.GetDrainingMachines()[0].GetId().GetHostname() != "host-a" ||
			len(got.GetDownMachines()) != 1 || got.GetDownMachines()[0].GetHostname() != "host-b" {
			t.Fatalf("status after restart = %v, want host-a draining and host-b down", got)
		}
		_, err := newAgentClient(tc2).Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo:       &slacklinev1.AgentInfo{Hostname: "host-b", Resources: agentResources("cpus:1;mem:512")},
		}))
		if connectCode(err) != connect.CodeFailedPrecondition {
			t.Fatalf("register on a DOWN machine after restart: %v, want FailedPrecondition", err)
		}
		tc2.registerAgent("host-a", "cpus:4;mem:4096")
		fw := tc2.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		if o := fw.nextOffer(); !o.GetUnavailability().GetStart().AsTime().Equal(start) {
			t.Fatalf("offer after restart = %v, want the window's unavailability", o)
		}
		if inv := fw.nextInverseOffer(); inv.GetHostname() != "host-a" {
			t.Fatalf("inverse offer after restart = %v", inv)
		}
	})
}

// TestMinAvailableGuard: GetMaintenanceStatus says when draining a window
// would leave a framework below its declared minimum of RUNNING tasks.
func TestMinAvailableGuard(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		a := tc.registerAgent("host-a", "cpus:1;mem:512")
		b := tc.registerAgent("host-b", "cpus:1;mem:512")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "svc", MinAvailableTasks: 1})
		for _, offer := range fw.offers(2) {
			id := "t-" + offer.GetHostname()
			if err := launch(fw, offer, refuse(60), taskInfo(id, "cpus:1;mem:128")); err != nil {
				t.Fatal(err)
			}
			ag := a
			if offer.GetHostname() == "host-b" {
				ag = b
			}
			ag.nextCommand()
			ag.sendStatus(fw.id, id, slacklinev1.TaskState_TASK_STATE_RUNNING, "u"+id)
		}
		status := func() *slacklinev1.InverseOfferFrameworkStatus {
			t.Helper()
			st := tc.maintenanceStatus()
			if len(st.GetDrainingMachines()) == 0 || len(st.GetDrainingMachines()[0].GetStatuses()) == 0 {
				t.Fatalf("status = %v, want a draining machine with the framework", st)
			}
			return st.GetDrainingMachines()[0].GetStatuses()[0]
		}
		// One machine of two: one task stays, the minimum holds.
		start := time.Now().Add(time.Hour)
		if err := tc.updateSchedule(machineWindow(start, time.Hour, "host-a")); err != nil {
			t.Fatal(err)
		}
		if s := status(); s.GetBreaksMinAvailable() || s.GetTasksOnMachine() != 1 || s.GetRunningTasks() != 2 || s.GetMinAvailableTasks() != 1 || s.GetFrameworkName() != "svc" {
			t.Fatalf("one machine of two: %v, want 1 of 2 tasks there and the minimum kept", s)
		}
		// Both machines in one window: nothing would stay.
		if err := tc.updateSchedule(machineWindow(start, time.Hour, "host-a", "host-b")); err != nil {
			t.Fatal(err)
		}
		if s := status(); !s.GetBreaksMinAvailable() {
			t.Fatalf("both machines: %v, want breaks_min_available", s)
		}
		// In two windows each may go alone.
		if err := tc.updateSchedule(machineWindow(start, time.Hour, "host-a"), machineWindow(start.Add(time.Hour), time.Hour, "host-b")); err != nil {
			t.Fatal(err)
		}
		if s := status(); s.GetBreaksMinAvailable() {
			t.Fatalf("separate windows: %v, want the minimum kept", s)
		}
	})
}

// TestAutoDownAfterAccept: with Config.AutoDownAfterAccept a machine whose
// window started goes DOWN by itself once its only framework accepted.
func TestAutoDownAfterAccept(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := fastConfig(t.TempDir())
		cfg.AutoDownAfterAccept = true
		tc := startPipeCluster(t, cfg)
		agent := tc.registerAgent("host-a", "cpus:4;mem:4096")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		runTask(t, fw, agent, "t1")
		if err := tc.updateSchedule(machineWindow(time.Now().Add(-time.Minute), time.Hour, "host-a")); err != nil {
			t.Fatal(err)
		}
		inv := fw.nextInverseOffer()
		// Declined: it stays DRAINING.
		if err := fw.answerInverse(false, refuse(0.1), inv.GetId()); err != nil {
			t.Fatal(err)
		}
		// The next inverse offer comes after the filter, many timer ticks later.
		again := fw.nextInverseOffer()
		if st := tc.maintenanceStatus(); len(st.GetDownMachines()) != 0 {
			t.Fatalf("machine went DOWN after a decline: %v", st)
		}
		if err := fw.answerInverse(true, refuse(60), again.GetId()); err != nil {
			t.Fatal(err)
		}
		if cmd := agent.nextCommand(); cmd.GetShutdownAgent() == nil {
			t.Fatalf("agent command %v, want ShutdownAgent after the accept", cmd)
		}
		if st := tc.maintenanceStatus(); len(st.GetDownMachines()) != 1 {
			t.Fatalf("status = %v, want host-a down", st)
		}
	})
}

// metricValue returns the value of an unlabelled counter or gauge.
func metricValue(t *testing.T, c *Coordinator, name string) float64 {
	t.Helper()
	families, err := c.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func agentResources(s string) []*slacklinev1.Resource {
	return resources.MustParse(s).Proto("", resources.Regular)
}

// TestShutdownReachesAnAgentWhoseStreamOpensLate: an agent taken DOWN
// between Register and Connect still gets its ShutdownAgentCommand.
func TestShutdownReachesAnAgentWhoseStreamOpensLate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		client := newAgentClient(tc)
		resp, err := client.Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo:       &slacklinev1.AgentInfo{Hostname: "late", Resources: agentResources("cpus:1;mem:512")},
		}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.updateSchedule(machineWindow(time.Now(), 0, "late")); err != nil {
			t.Fatal(err)
		}
		if err := tc.startMaintenance("late"); err != nil {
			t.Fatal(err)
		}
		stream, err := client.Connect(context.Background(), connect.NewRequest(&slacklinev1.ConnectRequest{
			AgentId: resp.Msg.GetAgentId(), SessionId: resp.Msg.GetSessionId()}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var got []*slacklinev1.AgentCommand
		for stream.Receive() {
			got = append(got, stream.Msg().GetCommand())
		}
		if len(got) == 0 || got[len(got)-1].GetShutdownAgent() == nil {
			t.Fatalf("commands on the late stream = %v (err %v), want a ShutdownAgent", got, stream.Err())
		}
	})
}
