package maintenance

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Sentinel errors; see the package documentation.
var (
	// ErrInvalid is wrapped by errors about malformed schedules and machine ids.
	ErrInvalid = errors.New("invalid argument")
	// ErrFailedPrecondition is wrapped by errors about transitions the
	// machines' current modes forbid.
	ErrFailedPrecondition = errors.New("failed precondition")
)

// maxHostnameLength bounds hostnames in machine ids.
const maxHostnameLength = 255

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func preconditionf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFailedPrecondition}, args...)...)
}

// Machine names a machine by hostname and/or IP address, normalized: the
// hostname in lower case, the IP in its canonical text form. The zero
// Machine names nothing.
type Machine struct {
	Hostname string
	IP       string
}

// ParseMachine validates and normalizes a machine id.
func ParseMachine(id *slacklinev1.MachineID) (Machine, error) {
	host := strings.ToLower(strings.TrimSpace(id.GetHostname()))
	ip := strings.TrimSpace(id.GetIp())
	if host == "" && ip == "" {
		return Machine{}, invalidf("machine id has neither hostname nor ip")
	}
	if len(host) > maxHostnameLength {
		return Machine{}, invalidf("hostname %.32q... is longer than %d bytes", host, maxHostnameLength)
	}
	for _, r := range host {
		if r <= ' ' || r == '/' || r > 0x7e {
			return Machine{}, invalidf("hostname %q contains %q", host, r)
		}
	}
	if ip != "" {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return Machine{}, invalidf("ip %q is not an IP address", ip)
		}
		ip = addr.String()
	}
	return Machine{Hostname: host, IP: ip}, nil
}

// Proto returns the machine id.
func (m Machine) Proto() *slacklinev1.MachineID {
	return &slacklinev1.MachineID{Hostname: m.Hostname, Ip: m.IP}
}

// String returns "host", "10.0.0.1" or "host (10.0.0.1)".
func (m Machine) String() string {
	switch {
	case m.Hostname == "":
		return m.IP
	case m.IP == "":
		return m.Hostname
	}
	return m.Hostname + " (" + m.IP + ")"
}

// Matches reports whether an agent with hostname and ip runs on m: every
// field m sets must match.
func (m Machine) Matches(hostname, ip string) bool {
	if m.Hostname != "" && !strings.EqualFold(m.Hostname, hostname) {
		return false
	}
	if m.IP != "" {
		addr, err := netip.ParseAddr(ip)
		if err != nil || addr.String() != m.IP {
			return false
		}
	}
	return true
}

// overlaps reports whether some agent could match both m and o.
func (m Machine) overlaps(o Machine) bool {
	hostOK := m.Hostname == "" || o.Hostname == "" || m.Hostname == o.Hostname
	ipOK := m.IP == "" || o.IP == "" || m.IP == o.IP
	shared := (m.Hostname != "" && m.Hostname == o.Hostname) || (m.IP != "" && m.IP == o.IP)
	return hostOK && ipOK && shared
}

// machineIndex finds scheduled machines by hostname and by ip, so that
// validating a schedule and resolving a machine id cost a few map reads
// per machine rather than a scan of the schedule.
type machineIndex struct {
	// position is each machine's place in schedule order.
	position map[Machine]int
	// byHost and byIP list the machines with a hostname or an ip, in
	// schedule order.
	byHost, byIP map[string][]Machine
}

// newMachineIndex returns an index sized for n machines, so that
// indexing a large schedule does not grow (rehash) its maps step by step:
// that growth was about a third of validating and installing one.
func newMachineIndex(n int) machineIndex {
	return machineIndex{position: make(map[Machine]int, n), byHost: make(map[string][]Machine, n), byIP: make(map[string][]Machine, n)}
}

func (x *machineIndex) add(m Machine) {
	if x.position == nil {
		*x = newMachineIndex(0)
	}
	x.position[m] = len(x.position)
	if m.Hostname != "" {
		x.byHost[m.Hostname] = append(x.byHost[m.Hostname], m)
	}
	if m.IP != "" {
		x.byIP[m.IP] = append(x.byIP[m.IP], m)
	}
}

// overlapping returns up to limit indexed machines that overlap m, in
// schedule order. A machine with both fields can only overlap itself and
// the machines with one of its fields alone; one with a single field
// overlaps every machine sharing it.
func (x *machineIndex) overlapping(m Machine, limit int) []Machine {
	var found []Machine
	switch {
	case m.Hostname != "" && m.IP != "":
		for _, cand := range []Machine{m, {Hostname: m.Hostname}, {IP: m.IP}} {
			if _, ok := x.position[cand]; ok {
				found = append(found, cand)
			}
		}
		slices.SortFunc(found, func(a, b Machine) int { return x.position[a] - x.position[b] })
	case m.Hostname != "":
		found = x.byHost[m.Hostname]
	default:
		found = x.byIP[m.IP]
	}
	return slices.Clip(found[:min(limit, len(found))])
}

// Window is a maintenance window: machines unavailable together from Start
// for Duration (zero: indefinitely).
type Window struct {
	Machines []Machine
	Start    time.Time
	Duration time.Duration
}

// Unavailability returns the window's unavailability.
func (w Window) Unavailability() *slacklinev1.Unavailability {
	u := &slacklinev1.Unavailability{Start: timestamppb.New(w.Start)}
	if w.Duration > 0 {
		u.Duration = durationpb.New(w.Duration)
	}
	return u
}

// Started reports whether the window has started at now.
func (w Window) Started(now time.Time) bool { return !now.Before(w.Start) }

func (w Window) sameTime(o Window) bool { return w.Start.Equal(o.Start) && w.Duration == o.Duration }

// Status is a framework's answer to an inverse offer.
type Status = slacklinev1.InverseOfferStatus

// The answers.
const (
	StatusUnknown = slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_UNKNOWN
	StatusAccept  = slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_ACCEPT
	StatusDecline = slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_DECLINE
)

// Answer is a framework's latest answer for a machine and when it came.
type Answer struct {
	Status Status
	Time   time.Time
}

// Mode is a machine's maintenance mode.
type Mode = slacklinev1.MachineMode

// The modes.
const (
	ModeUp       = slacklinev1.MachineMode_MACHINE_MODE_UP
	ModeDraining = slacklinev1.MachineMode_MACHINE_MODE_DRAINING
	ModeDown     = slacklinev1.MachineMode_MACHINE_MODE_DOWN
)

// State is the schedule, the DOWN machines and the answers. The zero value
// is not usable; use New or FromRecord.
type State struct {
	windows []Window
	// window maps each scheduled machine to its window's index; index
	// finds machines by hostname and by ip (see machineIndex).
	window map[Machine]int
	index  machineIndex
	down   map[Machine]bool
	// answers holds, per draining machine, each framework's latest answer.
	answers map[Machine]map[string]Answer
}

// New returns an empty state: no schedule, every machine UP.
func New() *State {
	return &State{window: map[Machine]int{}, down: map[Machine]bool{}, answers: map[Machine]map[string]Answer{}}
}

// FromRecord loads a persisted state. It checks the record as
// UpdateSchedule would.
func FromRecord(rec *slacklinev1.MaintenanceRecord) (*State, error) {
	down := map[Machine]bool{}
	for i, id := range rec.GetDownMachines() {
		m, err := ParseMachine(id)
		if err != nil {
			return nil, fmt.Errorf("down_machines[%d]: %w", i, err)
		}
		down[m] = true
	}
	windows, err := parseSchedule(rec.GetSchedule(), down)
	if err != nil {
		return nil, err
	}
	s := New()
	s.setWindows(windows)
	s.down = down
	return s, nil
}

// Record returns the state to persist: the schedule and the DOWN machines.
func (s *State) Record() *slacklinev1.MaintenanceRecord {
	rec := &slacklinev1.MaintenanceRecord{Schedule: s.Schedule()}
	for _, m := range s.Machines() {
		if s.down[m] {
			rec.DownMachines = append(rec.DownMachines, m.Proto())
		}
	}
	return rec
}

func (s *State) setWindows(windows []Window) {
	s.windows = windows
	n := 0
	for _, w := range windows {
		n += len(w.Machines)
	}
	s.window = make(map[Machine]int, n)
	s.index = newMachineIndex(n)
	for i, w := range windows {
		for _, m := range w.Machines {
			s.window[m] = i
			s.index.add(m)
		}
	}
}

// clone copies s; windows (and their index) are immutable once built and
// shared.
func (s *State) clone() *State {
	out := &State{windows: s.windows, window: s.window, index: s.index, down: maps.Clone(s.down), answers: map[Machine]map[string]Answer{}}
	for m, a := range s.answers {
		out.answers[m] = maps.Clone(a)
	}
	return out
}

// Schedule returns the schedule.
func (s *State) Schedule() *slacklinev1.Schedule {
	out := &slacklinev1.Schedule{}
	for _, w := range s.windows {
		pw := &slacklinev1.Window{Unavailability: w.Unavailability()}
		for _, m := range w.Machines {
			pw.MachineIds = append(pw.MachineIds, m.Proto())
		}
		out.Windows = append(out.Windows, pw)
	}
	return out
}

// Machines returns the scheduled machines in schedule order.
func (s *State) Machines() []Machine {
	var out []Machine
	for _, w := range s.windows {
		out = append(out, w.Machines...)
	}
	return out
}

// Mode returns m's mode.
func (s *State) Mode(m Machine) Mode {
	switch _, scheduled := s.window[m]; {
	case s.down[m]:
		return ModeDown
	case scheduled:
		return ModeDraining
	}
	return ModeUp
}

// Window returns the window of a scheduled machine.
func (s *State) Window(m Machine) (Window, bool) {
	i, ok := s.window[m]
	if !ok {
		return Window{}, false
	}
	return s.windows[i], true
}

// Lookup returns the scheduled machine that an agent with hostname and ip
// runs on: a DOWN one if any matches, else the first match in schedule
// order. ok is false when the agent's machine is UP.
//
// Only three machines can match an agent (its hostname and ip, its
// hostname alone, its ip alone), so Lookup costs three map reads whatever
// the size of the schedule.
func (s *State) Lookup(hostname, ip string) (m Machine, ok bool) {
	host := strings.ToLower(hostname)
	if addr, err := netip.ParseAddr(ip); err == nil {
		ip = addr.String()
	} else {
		ip = ""
	}
	first := -1
	for _, cand := range []Machine{{host, ip}, {host, ""}, {"", ip}} {
		if _, scheduled := s.window[cand]; !scheduled || cand == (Machine{}) {
			continue
		}
		if s.down[cand] {
			return cand, true
		}
		if pos := s.index.position[cand]; first < 0 || pos < first {
			m, ok, first = cand, true, pos
		}
	}
	return m, ok
}

// Answers returns the latest answers for m by framework id (a copy).
func (s *State) Answers(m Machine) map[string]Answer { return maps.Clone(s.answers[m]) }

// RecordAnswer keeps a framework's answer for a draining machine; answers
// for machines that are not DRAINING are ignored.
func (s *State) RecordAnswer(m Machine, frameworkID string, status Status, now time.Time) {
	if s.Mode(m) != ModeDraining {
		return
	}
	if s.answers[m] == nil {
		s.answers[m] = map[string]Answer{}
	}
	s.answers[m][frameworkID] = Answer{Status: status, Time: now}
}

// ForgetFramework drops a removed framework's answers.
func (s *State) ForgetFramework(frameworkID string) {
	for _, a := range s.answers {
		delete(a, frameworkID)
	}
}

// UpdateSchedule validates sched and returns the state it leads to, with
// the machines whose mode or window changed (added, removed, moved or
// re-timed), in no particular order. Their answers are forgotten: a new
// window asks the frameworks anew. The receiver is not modified.
func (s *State) UpdateSchedule(sched *slacklinev1.Schedule) (*State, []Machine, error) {
	windows, err := parseSchedule(sched, s.down)
	if err != nil {
		return nil, nil, err
	}
	next := s.clone()
	next.setWindows(windows)
	changed := map[Machine]bool{}
	for m := range s.window {
		nw, ok := next.Window(m)
		if ow, _ := s.Window(m); !ok || !ow.sameTime(nw) {
			changed[m] = true
		}
	}
	for m := range next.window {
		if _, ok := s.window[m]; !ok {
			changed[m] = true
		}
	}
	for m := range changed {
		delete(next.answers, m)
	}
	return next, slices.Collect(maps.Keys(changed)), nil
}

// parseSchedule validates a schedule. down are the machines that must stay
// in it.
func parseSchedule(sched *slacklinev1.Schedule, down map[Machine]bool) ([]Window, error) {
	var windows []Window
	type place struct{ window, index int }
	n := 0
	for _, pw := range sched.GetWindows() {
		n += len(pw.GetMachineIds())
	}
	seen := make(map[Machine]place, n)
	all := newMachineIndex(n)
	for i, pw := range sched.GetWindows() {
		if len(pw.GetMachineIds()) == 0 {
			return nil, invalidf("windows[%d] has no machine_ids", i)
		}
		w := Window{}
		for j, id := range pw.GetMachineIds() {
			m, err := ParseMachine(id)
			if err != nil {
				return nil, fmt.Errorf("windows[%d].machine_ids[%d]: %w", i, j, err)
			}
			if p, dup := seen[m]; dup {
				if p.window == i {
					return nil, invalidf("windows[%d]: machine %s is listed twice (machine_ids[%d] and [%d])", i, m, p.index, j)
				}
				return nil, invalidf("windows[%d]: machine %s is already in windows[%d]; a machine may be in at most one window", i, m, p.window)
			}
			if others := all.overlapping(m, 1); len(others) > 0 {
				other := others[0]
				return nil, invalidf("windows[%d]: machine %s may be the same machine as %s in windows[%d]; a machine may be in at most one window", i, m, other, seen[other].window)
			}
			seen[m] = place{i, j}
			all.add(m)
			w.Machines = append(w.Machines, m)
		}
		u := pw.GetUnavailability()
		switch {
		case u == nil:
			return nil, invalidf("windows[%d] (machine %s): unavailability is required", i, w.Machines[0])
		case u.GetStart() == nil:
			return nil, invalidf("windows[%d] (machine %s): unavailability.start is required", i, w.Machines[0])
		case u.GetStart().CheckValid() != nil:
			return nil, invalidf("windows[%d] (machine %s): unavailability.start: %v", i, w.Machines[0], u.GetStart().CheckValid())
		}
		w.Start = u.GetStart().AsTime()
		if d := u.GetDuration(); d != nil {
			if err := d.CheckValid(); err != nil {
				return nil, invalidf("windows[%d] (machine %s): unavailability.duration: %v", i, w.Machines[0], err)
			}
			if d.AsDuration() < 0 {
				return nil, invalidf("windows[%d] (machine %s): unavailability.duration %v is negative", i, w.Machines[0], d.AsDuration())
			}
			w.Duration = d.AsDuration()
		}
		windows = append(windows, w)
	}
	for _, m := range sortedMachines(down) {
		if _, ok := seen[m]; !ok {
			return nil, invalidf("machine %s is DOWN and cannot leave the schedule; bring it UP with StopMaintenance", m)
		}
	}
	return windows, nil
}

func sortedMachines(set map[Machine]bool) []Machine {
	out := slices.Collect(maps.Keys(set))
	slices.SortFunc(out, func(a, b Machine) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// resolve finds the scheduled machine an id names: the one equal to it, else
// the only one it overlaps (so "host-a" names the scheduled
// "host-a (10.0.0.1)"). ok is false when no scheduled machine matches.
func (s *State) resolve(field string, id *slacklinev1.MachineID) (Machine, bool, error) {
	m, err := ParseMachine(id)
	if err != nil {
		return Machine{}, false, fmt.Errorf("%s: %w", field, err)
	}
	if _, ok := s.window[m]; ok {
		return m, true, nil
	}
	found := s.index.overlapping(m, 2)
	switch len(found) {
	case 0:
		return m, false, nil
	case 1:
		return found[0], true, nil
	}
	return Machine{}, false, invalidf("%s: machine %s is ambiguous: it may be %s or %s; give both hostname and ip", field, m, found[0], found[1])
}

// StartMaintenance takes machines DOWN. Each must be in the schedule and
// not DOWN yet. It returns the new state and the machines (as scheduled),
// and does not modify the receiver.
func (s *State) StartMaintenance(ids []*slacklinev1.MachineID) (*State, []Machine, error) {
	if len(ids) == 0 {
		return nil, nil, invalidf("machines is empty")
	}
	next := s.clone()
	var out []Machine
	for i, id := range ids {
		m, scheduled, err := s.resolve(fmt.Sprintf("machines[%d]", i), id)
		switch {
		case err != nil:
			return nil, nil, err
		case !scheduled:
			return nil, nil, preconditionf("machines[%d]: machine %s is not in the maintenance schedule; only scheduled machines can be taken DOWN", i, m)
		case s.down[m]:
			return nil, nil, preconditionf("machines[%d]: machine %s is already DOWN", i, m)
		case next.down[m]:
			continue // listed twice
		}
		next.down[m] = true
		delete(next.answers, m)
		out = append(out, m)
	}
	return next, out, nil
}

// StopMaintenance brings DOWN machines UP and takes them out of the
// schedule. It returns the new state and the machines (as scheduled), and
// does not modify the receiver.
func (s *State) StopMaintenance(ids []*slacklinev1.MachineID) (*State, []Machine, error) {
	if len(ids) == 0 {
		return nil, nil, invalidf("machines is empty")
	}
	next := s.clone()
	leaving := map[Machine]bool{}
	var out []Machine
	for i, id := range ids {
		m, scheduled, err := s.resolve(fmt.Sprintf("machines[%d]", i), id)
		switch {
		case err != nil:
			return nil, nil, err
		case !scheduled:
			return nil, nil, preconditionf("machines[%d]: machine %s is UP, not DOWN", i, m)
		case !s.down[m]:
			return nil, nil, preconditionf("machines[%d]: machine %s is DRAINING, not DOWN; take it out of the schedule with UpdateMaintenanceSchedule", i, m)
		case leaving[m]:
			continue
		}
		leaving[m] = true
		delete(next.down, m)
		out = append(out, m)
	}
	var windows []Window
	for _, w := range s.windows {
		kept := Window{Start: w.Start, Duration: w.Duration}
		for _, m := range w.Machines {
			if !leaving[m] {
				kept.Machines = append(kept.Machines, m)
			}
		}
		if len(kept.Machines) > 0 {
			windows = append(windows, kept)
		}
	}
	next.setWindows(windows)
	return next, out, nil
}

// Usage is what a framework has on a draining machine, for the decisions
// below.
type Usage struct {
	FrameworkID string
	// TasksOnMachine counts its live tasks on the machine's agents.
	TasksOnMachine int
	// Running counts its RUNNING tasks in the cluster; RunningInWindow those
	// on the agents of every machine of the machine's window.
	Running, RunningInWindow int
	// MinAvailable is its declared minimum of RUNNING tasks (0: none).
	MinAvailable int
}

// BreaksMinAvailable reports whether taking the window down now would leave
// the framework fewer RUNNING tasks than it declared it needs.
func (u Usage) BreaksMinAvailable() bool {
	return u.MinAvailable > 0 && u.Running-u.RunningInWindow < u.MinAvailable
}

// ReadyForAutoDown reports whether a draining machine may be taken DOWN
// without an operator: its window has started, every framework with tasks
// on it accepted the inverse offers (its latest answer), and none would
// fall below its declared minimum. A machine nobody uses is ready once its
// window started.
func (s *State) ReadyForAutoDown(m Machine, now time.Time, users []Usage) bool {
	w, ok := s.Window(m)
	if !ok || s.down[m] || !w.Started(now) {
		return false
	}
	for _, u := range users {
		if u.TasksOnMachine == 0 {
			continue
		}
		if s.answers[m][u.FrameworkID].Status != StatusAccept || u.BreaksMinAvailable() {
			return false
		}
	}
	return true
}
