package main

import (
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
type cleanupStack struct {
	mu     sync.Mutex
	fns    []func()
	closed bool // unwound by a signal: what is pushed later is undone at once
}

// waitForSignalCleanup blocks forever if a signal's unwinding has begun
// (the handler exits the process when it ends): a run that fails because
// the handler removed its cgroups must not exit first.
func (c *cleanupStack) waitForSignalCleanup() {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		select {}
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

// cleanUpOnSignal unwinds everything on SIGINT or SIGTERM and exits.
func cleanUpOnSignal() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "colocation: %v: cleaning up\n", s)
		cleanup.mu.Lock()
		cleanup.closed = true
		cleanup.mu.Unlock()
		cleanup.unwind(0)
		os.Exit(130)
	}()
}
