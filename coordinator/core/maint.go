package core

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/slackline/slackline/coordinator/maintenance"
)

// The maintenance state (#30): the core owns it, package maintenance
// computes its transitions. A schedule update or a machine taken DOWN or
// brought UP is a persist step: PlanMaintenance computes the next state
// from the current one (Core.Maintenance) and returns its record to
// persist and the change, which Core.Apply installs (InstallMaintenance)
// once the record is durable. An answer to an inverse offer is recorded
// in the state by AnswerInverseOffers, and a framework torn down has its
// answers forgotten by RemoveFramework; neither is persisted on its own
// (the state's record carries the answers the next transition finds).

// Transition is a change of the maintenance state computed from the
// current one without modifying it (a method of maintenance.State bound
// to its argument): the next state, the machines it changes, or why it
// is refused.
type Transition func(*maintenance.State) (*maintenance.State, []maintenance.Machine, error)

// maintenanceChange is a planned maintenance transition: from the state
// it was computed from to the next, with the reason agents shut down are
// given and the time it is installed at.
type maintenanceChange struct {
	from, to *maintenance.State
	reason   string
	now      time.Time
}

// Maintenance returns the maintenance state. The caller must not modify
// it (its transitions return new states); it may read it without the
// core's lock while no transition, answer or teardown is applied (the
// shell orders them: coordinator/order.go).
func (k *Core) Maintenance() *maintenance.State { return k.maint }

// LoadMaintenance makes st the maintenance state, as the registry holds
// it (recovery, before any agent is loaded).
func (k *Core) LoadMaintenance(st *maintenance.State) { k.maint = st }

// PlanMaintenance computes a maintenance transition from cur (the core's
// Maintenance) and returns its persist step: the state's record in
// Persist, the change in Apply. It is a pure function, not a call on the
// core, so that the shell computes it without the core's lock (validating
// a schedule of 40,000 machines takes a tenth of a second); the change
// may only be applied while the state is still cur.
func PlanMaintenance(cur *maintenance.State, tr Transition, reason string, now time.Time) (Ready, error) {
	next, _, err := tr(cur)
	if err != nil {
		return Ready{}, err
	}
	return Ready{
		Persist: []Record{{Kind: RecordMaintenance, Key: "maintenance", Maintenance: next}},
		Apply:   Change{maintenance: &maintenanceChange{from: cur, to: next, reason: reason, now: now}},
	}, nil
}

// applyMaintenance installs a planned transition.
func (k *Core) applyMaintenance(c *maintenanceChange) {
	if c.from != k.maint {
		panic(fmt.Sprintf("core: a maintenance transition applied to another state than it was computed from (%s)", c.reason))
	}
	k.installMaintenance(c.to, c.reason, c.now)
}

// maintenanceLines is the maintenance state as transcripts show it: each
// scheduled machine with its mode and the answers of frameworks to its
// inverse offers, in framework order.
func maintenanceLines(st *maintenance.State) []string {
	var lines []string
	for _, m := range st.Machines() {
		line := "machine " + m.String() + " " + strings.ToLower(strings.TrimPrefix(st.Mode(m).String(), "MACHINE_MODE_"))
		answers := st.Answers(m)
		for _, fw := range slices.Sorted(maps.Keys(answers)) {
			line += " " + fw + "=" + strings.ToLower(strings.TrimPrefix(answers[fw].Status.String(), "INVERSE_OFFER_STATUS_"))
		}
		lines = append(lines, line)
	}
	return lines
}

// maintenanceRecordString is a maintenance record as transcripts show it:
// each scheduled machine with its mode.
func maintenanceRecordString(st *maintenance.State) string {
	s := "maintenance"
	for _, m := range st.Machines() {
		s += " " + m.String() + "=" + strings.ToLower(strings.TrimPrefix(st.Mode(m).String(), "MACHINE_MODE_"))
	}
	return s
}
