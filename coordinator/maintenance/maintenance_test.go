package maintenance

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func host(h string) *slacklinev1.MachineID { return &slacklinev1.MachineID{Hostname: h} }

func window(start time.Time, d time.Duration, ids ...*slacklinev1.MachineID) *slacklinev1.Window {
	return &slacklinev1.Window{MachineIds: ids, Unavailability: &slacklinev1.Unavailability{
		Start: timestamppb.New(start), Duration: durationpb.New(d)}}
}

func schedule(windows ...*slacklinev1.Window) *slacklinev1.Schedule {
	return &slacklinev1.Schedule{Windows: windows}
}

func mustUpdate(t *testing.T, s *State, sched *slacklinev1.Schedule) *State {
	t.Helper()
	next, _, err := s.UpdateSchedule(sched)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	down := mustUpdate(t, New(), schedule(window(t0, time.Hour, host("down-1"))))
	down, _, err := down.StartMaintenance([]*slacklinev1.MachineID{host("down-1")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		state *State
		sched *slacklinev1.Schedule
		want  string // substring of the error; "" means valid
	}{
		{"empty", New(), schedule(), ""},
		{"nil", New(), nil, ""},
		{"one window", New(), schedule(window(t0, time.Hour, host("a"), host("b"))), ""},
		{"ip only", New(), schedule(window(t0, time.Hour, &slacklinev1.MachineID{Ip: "10.0.0.1"})), ""},
		{"hostname and ip", New(), schedule(window(t0, 0, &slacklinev1.MachineID{Hostname: "a", Ip: "10.0.0.1"})), ""},
		{"zero duration", New(), schedule(window(t0, 0, host("a"))), ""},
		{"no machines", New(), schedule(window(t0, time.Hour)), "windows[0] has no machine_ids"},
		{"empty machine id", New(), schedule(window(t0, time.Hour, host("a")), window(t0, time.Hour, host("b"), &slacklinev1.MachineID{})),
			"windows[1].machine_ids[1]: invalid argument: machine id has neither hostname nor ip"},
		{"bad ip", New(), schedule(window(t0, time.Hour, &slacklinev1.MachineID{Hostname: "a", Ip: "10.0.0.300"})),
			`windows[0].machine_ids[0]: invalid argument: ip "10.0.0.300" is not an IP address`},
		{"hostname with space", New(), schedule(window(t0, time.Hour, host("a b"))), `windows[0].machine_ids[0]: invalid argument: hostname "a b" contains ' '`},
		{"negative duration", New(), schedule(window(t0, time.Hour, host("a")), window(t0, -time.Second, host("b"))),
			"windows[1] (machine b): unavailability.duration -1s is negative"},
		{"no unavailability", New(), schedule(&slacklinev1.Window{MachineIds: []*slacklinev1.MachineID{host("a")}}),
			"windows[0] (machine a): unavailability is required"},
		{"no start", New(), schedule(&slacklinev1.Window{MachineIds: []*slacklinev1.MachineID{host("a")}, Unavailability: &slacklinev1.Unavailability{}}),
			"windows[0] (machine a): unavailability.start is required"},
		{"machine in two windows", New(), schedule(window(t0, time.Hour, host("a")), window(t0, time.Hour, host("b"), host("A"))),
			"windows[1]: machine a is already in windows[0]"},
		{"machine twice in a window", New(), schedule(window(t0, time.Hour, host("a"), host("a"))),
			"windows[0]: machine a is listed twice (machine_ids[0] and [1])"},
		{"overlapping ids", New(), schedule(window(t0, time.Hour, host("a")), window(t0, time.Hour, &slacklinev1.MachineID{Hostname: "a", Ip: "10.0.0.1"})),
			"windows[1]: machine a (10.0.0.1) may be the same machine as a in windows[0]"},
		{"down machine stays", down, schedule(window(t0.Add(time.Hour), time.Hour, host("down-1"), host("b"))), ""},
		{"down machine cannot leave", down, schedule(window(t0, time.Hour, host("b"))),
			"machine down-1 is DOWN and cannot leave the schedule; bring it UP with StopMaintenance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tt.state.UpdateSchedule(tt.sched)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("UpdateSchedule: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("UpdateSchedule error = %v, want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func TestModesAndTransitions(t *testing.T) {
	t.Parallel()
	a, b, c := Machine{Hostname: "a"}, Machine{Hostname: "b"}, Machine{Hostname: "c"}
	s := mustUpdate(t, New(), schedule(window(t0, time.Hour, host("a"), host("b")), window(t0.Add(time.Hour), time.Hour, host("c"))))
	modes := func(s *State) []Mode { return []Mode{s.Mode(a), s.Mode(b), s.Mode(c), s.Mode(Machine{Hostname: "d"})} }
	if got, want := modes(s), []Mode{ModeDraining, ModeDraining, ModeDraining, ModeUp}; !slices.Equal(got, want) {
		t.Fatalf("modes after schedule = %v, want %v", got, want)
	}

	steps := []struct {
		name      string
		do        func(*State) (*State, []Machine, error)
		wantErr   error
		wantMsg   string
		wantModes []Mode
	}{
		{"stop a draining machine", func(s *State) (*State, []Machine, error) {
			return s.StopMaintenance([]*slacklinev1.MachineID{host("a")})
		}, ErrFailedPrecondition, "machine a is DRAINING, not DOWN", nil},
		{"start an unscheduled machine", func(s *State) (*State, []Machine, error) {
			return s.StartMaintenance([]*slacklinev1.MachineID{host("d")})
		}, ErrFailedPrecondition, "machines[0]: machine d is not in the maintenance schedule", nil},
		{"start nothing", func(s *State) (*State, []Machine, error) { return s.StartMaintenance(nil) }, ErrInvalid, "machines is empty", nil},
		{"start a", func(s *State) (*State, []Machine, error) {
			return s.StartMaintenance([]*slacklinev1.MachineID{host("A"), host("a")})
		}, nil, "", []Mode{ModeDown, ModeDraining, ModeDraining, ModeUp}},
		{"start a again", func(s *State) (*State, []Machine, error) {
			return s.StartMaintenance([]*slacklinev1.MachineID{host("a")})
		}, ErrFailedPrecondition, "machine a is already DOWN", nil},
		{"stop an UP machine", func(s *State) (*State, []Machine, error) {
			return s.StopMaintenance([]*slacklinev1.MachineID{host("d")})
		}, ErrFailedPrecondition, "machine d is UP, not DOWN", nil},
		{"stop a", func(s *State) (*State, []Machine, error) {
			return s.StopMaintenance([]*slacklinev1.MachineID{host("a")})
		}, nil, "", []Mode{ModeUp, ModeDraining, ModeDraining, ModeUp}},
	}
	for _, st := range steps {
		next, _, err := st.do(s)
		if st.wantErr != nil {
			if !errors.Is(err, st.wantErr) || !strings.Contains(err.Error(), st.wantMsg) {
				t.Fatalf("%s: error %v, want %v containing %q", st.name, err, st.wantErr, st.wantMsg)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := modes(next); !slices.Equal(got, st.wantModes) {
			t.Fatalf("%s: modes %v, want %v", st.name, got, st.wantModes)
		}
		s = next
	}
	// a left the schedule; its window keeps b.
	want := schedule(window(t0, time.Hour, host("b")), window(t0.Add(time.Hour), time.Hour, host("c")))
	if diff := cmp.Diff(want, s.Schedule(), protocmp.Transform()); diff != "" {
		t.Fatalf("schedule after StopMaintenance (-want +got):\n%s", diff)
	}
}

func TestTransitionsDoNotModifyReceiver(t *testing.T) {
	t.Parallel()
	s := mustUpdate(t, New(), schedule(window(t0, time.Hour, host("a"))))
	if _, _, err := s.StartMaintenance([]*slacklinev1.MachineID{host("a")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateSchedule(schedule()); err != nil {
		t.Fatal(err)
	}
	if s.Mode(Machine{Hostname: "a"}) != ModeDraining {
		t.Fatal("a transition modified its receiver")
	}
}

func TestUpdateScheduleReportsChangesAndResetsAnswers(t *testing.T) {
	t.Parallel()
	s := mustUpdate(t, New(), schedule(window(t0, time.Hour, host("a"), host("b")), window(t0, time.Hour, host("c"))))
	for _, h := range []string{"a", "b", "c"} {
		s.RecordAnswer(Machine{Hostname: h}, "fw", StatusAccept, t0)
	}
	// b moves to a later window, c is dropped, d is added, a stays.
	next, changed, err := s.UpdateSchedule(schedule(window(t0, time.Hour, host("a")), window(t0.Add(time.Hour), time.Hour, host("b"), host("d"))))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range changed {
		names = append(names, m.Hostname)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"b", "c", "d"}) {
		t.Fatalf("changed = %v, want [b c d]", names)
	}
	if got := next.Answers(Machine{Hostname: "a"})["fw"].Status; got != StatusAccept {
		t.Fatalf("answer for unchanged a = %v, want ACCEPT kept", got)
	}
	if got := next.Answers(Machine{Hostname: "b"}); len(got) != 0 {
		t.Fatalf("answers for re-timed b = %v, want none", got)
	}
	if next.Mode(Machine{Hostname: "c"}) != ModeUp {
		t.Fatal("c left the schedule but is not UP")
	}
	// Answers for UP machines are ignored.
	next.RecordAnswer(Machine{Hostname: "c"}, "fw", StatusDecline, t0)
	if len(next.Answers(Machine{Hostname: "c"})) != 0 {
		t.Fatal("an answer for an UP machine was kept")
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	s := mustUpdate(t, New(), schedule(
		window(t0, time.Hour, &slacklinev1.MachineID{Ip: "10.0.0.1"}),
		window(t0, time.Hour, &slacklinev1.MachineID{Hostname: "web-1", Ip: "10.0.0.2"}, host("db-1")),
	))
	tests := []struct {
		hostname, ip string
		want         Machine
		ok           bool
	}{
		{"anything", "10.0.0.1", Machine{IP: "10.0.0.1"}, true},
		{"WEB-1", "10.0.0.2", Machine{Hostname: "web-1", IP: "10.0.0.2"}, true},
		{"web-1", "10.0.0.3", Machine{}, false},
		{"web-1", "", Machine{}, false},
		{"db-1", "", Machine{Hostname: "db-1"}, true},
		{"db-2", "", Machine{}, false},
	}
	for _, tt := range tests {
		got, ok := s.Lookup(tt.hostname, tt.ip)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Lookup(%q, %q) = %v, %v; want %v, %v", tt.hostname, tt.ip, got, ok, tt.want, tt.ok)
		}
	}
	// A hostname-only id names the scheduled machine with that hostname.
	next, machines, err := s.StartMaintenance([]*slacklinev1.MachineID{host("web-1")})
	if err != nil || len(machines) != 1 || machines[0] != (Machine{Hostname: "web-1", IP: "10.0.0.2"}) {
		t.Fatalf("StartMaintenance(web-1) = %v, %v", machines, err)
	}
	if next.Mode(machines[0]) != ModeDown {
		t.Fatal("web-1 not DOWN")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	s := mustUpdate(t, New(), schedule(window(t0, time.Hour, host("a"), host("b")), window(t0.Add(time.Hour), 0, &slacklinev1.MachineID{Ip: "::1"})))
	s, _, err := s.StartMaintenance([]*slacklinev1.MachineID{host("b")})
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := FromRecord(s.Record())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.Record(), loaded.Record(), protocmp.Transform()); diff != "" {
		t.Fatalf("record round trip (-want +got):\n%s", diff)
	}
	if loaded.Mode(Machine{Hostname: "b"}) != ModeDown || loaded.Mode(Machine{Hostname: "a"}) != ModeDraining {
		t.Fatal("modes lost in the record")
	}
	// A record whose DOWN machine left the schedule is refused.
	bad := s.Record()
	bad.Schedule.Windows = bad.Schedule.Windows[1:]
	if _, err := FromRecord(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("FromRecord(bad) = %v, want ErrInvalid", err)
	}
}

func TestReadyForAutoDownAndMinAvailable(t *testing.T) {
	t.Parallel()
	a := Machine{Hostname: "a"}
	s := mustUpdate(t, New(), schedule(window(t0, time.Hour, host("a"))))
	user := Usage{FrameworkID: "fw", TasksOnMachine: 1, Running: 3, RunningInWindow: 1}
	tests := []struct {
		name   string
		now    time.Time
		answer Status
		users  []Usage
		want   bool
	}{
		{"before the window", t0.Add(-time.Second), StatusAccept, []Usage{user}, false},
		{"accepted, window started", t0, StatusAccept, []Usage{user}, true},
		{"declined", t0, StatusDecline, []Usage{user}, false},
		{"no answer", t0, 0, []Usage{user}, false},
		{"nobody uses it", t0, 0, nil, true},
		{"a user without tasks there need not answer", t0, 0, []Usage{{FrameworkID: "other"}}, true},
		{"accepted but below its minimum", t0, StatusAccept, []Usage{{FrameworkID: "fw", TasksOnMachine: 1, Running: 2, RunningInWindow: 1, MinAvailable: 2}}, false},
		{"accepted and at its minimum", t0, StatusAccept, []Usage{{FrameworkID: "fw", TasksOnMachine: 1, Running: 3, RunningInWindow: 1, MinAvailable: 2}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, _ := s.UpdateSchedule(s.Schedule()) // a fresh copy without answers
			if tt.answer != 0 {
				st.RecordAnswer(a, "fw", tt.answer, t0)
			}
			if got := st.ReadyForAutoDown(a, tt.now, tt.users); got != tt.want {
				t.Fatalf("ReadyForAutoDown = %v, want %v", got, tt.want)
			}
		})
	}
	down, _, _ := s.StartMaintenance([]*slacklinev1.MachineID{host("a")})
	if down.ReadyForAutoDown(a, t0, nil) {
		t.Fatal("a DOWN machine is ready to go down again")
	}
}
