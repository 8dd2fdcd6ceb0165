package coordinator

import (
	"fmt"
	"slices"
	"sync"
)

// Ordered changes (#30) run from decision to application in a turn of
// their scope: see "Locks and persistence" in doc.go.

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
// by their own mu, a leaf (no other lock is taken under it): ending a
// turn does not take c.mu, so a panic in a turn holder that holds c.mu
// still unwinds through its deferred done and crashes the process instead
// of hanging it.
type turns struct {
	mu   sync.Mutex
	last map[scope]chan struct{}
	all  chan struct{}
	// waits counts the turns that had to wait; onWait, when set (tests),
	// is called with mu (turns.mu) held each time one must.
	waits  int
	onWait func()
}

// takeTurn waits until the ordered changes of the given scopes (every
// scope when none is given) that asked before are done, and returns the
// function that ends this turn: the caller decides, writes and applies,
// then calls it (defer c.takeTurn(scope)()). It waits with no lock held;
// the caller must not hold c.mu (a turn it waits for needs it), nor a
// turn already (no nesting: a turn asked while holding one waits for the
// turns asked in between, the tick's turn of every scope among them,
// which wait for the one held). A scope given twice is a bug: it panics
// (it would wait for itself).
func (c *Coordinator) takeTurn(scopes ...scope) (done func()) {
	for i, s := range scopes {
		if slices.Contains(scopes[:i], s) {
			panic(fmt.Sprintf("coordinator: turn asked twice for scope %q", s))
		}
	}
	mine := make(chan struct{})
	t := &c.turns
	t.mu.Lock()
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
	t.mu.Unlock()
	for _, ch := range before {
		<-ch
	}
	return func() {
		close(mine)
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.all == mine {
			t.all = nil
		}
		for _, s := range scopes {
			if t.last[s] == mine {
				delete(t.last, s)
			}
		}
	}
}
