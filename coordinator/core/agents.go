package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Agent records: the core holds each agent's registry record (its
// AgentInfo, total, state and first registration time) and its place in
// the maintenance schedule, GONE and UNREACHABLE agents included until
// they are forgotten, and an index of agents by host. Every change of an
// agent's state is the core's:
//
//   - a registration is a persist step: PlanRegistration changes nothing
//     and returns the records to write (the agent ACTIVE, the host's other
//     agents GONE) and the change; ApplyRegistration installs it once the
//     records are durable, re-checking what may have changed meanwhile;
//   - the coordinator's own decisions are applied first and their records
//     returned in Ready.After: Tick (silent agents become UNREACHABLE,
//     agents not re-registered after a restart too), ShutdownAgent (a
//     machine went DOWN: GONE), ForgetGoneAgents (retention: deleted).
//
// The maintenance schedule is an input (the core's maintenance.State,
// which the shell passes, replaced only by a persisted transition): the
// plan is a pure function of the records, the schedule and the
// registration.

// AgentRecord is the core's record of an agent. Only the core changes it;
// the shell reads it (under its lock) and must not modify it.
type AgentRecord struct {
	ID           string
	Info         *slacklinev1.AgentInfo
	Total        resources.Resources
	State        slacklinev1.AgentState
	RegisteredAt time.Time
	// Maint is the agent's place in the maintenance schedule.
	Maint Maintenance
}

// Proto is the record as the registry holds it.
func (r *AgentRecord) Proto() *slacklinev1.AgentRecord {
	return &slacklinev1.AgentRecord{Info: r.Info, State: r.State, RegisteredTime: timestamppb.New(r.RegisteredAt)}
}

func (r *AgentRecord) record() Record {
	return Record{Kind: RecordAgent, Key: r.ID, Agent: r.Proto()}
}

func (r *AgentRecord) spec() AgentSpec {
	return AgentSpec{ID: r.ID, Hostname: r.Info.GetHostname(), Attributes: r.Info.GetAttributes(), Total: r.Total, Maint: r.Maint}
}

// Scheduled reports whether the agent's machine is in the schedule.
func (m Maintenance) Scheduled() bool { return m.Machine != (maintenance.Machine{}) }

// Place returns an agent's place in a maintenance state: the scheduled
// machine its hostname or ip match, that machine's mode and window.
func Place(st *maintenance.State, info *slacklinev1.AgentInfo) Maintenance {
	m, ok := st.Lookup(info.GetHostname(), info.GetIp())
	if !ok {
		return Maintenance{Mode: maintenance.ModeUp}
	}
	out := Maintenance{Mode: st.Mode(m), Machine: m}
	if w, ok := st.Window(m); ok {
		out.Unavailability = w.Unavailability()
	}
	return out
}

// HostKey is the key hostnames are compared by: DNS names and x509 name
// checks ignore case, so "HOST-A" and "host-a" are one host.
func HostKey(hostname string) string { return strings.ToLower(hostname) }

// Registration refusals (PlanRegistration, ApplyRegistration).
var (
	// ErrMachineDown: the agent's machine is DOWN for maintenance.
	ErrMachineDown = errors.New("is DOWN for maintenance: its agents may not register until StopMaintenance brings it UP")
	// ErrAgentGone: the agent was removed from the cluster.
	ErrAgentGone = errors.New("was removed from the cluster; restart it with an empty work dir to register anew")
)

// MachineDownError is ErrMachineDown for one machine.
type MachineDownError struct{ Machine maintenance.Machine }

func (e MachineDownError) Error() string {
	return fmt.Sprintf("machine %s %s", e.Machine, ErrMachineDown)
}

// Unwrap makes errors.Is(err, ErrMachineDown) hold.
func (e MachineDownError) Unwrap() error { return ErrMachineDown }

// AgentRegistration is a validated registration, the shell's part
// (authentication, identity, pacing) done. Info.Id is set (see
// ProposedAgentID); the core keeps Info, and the caller must not modify it
// afterwards.
type AgentRegistration struct {
	Info       *slacklinev1.AgentInfo
	Total      resources.Resources
	PreviousID string // the agent the host had before it rebooted
}

// registerChange is a registration whose records are being written.
type registerChange struct {
	reg          AgentRegistration
	registeredAt time.Time
	// retire are the host's other agents the plan retired (their GONE
	// records are in Persist), in id order.
	retire []string
	// ignoredPrevious is the hostname of another host's agent named as
	// the previous one: an agent cannot retire it.
	ignoredPrevious string
	// seen are the agents' records the plan decided from: the host's
	// and the agent's own. ApplyRegistration compares them with the
	// records then to tell whether the host changed while the plan's
	// records were written.
	seen []seenAgent
}

// seenAgent is an agent's record as a registration's plan saw it. Info
// is compared by identity: every registration installs a new one.
type seenAgent struct {
	id    string
	state slacklinev1.AgentState
	info  *slacklinev1.AgentInfo
}

// seenAgents are the records a registration of agent id on hostname
// decides from: the host's agents' and the agent's own, in id order.
func (k *Core) seenAgents(id, hostname string) []seenAgent {
	var seen []seenAgent
	for _, r := range k.AgentsOnHost(hostname) {
		seen = append(seen, seenAgent{r.ID, r.State, r.Info})
	}
	if r := k.agentRecs[id]; r != nil && HostKey(r.Info.GetHostname()) != HostKey(hostname) {
		seen = append(seen, seenAgent{r.ID, r.State, r.Info})
	}
	slices.SortFunc(seen, func(a, b seenAgent) int { return strings.Compare(a.id, b.id) })
	return seen
}

// IgnoredPrevious returns, for a registration change, the hostname of
// another host's agent the registration named as its previous one (and
// which it does not retire), or "".
func (c Change) IgnoredPrevious() string {
	if c.register == nil {
		return ""
	}
	return c.register.ignoredPrevious
}

// Agent returns an agent's record (nil: none).
func (k *Core) Agent(id string) *AgentRecord { return k.agentRecs[id] }

// AgentsOnHost returns the agents registered with hostname (compared by
// HostKey), any state. The caller must not modify the slice.
func (k *Core) AgentsOnHost(hostname string) []*AgentRecord { return k.hosts[HostKey(hostname)] }

// AgentRecords returns every agent's record, in id order.
func (k *Core) AgentRecords() []*AgentRecord {
	out := make([]*AgentRecord, 0, len(k.agentRecs))
	for _, r := range k.agentRecs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *AgentRecord) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (k *Core) addAgentRecord(r *AgentRecord) {
	k.agentRecs[r.ID] = r
	key := HostKey(r.Info.GetHostname())
	k.hosts[key] = append(k.hosts[key], r)
}

func (k *Core) dropAgentRecord(r *AgentRecord) {
	delete(k.agentRecs, r.ID)
	key := HostKey(r.Info.GetHostname())
	if k.hosts[key] = slices.DeleteFunc(k.hosts[key], func(o *AgentRecord) bool { return o == r }); len(k.hosts[key]) == 0 {
		delete(k.hosts, key)
	}
}

// LoadAgent gives the core an agent's record from the registry, placed in
// the maintenance state st: an ACTIVE agent becomes RECOVERING until it
// registers again (Tick reports it after Config.ReregisterTimeout), and
// one whose machine is DOWN is GONE (the machine went DOWN before the
// record said so). Agents that are not GONE are known to the offer book
// (for their place in the schedule), not offered.
func (k *Core) LoadAgent(id string, rec *slacklinev1.AgentRecord, total resources.Resources, st *maintenance.State) *AgentRecord {
	r := &AgentRecord{ID: id, Info: rec.GetInfo(), Total: total, State: rec.GetState(), RegisteredAt: rec.GetRegisteredTime().AsTime()}
	r.Maint = Place(st, r.Info)
	if r.State == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
		r.State = slacklinev1.AgentState_AGENT_STATE_RECOVERING
	}
	if r.Maint.Mode == maintenance.ModeDown {
		r.State = slacklinev1.AgentState_AGENT_STATE_GONE
	}
	if old := k.agentRecs[id]; old != nil {
		k.dropAgentRecord(old)
	}
	k.addAgentRecord(r)
	if r.State != slacklinev1.AgentState_AGENT_STATE_GONE {
		k.AddRecoveredAgent(r.spec(), r.State == slacklinev1.AgentState_AGENT_STATE_RECOVERING)
	}
	return r
}

// ProposedAgentID is the id of a fresh agent (no id in its AgentInfo):
// proposed when no agent has it, or when the agent that has it is of the
// same hostname and not GONE (a retry of a registration whose answer the
// agent never got: it re-registers as that agent); newID otherwise, so
// that a proposal never claims another host's agent. The hostname is
// compared exactly, as the shell's identity check compares it.
func (k *Core) ProposedAgentID(hostname, proposed, newID string) string {
	if proposed == "" {
		return newID
	}
	if r := k.agentRecs[proposed]; r != nil && (r.Info.GetHostname() != hostname || r.State == slacklinev1.AgentState_AGENT_STATE_GONE) {
		return newID
	}
	return proposed
}

// PlanRegistration decides a registration from the agents' records and
// the maintenance state st, changing nothing (the persist step): an agent
// of a DOWN machine (MachineDownError) and a GONE agent (ErrAgentGone) are
// refused; a known agent keeps its registration time; the host's other
// agents that are not GONE are retired. Persist holds the agent's ACTIVE
// record (unless it is ACTIVE with the same info already) and the retired
// agents' GONE records; the change is for ApplyRegistration.
func (k *Core) PlanRegistration(reg AgentRegistration, st *maintenance.State, now time.Time) (Ready, error) {
	if m := Place(st, reg.Info); m.Mode == maintenance.ModeDown {
		return Ready{}, MachineDownError{m.Machine}
	}
	id := reg.Info.GetId()
	if id == "" {
		return Ready{}, errors.New("core: a registration needs an agent id")
	}
	ch := &registerChange{reg: reg, registeredAt: now, seen: k.seenAgents(id, reg.Info.GetHostname())}
	var persist []Record
	write := true
	if r := k.agentRecs[id]; r != nil {
		if r.State == slacklinev1.AgentState_AGENT_STATE_GONE {
			return Ready{}, fmt.Errorf("agent %q %w", id, ErrAgentGone)
		}
		ch.registeredAt = r.RegisteredAt
		write = r.State != slacklinev1.AgentState_AGENT_STATE_ACTIVE || !proto.Equal(r.Info, reg.Info)
	}
	if write {
		rec := &AgentRecord{ID: id, Info: reg.Info, State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, RegisteredAt: ch.registeredAt}
		persist = append(persist, rec.record())
	}
	if old := k.agentRecs[reg.PreviousID]; old != nil && HostKey(old.Info.GetHostname()) != HostKey(reg.Info.GetHostname()) {
		ch.ignoredPrevious = old.Info.GetHostname()
	}
	var retired []Record
	for _, old := range k.AgentsOnHost(reg.Info.GetHostname()) {
		if old.ID == id || old.State == slacklinev1.AgentState_AGENT_STATE_GONE {
			continue
		}
		ch.retire = append(ch.retire, old.ID)
		gone := *old
		gone.State = slacklinev1.AgentState_AGENT_STATE_GONE
		retired = append(retired, gone.record())
	}
	slices.Sort(ch.retire)
	slices.SortFunc(retired, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	persist = append(persist, retired...)
	return Ready{Persist: persist, Apply: Change{register: ch}}, nil
}

// Retired is an agent a registration retired: its host registered a new
// agent. State is its state before; Tasks how many live tasks it had
// (they ended GONE); Named whether the new agent named it as its previous
// one.
type Retired struct {
	ID, Hostname string
	State        slacklinev1.AgentState
	Tasks        int
	Named        bool
}

// ApplyRegistration installs a registration whose records are durable
// (PlanRegistration's change), re-checking what may have changed since it
// was planned: the machine may have gone DOWN (MachineDownError; nothing
// changes, and recovery and the next registration heal the record), and
// another agent of the host may have registered meanwhile: whichever
// applies last is the host's agent. When the host's records (or the
// agent's own) changed since the plan, another plan's records may have
// landed after this one's, so Ready.After holds, as applied, the agent's
// ACTIVE record and the GONE record of every agent it retires: written
// after the registration applies, in the order registrations apply, they
// leave the registry as memory is whatever the interleaving (#30).
// Otherwise After is empty. The host's other agents are
// retired (Ready.Retired: their offers rescinded, their tasks GONE, LOST
// for frameworks that are not partition-aware, at once), then the agent
// becomes ACTIVE and is offered (offers made from another total or under
// another window are rescinded: see RegisterAgent). The returned record
// is the agent's; its reported tasks are the shell's next call
// (RegisterTasks).
func (k *Core) ApplyRegistration(c Change, st *maintenance.State, now time.Time) (Ready, *AgentRecord, error) {
	ch := c.register
	if ch == nil {
		return Ready{}, nil, errors.New("core: not a registration change")
	}
	reg := ch.reg
	m := Place(st, reg.Info)
	if m.Mode == maintenance.ModeDown {
		return Ready{}, nil, MachineDownError{m.Machine}
	}
	id := reg.Info.GetId()
	changed := !slices.Equal(ch.seen, k.seenAgents(id, reg.Info.GetHostname()))
	for _, old := range slices.Clone(k.AgentsOnHost(reg.Info.GetHostname())) {
		if old.ID == id || old.State == slacklinev1.AgentState_AGENT_STATE_GONE {
			continue
		}
		k.out.Retired = append(k.out.Retired, Retired{ID: old.ID, Hostname: old.Info.GetHostname(), State: old.State,
			Tasks: k.AgentTaskCount(old.ID), Named: reg.PreviousID == old.ID})
		k.retire(old, slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_AGENT_RESTARTED,
			fmt.Sprintf("host %s registered a new agent, %s", old.Info.GetHostname(), id), now)
		if changed || !slices.Contains(ch.retire, old.ID) {
			k.out.After = append(k.out.After, old.record())
		}
	}
	r := k.agentRecs[id]
	switch {
	case r == nil:
		r = &AgentRecord{ID: id, Info: reg.Info, RegisteredAt: ch.registeredAt}
		k.addAgentRecord(r)
	case HostKey(r.Info.GetHostname()) != HostKey(reg.Info.GetHostname()):
		// Without authorization an agent id may change hosts.
		k.dropAgentRecord(r)
		r.Info = reg.Info
		k.addAgentRecord(r)
	}
	r.Info, r.Total, r.Maint = reg.Info, reg.Total, m
	r.State = slacklinev1.AgentState_AGENT_STATE_ACTIVE
	if changed {
		k.out.After = append(k.out.After, r.record())
	}
	k.registerAgent(r.spec(), now)
	return k.take(), r, nil
}

// retire makes an agent GONE: its offers and inverse offers are rescinded,
// its tasks end with state and reason at once, and it leaves the
// allocator. Its record is the caller's to write.
func (k *Core) retire(r *AgentRecord, state slacklinev1.TaskState, reason slacklinev1.Reason, msg string, now time.Time) {
	k.also(k.WithdrawAgent(r.ID, now))
	for _, t := range k.AgentTasks(r.ID) {
		k.endTask(t, CoordinatorStatus(t.FrameworkID, t.Info.GetTaskId(), r.ID, state, reason, msg, now), now)
	}
	k.also(k.RemoveAgent(r.ID))
	r.State = slacklinev1.AgentState_AGENT_STATE_GONE
}

// markUnreachable makes an ACTIVE agent found silent UNREACHABLE: its
// tasks become UNREACHABLE (the offer book lost it already); its record
// follows in Ready.After.
func (k *Core) markUnreachable(r *AgentRecord, now time.Time) {
	r.State = slacklinev1.AgentState_AGENT_STATE_UNREACHABLE
	k.also(k.TasksUnreachable(r.ID, r.Info.GetHostname(), now))
	k.out.After = append(k.out.After, r.record())
}

// ShutdownAgent takes an agent out of the cluster because its machine
// went DOWN (machine m, for reason): it is told to shut down
// (ShutdownAgentCommand, the last command of its session: the shell ends
// the session once it is delivered), its offers and inverse offers are
// rescinded, its tasks end as TASK_STATE_GONE_BY_OPERATOR at once (whether
// or not the agent answers), and it becomes GONE; its record is in
// Ready.After.
func (k *Core) ShutdownAgent(agentID string, m maintenance.Machine, reason string, now time.Time) Ready {
	r := k.agentRecs[agentID]
	if r == nil {
		return k.take()
	}
	k.shutdownAgent(r, m, reason, now)
	return k.take()
}

func (k *Core) shutdownAgent(r *AgentRecord, m maintenance.Machine, reason string, now time.Time) {
	msg := fmt.Sprintf("machine %s is DOWN for maintenance (%s)", m, reason)
	k.out.Commands = append(k.out.Commands, Command{AgentID: r.ID, Command: &slacklinev1.AgentCommand{
		Command: &slacklinev1.AgentCommand_ShutdownAgent{ShutdownAgent: &slacklinev1.ShutdownAgentCommand{Message: msg}}}})
	k.out.ShutDown = append(k.out.ShutDown, r.ID)
	k.retire(r, slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR, slacklinev1.Reason_REASON_AGENT_REMOVED_BY_OPERATOR, msg, now)
	k.out.After = append(k.out.After, r.record())
}

// ForgetGoneAgents forgets the agents UNREACHABLE or GONE for longer than
// retention (< 0: kept forever), counting from their last heartbeat (or
// from Config.Start for those not heard from since a restart): their
// remaining tasks end TASK_STATE_GONE, and they are forgotten with their
// tasks. Their records' deletions are in Ready.After, their ids in
// Ready.ForgottenAgents (in id order).
func (k *Core) ForgetGoneAgents(retention time.Duration, now time.Time) Ready {
	if retention < 0 {
		return k.take()
	}
	for _, r := range k.AgentRecords() {
		if r.State != slacklinev1.AgentState_AGENT_STATE_UNREACHABLE && r.State != slacklinev1.AgentState_AGENT_STATE_GONE {
			continue
		}
		since := k.LastHeartbeat(r.ID)
		if since.IsZero() {
			since = k.cfg.Start // not heard from since a restart
		}
		if now.Sub(since) <= retention {
			continue
		}
		k.retire(r, slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_AGENT_REMOVED,
			"agent "+r.Info.GetHostname()+" was unreachable for longer than the coordinator keeps agents", now)
		k.forgetAgentRecord(r)
		k.out.ForgottenAgents = append(k.out.ForgottenAgents, r.ID)
	}
	return k.take()
}

// forgetAgentRecord forgets an agent: its record (deleted: Ready.After),
// its tasks and what the offer book knew of it.
func (k *Core) forgetAgentRecord(r *AgentRecord) {
	k.dropAgentRecord(r)
	k.ForgetAgentTasks(r.ID)
	k.ForgetAgent(r.ID)
	k.out.After = append(k.out.After, Record{Kind: RecordAgentDeleted, Key: r.ID})
}

// InstallMaintenance makes st the maintenance state, durable already
// (the shell persisted its record), to every agent whose machine changes
// mode or window, in id order: its offers and inverse offers are
// rescinded (they carry the old unavailability) and its filters cleared
// (SetMaintenance); an agent whose machine went DOWN is shut down
// (ShutdownAgent); the GONE agent of a machine back UP is forgotten
// (Ready.ForgottenAgents), so that it may register again. Then the
// frameworks with tasks or offers on draining agents get inverse offers.
// Records to write follow in Ready.After; Ready.MaintenanceChanges names
// the agents whose place changed, for the shell's log.
func (k *Core) InstallMaintenance(st *maintenance.State, reason string, now time.Time) Ready {
	k.installMaintenance(st, reason, now)
	return k.take()
}

// installMaintenance makes st the maintenance state and applies it
// (InstallMaintenance), its effects left in k.out.
func (k *Core) installMaintenance(st *maintenance.State, reason string, now time.Time) {
	k.maint = st
	for _, r := range k.AgentRecords() {
		before, after := r.Maint, Place(st, r.Info)
		if before.Same(after) {
			continue
		}
		r.Maint = after
		k.also(k.SetMaintenance(r.ID, after, now))
		switch {
		case after.Mode == maintenance.ModeDown:
			if r.State != slacklinev1.AgentState_AGENT_STATE_GONE {
				k.shutdownAgent(r, after.Machine, reason, now)
			} else {
				k.out.After = append(k.out.After, r.record())
			}
		case before.Mode == maintenance.ModeDown && r.State == slacklinev1.AgentState_AGENT_STATE_GONE:
			k.forgetAgentRecord(r)
			k.out.ForgottenAgents = append(k.out.ForgottenAgents, r.ID)
		}
	}
	k.sendInverseOffers(now, k.DrainingUsers())
}

// DrainingUsers returns, for each ACTIVE agent on a draining machine, the
// frameworks with tasks there: with those with offers there, the users an
// inverse offer goes to.
func (k *Core) DrainingUsers() map[string][]string {
	draining := k.Draining()
	if len(draining) == 0 {
		return nil
	}
	out := make(map[string][]string, len(draining))
	for _, id := range draining {
		if r := k.agentRecs[id]; r == nil || r.State != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			continue
		}
		seen := map[string]bool{}
		for _, t := range k.AgentTasks(id) {
			if !seen[t.FrameworkID] {
				seen[t.FrameworkID] = true
				out[id] = append(out[id], t.FrameworkID)
			}
		}
	}
	return out
}

// also keeps, within an event, the Ready of another event it calls (whose
// take handed out everything collected so far), so that the outer event's
// take hands out all of it.
func (k *Core) also(r Ready) { k.out = r }

// RecordedAgentStates returns the agents' states as the core's records
// hold them, for Reconcile.
func (k *Core) RecordedAgentStates() AgentStates { return recordedStates{k} }

type recordedStates struct{ k *Core }

func (s recordedStates) AgentState(agentID string) (slacklinev1.AgentState, bool) {
	r := s.k.agentRecs[agentID]
	if r == nil {
		return 0, false
	}
	return r.State, true
}

func (s recordedStates) AnyRecovering() bool {
	for _, r := range s.k.agentRecs {
		if r.State == slacklinev1.AgentState_AGENT_STATE_RECOVERING {
			return true
		}
	}
	return false
}
