package core

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Framework records: the core holds each framework's registry record (its
// FrameworkInfo, when it first registered, whether it was torn down),
// torn-down ones included until the shell forgets them, and decides
// subscriptions from them. A subscription (new or a failover) is a
// persist step: SubscribeFramework changes nothing and returns the record
// to write and the change; Apply connects the framework once the record
// is durable. A teardown is a change the coordinator applies first:
// RemoveFramework applies it and returns the completed record in
// Ready.After, which the shell writes right after the sends.

// Subscription refusals (SubscribeFramework, CheckSubscription).
var (
	// ErrUnknownFramework: a failover to an id the core has no record of.
	ErrUnknownFramework = errors.New("framework is unknown; subscribe without an id to register anew")
	// ErrTornDown: a failover to a framework that was torn down.
	ErrTornDown = errors.New("framework was torn down and cannot subscribe again")
)

// frameworkRecord is what the registry holds of a framework.
type frameworkRecord struct {
	info         *slacklinev1.FrameworkInfo
	registeredAt time.Time
	completed    bool
}

func (r *frameworkRecord) proto() *slacklinev1.FrameworkRecord {
	return &slacklinev1.FrameworkRecord{Info: r.info, RegisteredTime: timestamppb.New(r.registeredAt), Completed: r.completed}
}

// subscribeChange is a subscription whose record is being written.
type subscribeChange struct {
	rec *frameworkRecord
	now time.Time
}

// SpecOf is what the core's offer book needs of a framework's info.
func SpecOf(info *slacklinev1.FrameworkInfo) FrameworkSpec {
	return FrameworkSpec{ID: info.GetId(), Roles: info.GetRoles(), FailoverTimeout: FailoverTimeout(info),
		Revocable: HasCapability(info, slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES)}
}

// FailoverTimeout is how long a framework may stay disconnected.
func FailoverTimeout(info *slacklinev1.FrameworkInfo) time.Duration {
	return time.Duration(info.GetFailoverTimeoutSeconds() * float64(time.Second))
}

// HasCapability reports whether info declares the capability.
func HasCapability(info *slacklinev1.FrameworkInfo, c slacklinev1.FrameworkCapability) bool {
	for _, have := range info.GetCapabilities() {
		if have == c {
			return true
		}
	}
	return false
}

// LoadFramework gives the core a framework's record that is durable
// already (loaded from the registry) or that the shell keeps in memory
// only (a framework an agent reported, adopted): it changes nothing else.
// A record not completed is added to the offer book disconnected, Tick
// reporting it expired after deadline unless it subscribes.
func (k *Core) LoadFramework(rec *slacklinev1.FrameworkRecord, deadline time.Time) {
	info := rec.GetInfo()
	k.records[info.GetId()] = &frameworkRecord{info: info, registeredAt: rec.GetRegisteredTime().AsTime(), completed: rec.GetCompleted()}
	if !rec.GetCompleted() {
		k.addFramework(SpecOf(info), deadline)
	}
}

// CheckSubscription refuses, changing nothing, a failover (id not empty)
// to a framework the core has no record of (ErrUnknownFramework) or that
// was torn down (ErrTornDown). A new framework (no id) is never refused
// here.
func (k *Core) CheckSubscription(id string) error {
	if id == "" {
		return nil
	}
	switch rec := k.records[id]; {
	case rec == nil:
		return fmt.Errorf("framework %q: %w", id, ErrUnknownFramework)
	case rec.completed:
		return fmt.Errorf("framework %q: %w", id, ErrTornDown)
	}
	return nil
}

// FrameworkRecord returns a framework's record as the registry holds it
// (nil: none). The caller must not modify it.
func (k *Core) FrameworkRecord(id string) *slacklinev1.FrameworkRecord {
	if rec := k.records[id]; rec != nil {
		return rec.proto()
	}
	return nil
}

// RegisteredFrameworks counts the frameworks of principal that are not
// torn down (connected, or disconnected within their failover timeout).
func (k *Core) RegisteredFrameworks(principal string) int {
	n := 0
	for _, rec := range k.records {
		if !rec.completed && rec.info.GetPrincipal() == principal {
			n++
		}
	}
	return n
}

// SubscribeFramework is a framework's subscription: new when info has no
// id (newID becomes its id, and now its registration time), else a
// failover (its first registration time is kept). info is validated,
// bound to its principal and within the limits already (the shell's
// part); the core keeps it, and the caller must not modify it afterwards.
// A refusal is CheckSubscription's. Otherwise it changes nothing yet: the
// Ready's Persist holds the framework's record and its Apply the change,
// which connects the framework (see Subscribe) once the record is
// durable.
func (k *Core) SubscribeFramework(info *slacklinev1.FrameworkInfo, newID string, now time.Time) (Ready, error) {
	if err := k.CheckSubscription(info.GetId()); err != nil {
		return Ready{}, err
	}
	registeredAt := now
	if info.GetId() == "" {
		if newID == "" {
			return Ready{}, errors.New("core: a new framework needs an id")
		}
		info = proto.CloneOf(info)
		info.Id = newID
	} else {
		registeredAt = k.records[info.GetId()].registeredAt
	}
	rec := &frameworkRecord{info: info, registeredAt: registeredAt}
	return Ready{
		Persist: []Record{{Kind: RecordFramework, Key: info.GetId(), Framework: rec.proto()}},
		Apply:   Change{subscribe: &subscribeChange{rec: rec, now: now}},
	}, nil
}

// Subscribed returns the FrameworkInfo a subscription change connects
// (nil when c is not one), for the shell's own records.
func (c Change) Subscribed() *slacklinev1.FrameworkInfo {
	if c.subscribe == nil {
		return nil
	}
	return c.subscribe.rec.info
}

// applySubscribe keeps a subscription's durable record and connects the
// framework.
func (k *Core) applySubscribe(s *subscribeChange) {
	k.records[s.rec.info.GetId()] = s.rec
	k.subscribe(SpecOf(s.rec.info), s.now)
}

// RemoveFramework tears a framework down: its offers are dropped (the
// allocator forgets its allocations), its inverse offers forgotten, its
// tasks killed and forgotten (dropFrameworkTasks). Its record, kept as
// torn down, is in the Ready's After (its answers to inverse offers are
// forgotten from the maintenance state): the shell writes it after the sends
// (the change is the coordinator's decision and is applied first).
func (k *Core) RemoveFramework(frameworkID string) Ready {
	k.maint.ForgetFramework(frameworkID)
	k.removeFramework(frameworkID)
	k.dropFrameworkTasks(frameworkID)
	if rec := k.records[frameworkID]; rec != nil && !rec.completed {
		rec = &frameworkRecord{info: rec.info, registeredAt: rec.registeredAt, completed: true}
		k.records[frameworkID] = rec
		k.out.After = append(k.out.After, Record{Kind: RecordFramework, Key: frameworkID, Framework: rec.proto()})
	}
	return k.take()
}

// ForgetCompletedFrameworks forgets the torn-down frameworks beyond limit
// (< 0: no limit), oldest registered first (then by id): their records
// and histories. The Ready's After deletes their records and Forgotten
// names them, for the shell's own records and its limit metric.
func (k *Core) ForgetCompletedFrameworks(limit int) Ready {
	if limit < 0 {
		return k.take()
	}
	var completed []string
	for id, rec := range k.records {
		if rec.completed {
			completed = append(completed, id)
		}
	}
	if len(completed) <= limit {
		return k.take()
	}
	slices.SortFunc(completed, func(a, b string) int {
		return cmp.Or(k.records[a].registeredAt.Compare(k.records[b].registeredAt), cmp.Compare(a, b))
	})
	for _, id := range completed[:len(completed)-limit] {
		k.ForgetFramework(id)
		k.out.After = append(k.out.After, Record{Kind: RecordFrameworkDeleted, Key: id})
		k.out.Forgotten = append(k.out.Forgotten, id)
	}
	return k.take()
}
