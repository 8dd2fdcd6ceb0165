package core

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Go tables for the agent records' pure decisions (agents.go); their
// effects on offers and tasks are in testdata/agentrecords.txt.

const (
	active      = slacklinev1.AgentState_AGENT_STATE_ACTIVE
	unreachable = slacklinev1.AgentState_AGENT_STATE_UNREACHABLE
	recovering  = slacklinev1.AgentState_AGENT_STATE_RECOVERING
	gone        = slacklinev1.AgentState_AGENT_STATE_GONE
)

// knownAgent is an agent record as a core holds it, registered an hour
// before t0.
type knownAgent struct {
	id, hostname, res string
	state             slacklinev1.AgentState
}

func agentInfo(id, hostname, res string) *slacklinev1.AgentInfo {
	return &slacklinev1.AgentInfo{Id: id, Hostname: hostname, Resources: resources.MustParse(res).Proto("", resources.Regular)}
}

// withAgents returns a core holding the records, placed in st.
func withAgents(st *maintenance.State, agents ...knownAgent) *Core {
	k := New(testConfig(nil))
	for _, a := range agents {
		r := &AgentRecord{ID: a.id, Info: agentInfo(a.id, a.hostname, a.res), Total: resources.MustParse(a.res),
			State: a.state, RegisteredAt: t0.Add(-time.Hour)}
		r.Maint = Place(st, r.Info)
		k.addAgentRecord(r)
		if a.state == active {
			k.registerAgent(r.spec(), t0.Add(-time.Hour))
		}
	}
	k.take()
	return k
}

func window(start time.Time, d time.Duration, hosts ...string) *slacklinev1.Window {
	w := &slacklinev1.Window{Unavailability: &slacklinev1.Unavailability{Start: timestamppb.New(start), Duration: durationpb.New(d)}}
	for _, h := range hosts {
		w.MachineIds = append(w.MachineIds, &slacklinev1.MachineID{Hostname: h})
	}
	return w
}

func machineIDs(hosts ...string) []*slacklinev1.MachineID {
	var out []*slacklinev1.MachineID
	for _, h := range hosts {
		out = append(out, &slacklinev1.MachineID{Hostname: h})
	}
	return out
}

func states(k *Core) map[string]slacklinev1.AgentState {
	out := map[string]slacklinev1.AgentState{}
	for id, r := range k.agentRecs {
		out[id] = r.State
	}
	return out
}

// TestPlanRegistration (moved from the coordinator's shell with the
// decision): a registration is planned from the records and the schedule
// without changing them: refused for a DOWN machine or a GONE agent; a
// known agent keeps its registration time and writes nothing when ACTIVE
// and unchanged; the host's other agents that are not GONE are retired
// (their GONE records written), named as previous or not.
func TestPlanRegistration(t *testing.T) {
	t.Parallel()
	must := func(s *maintenance.State, _ []maintenance.Machine, err error) *maintenance.State {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	down := must(must(maintenance.New().UpdateSchedule(&slacklinev1.Schedule{Windows: []*slacklinev1.Window{window(t0, time.Hour, "host-down")}})).
		StartMaintenance(machineIDs("host-down")))
	draining := must(maintenance.New().UpdateSchedule(&slacklinev1.Schedule{Windows: []*slacklinev1.Window{window(t0, time.Hour, "host-a")}}))
	earlier := t0.Add(-time.Hour)
	type plan struct {
		RegisteredAt    time.Time
		Retire          []string
		IgnoredPrevious string
	}
	tests := []struct {
		name       string
		agents     []knownAgent
		maint      *maintenance.State
		id, host   string
		res        string
		previousID string
		wantErr    error // nil: planned
		want       plan
		// wantWrites are the agent records the plan writes, by id.
		wantWrites map[string]slacklinev1.AgentState
	}{
		{name: "first registration", id: "a1", host: "host-a",
			want: plan{RegisteredAt: t0}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "first registration on a draining machine", maint: draining, id: "a1", host: "host-a",
			want: plan{RegisteredAt: t0}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "re-registration of an unchanged active agent writes nothing",
			agents: []knownAgent{{"a1", "host-a", "cpus:2;mem:1024", active}}, id: "a1", host: "host-a",
			want: plan{RegisteredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{}},
		{name: "re-registration with another total keeps the registration time",
			agents: []knownAgent{{"a1", "host-a", "cpus:2;mem:1024", active}}, id: "a1", host: "host-a", res: "cpus:4;mem:1024",
			want: plan{RegisteredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "re-registration of an unreachable agent",
			agents: []knownAgent{{"a1", "host-a", "cpus:2;mem:1024", unreachable}}, id: "a1", host: "host-a",
			want: plan{RegisteredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{"a1": active}},
		{name: "a GONE agent is refused",
			agents: []knownAgent{{"a1", "host-a", "cpus:2;mem:1024", gone}}, id: "a1", host: "host-a", wantErr: ErrAgentGone},
		{name: "an agent of a DOWN machine is refused", maint: down, id: "a1", host: "host-down", wantErr: ErrMachineDown},
		{name: "a known agent of a DOWN machine is refused", maint: down,
			agents: []knownAgent{{"a1", "host-down", "cpus:2;mem:1024", active}}, id: "a1", host: "host-down", wantErr: ErrMachineDown},
		{name: "a rebooted host retires its previous agent",
			agents: []knownAgent{{"old", "host-a", "cpus:2;mem:1024", active}}, id: "new", host: "host-a", previousID: "old",
			want:       plan{RegisteredAt: t0, Retire: []string{"old"}},
			wantWrites: map[string]slacklinev1.AgentState{"new": active, "old": gone}},
		{name: "a rebooted host retires its unreachable previous agent",
			agents: []knownAgent{{"old", "host-a", "cpus:2;mem:1024", unreachable}}, id: "new", host: "host-a", previousID: "old",
			want:       plan{RegisteredAt: t0, Retire: []string{"old"}},
			wantWrites: map[string]slacklinev1.AgentState{"new": active, "old": gone}},
		{name: "another host's agent is not retired",
			agents: []knownAgent{{"other", "host-b", "cpus:2;mem:1024", active}}, id: "new", host: "host-a", previousID: "other",
			want:       plan{RegisteredAt: t0, IgnoredPrevious: "host-b"},
			wantWrites: map[string]slacklinev1.AgentState{"new": active}},
		{name: "a GONE previous agent is left alone",
			agents: []knownAgent{{"old", "host-a", "cpus:2;mem:1024", gone}}, id: "new", host: "host-a", previousID: "old",
			want: plan{RegisteredAt: t0}, wantWrites: map[string]slacklinev1.AgentState{"new": active}},
		{name: "an unknown previous agent is ignored", id: "new", host: "host-a", previousID: "never-seen",
			want: plan{RegisteredAt: t0}, wantWrites: map[string]slacklinev1.AgentState{"new": active}},
		{name: "naming itself as previous retires nothing",
			agents: []knownAgent{{"a1", "host-a", "cpus:2;mem:1024", active}}, id: "a1", host: "host-a", previousID: "a1",
			want: plan{RegisteredAt: earlier}, wantWrites: map[string]slacklinev1.AgentState{}},
		// One host, one agent: a new agent of a host retires the host's
		// others, named as previous or not (a wiped work dir, a second
		// process with the host's certificate).
		{name: "a second agent of a host retires the live one",
			agents: []knownAgent{{"first", "host-a", "cpus:2;mem:1024", active}, {"other", "host-b", "cpus:2;mem:1024", active}},
			id:     "second", host: "host-a", res: "cpus:64;mem:262144",
			want:       plan{RegisteredAt: t0, Retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
		{name: "a second agent of a host retires the unreachable one",
			agents: []knownAgent{{"first", "host-a", "cpus:2;mem:1024", unreachable}}, id: "second", host: "host-a",
			want:       plan{RegisteredAt: t0, Retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
		{name: "hostnames are one host whatever their case",
			agents: []knownAgent{{"first", "host-a", "cpus:2;mem:1024", active}}, id: "second", host: "HOST-A",
			want:       plan{RegisteredAt: t0, Retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
		{name: "every other agent of a host is retired (several from an older registry)",
			agents: []knownAgent{{"x", "host-a", "cpus:1", active}, {"y", "host-a", "cpus:1", active}, {"z", "host-a", "cpus:1", gone}},
			id:     "y", host: "host-a", res: "cpus:1",
			want:       plan{RegisteredAt: earlier, Retire: []string{"x"}},
			wantWrites: map[string]slacklinev1.AgentState{"x": gone}},
		{name: "a recovering agent of the host is retired by a new one",
			agents: []knownAgent{{"first", "host-a", "cpus:2;mem:1024", recovering}}, id: "second", host: "host-a",
			want:       plan{RegisteredAt: t0, Retire: []string{"first"}},
			wantWrites: map[string]slacklinev1.AgentState{"second": active, "first": gone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.maint == nil {
				tt.maint = maintenance.New()
			}
			if tt.res == "" {
				tt.res = "cpus:2;mem:1024"
			}
			k := withAgents(tt.maint, tt.agents...)
			before := states(k)
			r, err := k.PlanRegistration(AgentRegistration{Info: agentInfo(tt.id, tt.host, tt.res), Total: resources.MustParse(tt.res), PreviousID: tt.previousID}, tt.maint, t0)
			if (err == nil) != (tt.wantErr == nil) || (err != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(before, states(k)); diff != "" {
				t.Errorf("PlanRegistration changed the agents (-before +after):\n%s", diff)
			}
			if err != nil {
				return
			}
			writes := map[string]slacklinev1.AgentState{}
			for _, rec := range r.Persist {
				if rec.Kind != RecordAgent {
					t.Fatalf("record %v", rec)
				}
				writes[rec.Key] = rec.Agent.GetState()
			}
			if diff := cmp.Diff(tt.wantWrites, writes); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			ch := r.Apply.register
			got := plan{RegisteredAt: ch.registeredAt, Retire: ch.retire, IgnoredPrevious: ch.ignoredPrevious}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProposedAgentID (moved from the shell): a fresh agent gets the id it
// proposes unless that would claim another host's agent or a GONE one;
// the same proposal from the same host (a retry after a lost answer)
// names the agent the first try registered.
func TestProposedAgentID(t *testing.T) {
	t.Parallel()
	k := withAgents(maintenance.New(),
		knownAgent{"taken", "host-a", "cpus:1", active}, knownAgent{"gone", "host-b", "cpus:1", gone},
		knownAgent{"mine", "host-b", "cpus:1", active}, knownAgent{"silent", "HOST-B", "cpus:1", unreachable})
	for _, tc := range []struct {
		name, proposed, hostname string
		keep                     bool
	}{
		{"none proposed: a new id", "", "host-b", false},
		{"unknown: taken as is", "fresh", "host-b", true},
		{"the same host's (a retry): re-registers it", "mine", "host-b", true},
		{"the same host's in another case: a new id (the identity check compares exactly)", "silent", "host-b", false},
		{"another host's: a new id", "taken", "host-b", false},
		{"a gone agent's: a new id", "gone", "host-b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := k.ProposedAgentID(tc.hostname, tc.proposed, "new-id")
			if want := map[bool]string{true: tc.proposed, false: "new-id"}[tc.keep]; got != want {
				t.Fatalf("ProposedAgentID(%q from %s) = %q, want %q", tc.proposed, tc.hostname, got, want)
			}
		})
	}
}

// TestInstallMaintenance (TestPlanMaintenance, moved from the shell with
// the decision): installing a maintenance state changes only the agents
// whose machine changes mode or window: re-placed (offers rescinded), shut
// down when their machine goes DOWN (GONE, record written, command sent),
// forgotten when their GONE agent's machine comes back UP (record
// deleted).
func TestInstallMaintenance(t *testing.T) {
	t.Parallel()
	must := func(s *maintenance.State, _ []maintenance.Machine, err error) *maintenance.State {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sched := func(ws ...*slacklinev1.Window) *slacklinev1.Schedule { return &slacklinev1.Schedule{Windows: ws} }
	up := maintenance.New()
	drainingA := must(up.UpdateSchedule(sched(window(t0, time.Hour, "host-a"))))
	drainingLater := must(up.UpdateSchedule(sched(window(t0.Add(time.Hour), time.Hour, "host-a"))))
	drainingAB := must(up.UpdateSchedule(sched(window(t0, time.Hour, "host-a"), window(t0, time.Hour, "host-b"))))
	downA := must(drainingA.StartMaintenance(machineIDs("host-a")))
	type change struct {
		Mode   slacklinev1.MachineMode
		Action string // "reoffer", "shutdown", "forget"
	}
	tests := []struct {
		name     string
		from, to *maintenance.State
		state    slacklinev1.AgentState // of host-a's agent
		want     map[string]change      // by agent id; agents not listed are untouched
	}{
		{"nothing changes", up, up, active, map[string]change{}},
		{"a schedule makes a machine DRAINING", up, drainingA, active,
			map[string]change{"a": {maintenance.ModeDraining, "reoffer"}}},
		{"a re-timed window changes the unavailability", drainingA, drainingLater, active,
			map[string]change{"a": {maintenance.ModeDraining, "reoffer"}}},
		{"a window added for another machine leaves the first alone", drainingA, drainingAB, active,
			map[string]change{"b": {maintenance.ModeDraining, "reoffer"}}},
		{"a machine taken out of the schedule is UP", drainingA, up, active,
			map[string]change{"a": {maintenance.ModeUp, "reoffer"}}},
		{"StartMaintenance shuts the agent down", drainingA, downA, active,
			map[string]change{"a": {maintenance.ModeDown, "shutdown"}}},
		{"StopMaintenance forgets the GONE agent", downA, up, gone,
			map[string]change{"a": {maintenance.ModeUp, "forget"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := withAgents(tt.from, knownAgent{"a", "host-a", "cpus:1", tt.state}, knownAgent{"b", "host-b", "cpus:1", active})
			before := map[string]Maintenance{"a": k.Agent("a").Maint, "b": k.Agent("b").Maint}
			r := k.InstallMaintenance(tt.to, "test", t0)
			got := map[string]change{}
			for _, id := range []string{"a", "b"} {
				if rec := k.Agent(id); rec != nil && !rec.Maint.Same(before[id]) {
					got[id] = change{rec.Maint.Mode, "reoffer"}
				}
			}
			for _, id := range r.ShutDown {
				got[id] = change{k.Agent(id).Maint.Mode, "shutdown"}
				if k.Agent(id).State != gone {
					t.Errorf("agent %s shut down but %v", id, k.Agent(id).State)
				}
			}
			for _, id := range r.ForgottenAgents {
				got[id] = change{maintenance.ModeUp, "forget"}
				if k.Agent(id) != nil {
					t.Errorf("agent %s forgotten but still known", id)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			var records []string
			for _, rec := range r.After {
				records = append(records, rec.String())
			}
			var want []string
			for id, ch := range tt.want {
				switch ch.Action {
				case "shutdown":
					want = append(want, "agent "+id+" host=host-"+id+" GONE registered "+t0.Add(-time.Hour).Format(time.RFC3339))
				case "forget":
					want = append(want, "delete agent "+id)
				}
			}
			if diff := cmp.Diff(want, records, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
}
