package agent

import (
	"fmt"

	"github.com/slackline/slackline/qos"
)

// memoryShaper is what the reclaim controller's corrections need of the
// containerizer (the real one has it; test fakes need not): the revocable
// subtree's memory.high and freezer. Each method wraps
// containerizer.ErrUnsupported where the host lacks the mechanism.
type memoryShaper interface {
	SetRevocableMemoryHigh(bytes uint64) error
	RevocableMemoryHigh() (uint64, error)
	SetRevocableFrozen(frozen bool) error
	RevocableFrozen() (bool, error)
}

// memoryInput fills in what the node offers of memory shaping, and its
// state (the truth the controllers read).
func (l *qosLoop) memoryInput(in *qos.Input) {
	ms, ok := l.cz.(memoryShaper)
	if !ok {
		return
	}
	if high, err := ms.RevocableMemoryHigh(); err == nil {
		in.Node.MemoryHigh, in.RevocableMemoryHigh = true, high
	}
	if frozen, err := ms.RevocableFrozen(); err == nil {
		in.Node.Freeze, in.RevocableFrozen = true, frozen
	}
}

// applyMemory carries out a Reclaim, Release, Freeze or Thaw.
func (l *qosLoop) applyMemory(c qos.Correction) error {
	ms, ok := l.cz.(memoryShaper)
	if !ok {
		return fmt.Errorf("the containerizer cannot shape memory")
	}
	switch c.Kind {
	case qos.Reclaim, qos.Release:
		return ms.SetRevocableMemoryHigh(c.MemoryHigh)
	case qos.Freeze:
		return ms.SetRevocableFrozen(true)
	case qos.Thaw:
		return ms.SetRevocableFrozen(false)
	}
	return fmt.Errorf("not a memory correction: %s", c.Kind)
}
