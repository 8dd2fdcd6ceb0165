package coordinator

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/maintenance"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

func scheduleOf(windows ...*slacklinev1.Window) *slacklinev1.Schedule {
	return &slacklinev1.Schedule{Windows: windows}
}

// maintenanceRecord returns the persisted maintenance state.
func (d *domain) maintenanceRecord() *maintenance.State {
	d.t.Helper()
	raw, _ := d.st.Load(context.Background(), store.BucketMaintenance)
	if raw[maintenanceKey] == nil {
		return maintenance.New()
	}
	var rec slacklinev1.MaintenanceRecord
	if err := proto.Unmarshal(raw[maintenanceKey], &rec); err != nil {
		d.t.Fatal(err)
	}
	st, err := maintenance.FromRecord(&rec)
	if err != nil {
		d.t.Fatal(err)
	}
	return st
}

func (d *domain) updateSchedule(windows ...*slacklinev1.Window) error {
	return d.c.changeMaintenance(context.Background(), "test", transitionWith((*maintenance.State).UpdateSchedule, scheduleOf(windows...)))
}

func (d *domain) startMaintenance(hosts ...string) error {
	return d.c.changeMachines(context.Background(), "test", machines(hosts...), (*maintenance.State).StartMaintenance)
}

func (d *domain) stopMaintenance(hosts ...string) error {
	return d.c.changeMachines(context.Background(), "test", machines(hosts...), (*maintenance.State).StopMaintenance)
}

func (d *domain) mode(host string) slacklinev1.MachineMode {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	m, ok := d.c.core.Maintenance().Lookup(host, "")
	if !ok {
		return maintenance.ModeUp
	}
	return d.c.core.Maintenance().Mode(m)
}

func TestChangeMaintenance(t *testing.T) {
	t.Parallel()
	partitionAware := &slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60,
		Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}}
	window := machineWindow(testNow, time.Hour, "host-a")
	tests := []struct {
		name string
		run  func(t *testing.T, d *domain)
	}{
		{"a schedule update rescinds offers and re-offers with the unavailability", func(t *testing.T, d *domain) {
			_, sub := d.connectFramework(partitionAware)
			d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			d.allocate()
			events(sub)
			if err := d.updateSchedule(window); err != nil {
				t.Fatal(err)
			}
			if n := countEvents(events(sub), isRescind); n != 1 {
				t.Fatalf("%d rescinds, want 1", n)
			}
			d.allocate()
			var offers []*slacklinev1.Offer
			for _, ev := range events(sub) {
				offers = append(offers, ev.GetOffers().GetOffers()...)
			}
			if len(offers) != 1 || !offers[0].GetUnavailability().GetStart().AsTime().Equal(testNow) {
				t.Fatalf("offers after the update: %v", offers)
			}
			if d.mode("host-a") != maintenance.ModeDraining || d.maintenanceRecord().Mode(maintenance.Machine{Hostname: "host-a"}) != maintenance.ModeDraining {
				t.Fatal("host-a is not DRAINING in memory and on disk")
			}
		}},
		{"StartMaintenance shuts the agent down and ends its tasks", func(t *testing.T, d *domain) {
			fwID, sub := d.connectFramework(partitionAware)
			id := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024",
				agentTask(fwID, "t1", "cpus:1", slacklinev1.TaskState_TASK_STATE_RUNNING)))
			if err := d.updateSchedule(window); err != nil {
				t.Fatal(err)
			}
			events(sub)
			a := d.agent(id)
			session := a.session
			if err := d.startMaintenance("host-a"); err != nil {
				t.Fatal(err)
			}
			if got := updates(events(sub)); got["t1"] != slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR {
				t.Fatalf("updates %v, want t1 GONE_BY_OPERATOR", got)
			}
			if cmd := session.next(); cmd.GetShutdownAgent() == nil {
				t.Fatalf("command %v, want a shutdown", cmd)
			}
			if a.State != slacklinev1.AgentState_AGENT_STATE_GONE || a.session != nil || a.closing != session {
				t.Fatalf("agent state %v", a.State)
			}
			if got := d.st.agentStates(t)[id]; got != slacklinev1.AgentState_AGENT_STATE_GONE {
				t.Fatalf("persisted agent state %v", got)
			}
			if _, err := d.register(registerRequest(id, "host-a", "cpus:2;mem:1024")); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("registration on a DOWN machine: %v", err)
			}
		}},
		{"StopMaintenance forgets the GONE agent, which may register again", func(t *testing.T, d *domain) {
			id := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			if err := d.updateSchedule(window); err != nil {
				t.Fatal(err)
			}
			if err := d.startMaintenance("host-a"); err != nil {
				t.Fatal(err)
			}
			if err := d.stopMaintenance("host-a"); err != nil {
				t.Fatal(err)
			}
			if d.agent(id) != nil || d.mode("host-a") != maintenance.ModeUp {
				t.Fatal("agent not forgotten")
			}
			if _, ok := d.st.agentStates(t)[id]; ok {
				t.Fatal("agent record not deleted")
			}
			if len(d.maintenanceRecord().Machines()) != 0 {
				t.Fatal("host-a still in the persisted schedule")
			}
			d.mustRegister(registerRequest(id, "host-a", "cpus:2;mem:1024"))
		}},
		{"an answer recorded before an unrelated change is kept", func(t *testing.T, d *domain) {
			if err := d.updateSchedule(window); err != nil {
				t.Fatal(err)
			}
			a := maintenance.Machine{Hostname: "host-a"}
			done := d.c.takeTurn() // every scope, as the tick takes
			d.c.mu.Lock()
			d.c.core.Maintenance().RecordAnswer(a, "fw", maintenance.StatusAccept, testNow)
			d.c.mu.Unlock()
			done()
			if err := d.updateSchedule(window, machineWindow(testNow, time.Hour, "host-b")); err != nil {
				t.Fatal(err)
			}
			if got := d.c.core.Maintenance().Answers(a)["fw"].Status; got != maintenance.StatusAccept {
				t.Fatalf("answer %v after an unrelated schedule change", got)
			}
		}},
		{"invalid transitions change nothing", func(t *testing.T, d *domain) {
			id := d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			if err := d.updateSchedule(window); err != nil {
				t.Fatal(err)
			}
			for _, tr := range []struct {
				name string
				err  error
				want connect.Code
			}{
				{"a machine in two windows", d.updateSchedule(window, machineWindow(testNow, time.Hour, "host-a")), connect.CodeInvalidArgument},
				{"StartMaintenance of an unscheduled machine", d.startMaintenance("host-z"), connect.CodeFailedPrecondition},
				{"StopMaintenance of a DRAINING machine", d.stopMaintenance("host-a"), connect.CodeFailedPrecondition},
				{"StartMaintenance of no machine", d.startMaintenance(), connect.CodeInvalidArgument},
			} {
				if connect.CodeOf(tr.err) != tr.want {
					t.Errorf("%s: %v, want %v", tr.name, tr.err, tr.want)
				}
			}
			if err := d.startMaintenance("host-a"); err != nil {
				t.Fatal(err)
			}
			if err := d.startMaintenance("host-a"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("StartMaintenance of a DOWN machine: %v", err)
			}
			if err := d.updateSchedule(); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("a schedule without the DOWN machine: %v", err)
			}
			if d.mode("host-a") != maintenance.ModeDown || d.maintenanceRecord().Mode(maintenance.Machine{Hostname: "host-a"}) != maintenance.ModeDown {
				t.Error("a refused transition changed the state")
			}
			if d.agent(id).State != slacklinev1.AgentState_AGENT_STATE_GONE {
				t.Error("agent not GONE")
			}
		}},
		{"a failed write is Unavailable and installs nothing", func(t *testing.T, d *domain) {
			d.mustRegister(registerRequest("", "host-a", "cpus:2;mem:1024"))
			d.st.err = errDiskFull
			if err := d.updateSchedule(window); connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("err = %v", err)
			}
			if d.mode("host-a") != maintenance.ModeUp {
				t.Fatal("schedule installed without its record")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newDomain(t)) })
	}
}
