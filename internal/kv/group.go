package kv

import (
	"context"
	"errors"
	"sync"
)

// group is Bolt's group commit: one long-lived writer goroutine commits, in
// one call of the store's commit function, every Apply that arrived while
// the previous commit ran. A lone write is committed at once; writes that
// arrive during a commit share the next one (one transaction, one fsync).
//
// The commits run on the writer goroutine, not the callers': a commit may
// be deep and allocate, and a caller that lives on (a stream's handler)
// would keep the stack it grew to.
type group struct {
	// commit makes writes durable, all or none. It fails with a
	// *writeError when one mutation is refused (then the group is retried
	// call by call, so that the bad call fails alone), with another error
	// when the file failed (every call's failure).
	commit func(writes [][]Mutation) error
	// wake holds a token when next has writes for the writer; stop is
	// closed by close, stopped by the writer once it has drained next.
	wake, stop, stopped chan struct{}
	mu                  sync.Mutex
	next                *pending // the writes waiting for the next commit; nil when none
	closed              bool
}

// pending is one group of Apply calls committed together.
type pending struct {
	writes [][]Mutation
	errs   []error
	done   chan struct{} // closed once errs are set
}

// writeError is the failure of one mutation (its bucket or key), as
// opposed to the failure of the commit.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// newGroup starts the writer goroutine of a group committing with commit.
func newGroup(commit func(writes [][]Mutation) error) *group {
	g := &group{commit: commit, wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go g.write()
	return g
}

// apply queues mutations for the next commit and waits for it.
func (g *group) apply(ctx context.Context, mutations []Mutation) error {
	if len(mutations) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	c := g.next
	if c == nil {
		c = &pending{done: make(chan struct{})}
		g.next = c
	}
	i := len(c.writes)
	c.writes = append(c.writes, mutations)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	<-c.done
	return c.errs[i]
}

// write is the writer goroutine: it commits each group of waiting writes
// until close, then the last group and stops.
func (g *group) write() {
	defer close(g.stopped)
	for {
		select {
		case <-g.wake:
		case <-g.stop:
			g.commitNext()
			return
		}
		g.commitNext()
	}
}

// commitNext commits the writes waiting, if any.
func (g *group) commitNext() {
	g.mu.Lock()
	c := g.next
	g.next = nil
	g.mu.Unlock()
	if c == nil {
		return
	}
	c.errs = make([]error, len(c.writes))
	err := g.commit(c.writes)
	// Split the group only when a write itself failed; a failure of the
	// file (I/O, fsync) is every call's, and retrying thousands of calls
	// one by one would only add fsyncs to a failing disk.
	if _, bad := errors.AsType[*writeError](err); bad && len(c.writes) > 1 {
		for i, w := range c.writes {
			c.errs[i] = g.commit([][]Mutation{w})
		}
	} else {
		for i := range c.errs {
			c.errs[i] = err
		}
	}
	close(c.done)
}

// close refuses new writes and waits until the writer has committed those
// already waiting and stopped. Every call waits for that.
func (g *group) close() {
	g.mu.Lock()
	first := !g.closed
	g.closed = true
	g.mu.Unlock()
	if first {
		close(g.stop)
	}
	<-g.stopped
}
