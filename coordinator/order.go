package coordinator

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
// by mu.
type turns struct {
	last map[scope]chan struct{}
	all  chan struct{}
	// waits counts the turns that had to wait; onWait, when set (tests),
	// is called with mu held each time one must.
	waits  int
	onWait func()
}

// takeTurn waits until the ordered changes of the given scopes (every
// scope when none is given) that asked before are done, and returns the
// function that ends this turn: the caller decides, writes and applies,
// then calls it (defer c.takeTurn(scope)()). It takes c.mu to ask and
// waits without it; the caller must not hold it.
func (c *Coordinator) takeTurn(scopes ...scope) (done func()) {
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
	for _, ch := range before {
		<-ch
	}
	return func() {
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
}
