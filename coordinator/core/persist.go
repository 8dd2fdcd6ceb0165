package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"

	"github.com/slackline/slackline/resources"
)

// The persist step: an event that changes what the registry holds does
// not change the core. It returns a Ready whose Persist lists the
// records to write and whose Apply is the change itself, which the shell
// hands back to Core.Apply once the records are durable; the sends the
// change leads to come out of Apply, so nothing is sent that a failed
// write would make untrue, and a failed write changes nothing (the shell
// drops the Ready). The shell writes Persist, then sends Events and
// Commands, then calls Apply and delivers its Ready, in that order.

// RecordKind is the kind of a registry record the core asks to persist.
type RecordKind int

const (
	// RecordWeight is a role's weight (Record.Weight).
	RecordWeight RecordKind = iota + 1
	// RecordQuota is a role's quota limit (Record.Quota; empty: the role
	// has none, and the record is deleted).
	RecordQuota
	// RecordFramework is a framework's record (Record.Framework), Key its
	// id.
	RecordFramework
	// RecordFrameworkDeleted deletes a forgotten framework's record (Key
	// its id).
	RecordFrameworkDeleted
	// RecordAgent is an agent's record (Record.Agent), Key its id.
	RecordAgent
	// RecordAgentDeleted deletes a forgotten agent's record (Key its id).
	RecordAgentDeleted
	// RecordMaintenance is the maintenance state's record
	// (Record.Maintenance; maintenance.State.Record).
	RecordMaintenance
)

// Record is a registry record to write before the change it belongs to
// is applied. Key is the role.
type Record struct {
	Kind      RecordKind
	Key       string
	Weight    float64
	Quota     resources.Resources
	Framework *slacklinev1.FrameworkRecord
	Agent     *slacklinev1.AgentRecord
	// Maintenance is the maintenance state (RecordMaintenance), whose
	// record the shell writes.
	Maintenance *maintenance.State
}

// String is the record as transcripts show it.
func (r Record) String() string {
	switch r.Kind {
	case RecordWeight:
		return fmt.Sprintf("weight %s %g", r.Key, r.Weight)
	case RecordQuota:
		if r.Quota.IsEmpty() {
			return fmt.Sprintf("quota %s none", r.Key)
		}
		return fmt.Sprintf("quota %s %s", r.Key, r.Quota)
	case RecordFrameworkDeleted:
		return "delete framework " + r.Key
	case RecordAgentDeleted:
		return "delete agent " + r.Key
	case RecordMaintenance:
		return maintenanceRecordString(r.Maintenance)
	case RecordAgent:
		return fmt.Sprintf("agent %s host=%s %s registered %s", r.Key, r.Agent.GetInfo().GetHostname(),
			strings.TrimPrefix(r.Agent.GetState().String(), "AGENT_STATE_"), r.Agent.GetRegisteredTime().AsTime().Format(time.RFC3339))
	case RecordFramework:
		s := fmt.Sprintf("framework %s roles=%s principal=%q registered %s", r.Key, strings.Join(r.Framework.GetInfo().GetRoles(), ","),
			r.Framework.GetInfo().GetPrincipal(), r.Framework.GetRegisteredTime().AsTime().Format(time.RFC3339))
		if r.Framework.GetCompleted() {
			s += " completed"
		}
		return s
	}
	return fmt.Sprintf("record %d %s", r.Kind, r.Key)
}

// Change is what a Ready's Persist records make true: the shell passes it
// to Core.Apply once they are durable. The zero Change changes nothing.
type Change struct {
	records   []Record
	subscribe *subscribeChange
	register  *registerChange
	// maintenance: a maintenance transition (PlanMaintenance).
	maintenance *maintenanceChange
}

// IsZero reports whether the change changes nothing.
func (c Change) IsZero() bool {
	return len(c.records) == 0 && c.subscribe == nil && c.register == nil && c.maintenance == nil
}

// RoleConfig is a role's weight or quota limit, as an operator sets it:
// Weight > 0 sets the weight; Quota, with SetQuota true, sets the quota
// limit (empty: none).
type RoleConfig struct {
	Role     string
	Weight   float64
	Quota    resources.Resources
	SetQuota bool
}

// UpdateRoles is an operator's change of role weights and quota limits,
// validated by the shell. It changes nothing yet: the Ready's Persist
// holds their records and its Apply the change (see the persist step).
func (k *Core) UpdateRoles(configs []RoleConfig) Ready {
	var records []Record
	for _, c := range configs {
		if c.Weight > 0 {
			records = append(records, Record{Kind: RecordWeight, Key: c.Role, Weight: c.Weight})
		}
		if c.SetQuota {
			records = append(records, Record{Kind: RecordQuota, Key: c.Role, Quota: c.Quota})
		}
	}
	return Ready{Persist: records, Apply: Change{records: records}}
}

// Apply applies a change whose records are durable (the persist step),
// and returns what it leads to.
func (k *Core) Apply(c Change) Ready {
	for _, r := range c.records {
		switch r.Kind {
		case RecordWeight:
			k.alloc.SetWeight(r.Key, r.Weight)
		case RecordQuota:
			k.alloc.SetQuotaLimit(r.Key, r.Quota)
		}
		k.markAllDirty()
	}
	if c.subscribe != nil {
		k.applySubscribe(c.subscribe)
	}
	if c.register != nil {
		panic("core: a registration's change goes to ApplyRegistration")
	}
	if c.maintenance != nil {
		k.applyMaintenance(c.maintenance)
	}
	return k.take()
}
