package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// cleanupStack holds what the benchmark must undo (processes to stop,
// cgroups, the modelled disk's mounts and loop device, directories), so
// that an interrupted benchmark (SIGINT, SIGTERM) leaves nothing behind
// either: a run pushes each undo as soon as it made the thing, and
// unwinds to its mark when it returns; the signal handler unwinds all.
// A set-up step that makes something outside the process (a mount, a
// loop device) runs through step, pushing its undo before it returns:
// the handler waits for a step in flight, so that what the step made is
// undone too, and no step begins once the handler has.
type cleanupStack struct {
	mu     sync.Mutex
	fns    []func()
	closed bool // unwound by a signal: what is pushed later is undone at once
	// signalled is closed as the signal handler receives its signal.
	signalled chan struct{}
	// stepMu is held by a step in flight, and by the signal handler
	// from when it begins until the process exits.
	stepMu sync.Mutex
	// unwindMu makes unwinds run one at a time, so that a run's (a
	// failed set-up's) and the handler's undo in order together.
	unwindMu sync.Mutex
	// beforeStep, when set (tests), is called with a step's name as the
	// step begins.
	beforeStep func(name string)
}

// errInterrupted is what step returns once a signal's unwinding has begun.
var errInterrupted = errors.New("interrupted")

// step runs f, a set-up step that pushes the undoing of whatever it made
// before it returns; once a signal's unwinding has begun, f does not run
// and step returns errInterrupted.
func (c *cleanupStack) step(name string, f func() error) error {
	c.stepMu.Lock()
	defer c.stepMu.Unlock()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return errInterrupted
	}
	if c.beforeStep != nil {
		c.beforeStep(name)
	}
	return f()
}

// signal returns a channel closed as the signal handler receives its
// signal (before it waits for a step in flight).
func (c *cleanupStack) signal() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.signalled == nil {
		c.signalled = make(chan struct{})
	}
	return c.signalled
}

// waitForSignalCleanup blocks forever if the signal handler has received
// its signal (it exits the process when its unwinding ends): a run that
// fails because of the signal (a child it killed, cgroups the handler
// removed) must not exit first.
func (c *cleanupStack) waitForSignalCleanup() {
	select {
	case <-c.signal():
		select {}
	default:
	}
}

var cleanup cleanupStack

// push adds f, to run once, before everything pushed earlier.
func (c *cleanupStack) push(f func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		f()
		return
	}
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

// mark is the stack's height, for unwind.
func (c *cleanupStack) mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fns)
}

// unwind runs, latest first, what was pushed above mark; each function
// runs once even when a signal's unwind and a run's meet.
func (c *cleanupStack) unwind(mark int) {
	c.unwindMu.Lock()
	defer c.unwindMu.Unlock()
	for {
		c.mu.Lock()
		if len(c.fns) <= mark {
			c.mu.Unlock()
			return
		}
		f := c.fns[len(c.fns)-1]
		c.fns = c.fns[:len(c.fns)-1]
		c.mu.Unlock()
		f()
	}
}

// cleanUpOnSignal unwinds everything on SIGINT or SIGTERM, once the
// set-up step in flight (if any) has ended, and exits. A second signal
// exits at once.
func cleanUpOnSignal() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "colocation: %v: cleaning up\n", s)
		close(cleanup.signal())
		go func() {
			s := <-sig
			fmt.Fprintf(os.Stderr, "colocation: %v again: exiting before the cleanup ends (mounts, loop devices or cgroups may be left)\n", s)
			os.Exit(130)
		}()
		cleanup.stepMu.Lock() // never unlocked: no step begins after this
		cleanup.mu.Lock()
		cleanup.closed = true
		cleanup.mu.Unlock()
		cleanup.unwind(0)
		os.Exit(130)
	}()
}
