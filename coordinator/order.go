package coordinator

import (
	"context"
	"errors"

	"connectrpc.com/connect"
)

// Ordered changes (#30). A change to framework records, the maintenance
// state (answers to inverse offers included), weights, quota or node
// profiles runs from its decision to its application in a turn: the
// change decides under mu, writes its records with no lock held, and
// applies under mu, and no other change of the same scope decides in
// between (a teardown's record is never overwritten by a concurrent
// subscription's; a maintenance transition is computed once and is still
// valid when installed; concurrent weight updates end in the registry as
// in memory). Turns are state under mu, not a mutex: a change waits for
// the turns it follows on their channels with no lock held, and gives up
// waiting when its caller hangs up. Changes of different scopes do not
// wait for each other, so their writes share fsyncs (the store batches
// concurrent writes), as registrations, which take no turn, always did.

// scope names what an ordered change decides on: changes of one scope
// run one after the other, in the order they asked for their turns.
type scope string

const (
	// scopeMaintenance: the maintenance state (the core's), replaced or
	// changed only in a turn of this scope, so that its holder reads it
	// without mu (a schedule is validated outside mu).
	scopeMaintenance scope = "maintenance"
	// scopeRoles: role weights and quota limits.
	scopeRoles scope = "roles"
	// scopeProfiles: node profiles and their rollouts.
	scopeProfiles scope = "profiles"
)

// scopeFramework is the scope of a framework's record.
func scopeFramework(id string) scope { return scope("framework/" + id) }

// scopePrincipal is the scope of a new framework of a principal: the
// count of its frameworks (Limits.MaxFrameworksPerPrincipal).
func scopePrincipal(name string) scope { return scope("principal/" + name) }

// turns are the ordered changes that have asked for their turn and not
// finished: the last one per scope, and the last turn of every scope (a
// tick's, which may tear down any framework and changes agents). Guarded
// by mu.
type turns struct {
	last map[scope]chan struct{}
	all  chan struct{}
	// waits counts the turns that had to wait for an earlier one (a test
	// hook reads it; not a metric: waiting is bounded by the calls the
	// server admits).
	waits int
	// onWait, when set (tests), is called with mu held each time a turn
	// must wait.
	onWait func()
}

// takeTurn waits until the ordered changes of the given scopes (every
// scope when none is given) that asked before are done, then returns the
// function that ends this turn: the caller decides, writes and applies,
// then calls it, with no lock held. It fails only when ctx ends first
// (Canceled or DeadlineExceeded);
// the turn is then passed on as soon as the ones it follows are done. It
// takes c.mu; the caller must not hold it.
func (c *Coordinator) takeTurn(ctx context.Context, scopes ...scope) (done func(), err error) {
	mine := make(chan struct{})
	c.mu.Lock()
	t := &c.turns
	var before []chan struct{}
	if len(scopes) == 0 {
		// Every scope: after the last turn of each, and before any later.
		for _, ch := range t.last {
			before = append(before, ch)
		}
		if t.all != nil {
			before = append(before, t.all)
		}
		clear(t.last)
		t.all = mine
	} else {
		if t.last == nil {
			t.last = map[scope]chan struct{}{}
		}
		for _, s := range scopes {
			if ch := t.last[s]; ch != nil {
				before = append(before, ch)
			} else if t.all != nil {
				before = append(before, t.all)
			}
			t.last[s] = mine
		}
	}
	if len(before) > 0 {
		t.waits++
		if t.onWait != nil {
			t.onWait()
		}
	}
	c.mu.Unlock()
	end := func() {
		close(mine)
		c.mu.Lock()
		if t.all == mine {
			t.all = nil
		}
		for _, s := range scopes {
			if t.last[s] == mine {
				delete(t.last, s)
			}
		}
		c.mu.Unlock()
	}
	for i, ch := range before {
		select {
		case <-ch:
		case <-ctx.Done():
			// Pass the turn on once the ones it follows are done: the
			// changes queued behind it must not overtake them.
			rest := before[i:]
			go func() {
				for _, ch := range rest {
					<-ch
				}
				end()
			}()
			return nil, turnError(ctx.Err())
		}
	}
	return end, nil
}

// turnError is the RPC error of a caller that hung up or ran out of time
// while waiting for its turn: nothing was decided.
func turnError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeCanceled, err)
}
