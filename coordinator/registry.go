package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/maintenance"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// recover loads the persisted registry into memory: agents wait in
// RECOVERING for re-registration, frameworks wait DISCONNECTED for their
// scheduler to resubscribe. Each bucket has its own loader.
func (c *Coordinator) recover(ctx context.Context) error {
	for _, load := range []struct {
		bucket string
		into   func(key string, raw []byte) error
	}{
		{store.BucketMaintenance, c.recoverMaintenance}, // agents are placed in it
		{store.BucketAgents, c.recoverAgent},
		{store.BucketFrameworks, c.recoverFramework(c.cfg.Now())},
		{store.BucketWeights, c.recoverWeight},
		{store.BucketQuotas, c.recoverQuota},
		{store.BucketProfiles, c.recoverProfile},
	} {
		records, err := c.store.Load(ctx, load.bucket)
		if err != nil {
			return err
		}
		for key, raw := range records {
			if err := load.into(key, raw); err != nil {
				return err
			}
		}
	}
	c.log.Info("registry recovered", "scheduled_machines", len(c.core.Maintenance().Machines()), "agents", len(c.agents), "frameworks", len(c.frameworks), "profiles", len(c.profiles.byName))
	return nil
}

// recoverAgent restores an agent record into the core (core.LoadAgent):
// an ACTIVE agent becomes RECOVERING until it re-registers, one whose
// machine is DOWN is GONE. The maintenance record loads first.
func (c *Coordinator) recoverAgent(id string, raw []byte) error {
	var rec slacklinev1.AgentRecord
	if err := proto.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("agent %s: %w", id, err)
	}
	total, _, err := resources.FromProto(rec.GetInfo().GetResources())
	if err != nil {
		return fmt.Errorf("agent %s resources: %w", id, err)
	}
	c.agents[id] = &agent{AgentRecord: c.core.LoadAgent(id, &rec, total, c.core.Maintenance())}
	return nil
}

// recoverFramework returns the loader of framework records at now: each
// waits DISCONNECTED for its scheduler (COMPLETED ones stay completed).
func (c *Coordinator) recoverFramework(now time.Time) func(string, []byte) error {
	return func(id string, raw []byte) error {
		var rec slacklinev1.FrameworkRecord
		if err := proto.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("framework %s: %w", id, err)
		}
		// A record from before the operator lowered --max-failover-timeout
		// is held to it too.
		clampFailoverTimeout(rec.GetInfo(), c.cfg.Limits.MaxFailoverTimeout)
		fw := newFramework(rec.GetInfo(), slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED)
		// After a coordinator restart a scheduler gets at least as long as
		// agents do to come back, whatever its failover timeout.
		fw.disconnectedAt = now
		if rec.GetCompleted() {
			fw.state = slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED
		}
		c.core.LoadFramework(&rec, now.Add(max(failoverTimeout(rec.GetInfo()), c.cfg.AgentReregisterTimeout)))
		c.frameworks[id] = fw
		return nil
	}
}

// recoverWeight restores a role's weight.
func (c *Coordinator) recoverWeight(role string, raw []byte) error {
	w, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return fmt.Errorf("weight of role %s: %w", role, err)
	}
	// Durable already: applied without its persist step.
	c.core.Apply(c.core.UpdateRoles([]core.RoleConfig{{Role: role, Weight: w}}).Apply)
	return nil
}

// recoverQuota restores a role's quota limit.
func (c *Coordinator) recoverQuota(role string, raw []byte) error {
	var cfg slacklinev1.QuotaConfig
	if err := proto.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("quota of role %s: %w", role, err)
	}
	limit, _, err := resources.FromProto(cfg.GetLimits())
	if err != nil {
		return fmt.Errorf("quota of role %s: %w", role, err)
	}
	c.core.Apply(c.core.UpdateRoles([]core.RoleConfig{{Role: role, Quota: limit, SetQuota: true}}).Apply)
	return nil
}

// recoverMaintenance restores the maintenance schedule (the bucket's one
// record, maintenanceKey; other keys are ignored).
func (c *Coordinator) recoverMaintenance(key string, raw []byte) error {
	if key != maintenanceKey {
		return nil
	}
	var mr slacklinev1.MaintenanceRecord
	if err := proto.Unmarshal(raw, &mr); err != nil {
		return fmt.Errorf("maintenance: %w", err)
	}
	st, err := maintenance.FromRecord(&mr)
	if err != nil {
		return fmt.Errorf("maintenance: %w", err)
	}
	c.core.LoadMaintenance(st)
	return nil
}

// persist makes a change's records durable before it is applied and
// answered. A failure is Unavailable: nothing was applied. It takes no lock.
func (c *Coordinator) persist(ctx context.Context, what string, writes ...store.Mutation) error {
	if err := c.store.Apply(ctx, writes...); err != nil {
		c.checkStore(err)
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("persist %s: %w", what, err))
	}
	return nil
}

// step runs a core event whose Ready may carry a persist step, in the
// order the core asks for: the event under mu; its records (Persist)
// written with mu released; then, under mu, its sends delivered and its
// change applied (core.Apply) and what that leads to delivered. A failed
// write is Unavailable and nothing is sent or applied. The caller holds
// a turn (order.go) when the change must not interleave with another
// ordered change, and never mu.
func (c *Coordinator) step(ctx context.Context, what string, event func() core.Ready) error {
	c.mu.Lock()
	r := event()
	c.mu.Unlock()
	if err := c.write(ctx, what, r); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apply(r)
	return nil
}

// write makes a core Ready's records (Persist) durable, the first part of
// its persist step. A failure is Unavailable: the caller drops the Ready.
// It takes no lock.
func (c *Coordinator) write(ctx context.Context, what string, r core.Ready) error {
	if len(r.Persist) == 0 {
		return nil
	}
	return c.persist(ctx, what, registryWrites(r.Persist)...)
}

// apply delivers a written Ready's sends, then applies its change
// (core.Apply) and delivers what that leads to: the rest of the persist
// step. Caller holds c.mu.
func (c *Coordinator) apply(r core.Ready) {
	change := r.Apply
	r.Persist, r.Apply = nil, core.Change{}
	c.deliver(r)
	c.deliver(c.core.Apply(change))
}

// registryWrites are the registry writes of records the core asks to
// persist.
func registryWrites(records []core.Record) []store.Mutation {
	if len(records) == 0 {
		return nil
	}
	writes := make([]store.Mutation, len(records))
	for i, rec := range records {
		writes[i] = registryWrite(rec)
	}
	return writes
}

// registryWrite is the registry write of a record the core asks to
// persist.
func registryWrite(r core.Record) store.Mutation {
	switch r.Kind {
	case core.RecordWeight:
		return store.Put(store.BucketWeights, r.Key, []byte(strconv.FormatFloat(r.Weight, 'g', -1, 64)))
	case core.RecordQuota:
		if r.Quota.IsEmpty() {
			return store.Delete(store.BucketQuotas, r.Key)
		}
		return store.Put(store.BucketQuotas, r.Key, mustMarshal(&slacklinev1.QuotaConfig{Role: r.Key, Limits: r.Quota.Proto("", resources.Regular)}))
	case core.RecordFramework:
		return putFramework(r.Framework)
	case core.RecordFrameworkDeleted:
		return store.Delete(store.BucketFrameworks, r.Key)
	case core.RecordAgent:
		return store.Put(store.BucketAgents, r.Key, mustMarshal(r.Agent))
	case core.RecordAgentDeleted:
		return store.Delete(store.BucketAgents, r.Key)
	case core.RecordMaintenance:
		return store.Put(store.BucketMaintenance, maintenanceKey, mustMarshal(r.Maintenance.Record()))
	}
	panic(fmt.Sprintf("coordinator: registry record of unknown kind %d", r.Kind))
}

// checkStore hands a registry error that needs a reopen to Run, which
// stops the coordinator (see storeFailed).
func (c *Coordinator) checkStore(err error) {
	if errors.Is(err, store.ErrFailed) {
		select {
		case c.storeFailed <- err:
		default:
		}
	}
}

// record makes durable what an applied change leads to, even if the caller
// hung up. A failure is logged: nobody waits for it, and recovery and the
// next registration heal a stale record. It takes no lock.
func (c *Coordinator) record(ctx context.Context, writes ...store.Mutation) {
	if err := c.store.Apply(context.WithoutCancel(ctx), writes...); err != nil {
		c.checkStore(err)
		c.log.Error("persist registry", "err", err)
	}
}

// mustMarshal encodes a registry record. Marshalling a valid message we
// built cannot fail; a failure is a programming error.
func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic("marshal registry record: " + err.Error())
	}
	return b
}
