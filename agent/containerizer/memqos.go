package containerizer

import "fmt"

// SetRevocableMemoryHigh sets the revocable subtree's memory.high to bytes
// (0: none): the reclaim QoS controller's lever to take memory back from
// best-effort work without killing it. It wraps ErrUnsupported on hybrid
// hosts (the v1 memory controller has no memory.high).
func (c *Containerizer) SetRevocableMemoryHigh(bytes uint64) error {
	defer c.forgetLevers()
	if err := c.layout.SetMemoryHigh(c.RevocableCgroup(), bytes); err != nil {
		return fmt.Errorf("set revocable memory.high: %w", err)
	}
	return nil
}

// RevocableMemoryHigh returns the revocable subtree's memory.high in bytes
// (0: none); it wraps ErrUnsupported where there is none.
func (c *Containerizer) RevocableMemoryHigh() (uint64, error) {
	return c.leverLayout().MemoryHigh(c.RevocableCgroup())
}

// SetRevocableFrozen freezes or thaws the whole revocable subtree
// (cgroup.freeze of the v2 tree, on hybrid hosts too); it wraps
// ErrUnsupported on kernels without it.
func (c *Containerizer) SetRevocableFrozen(frozen bool) error {
	defer c.forgetLevers()
	if err := c.layout.SetFrozen(c.RevocableCgroup(), frozen); err != nil {
		return fmt.Errorf("freeze revocable subtree: %w", err)
	}
	return nil
}

// RevocableFrozen reports whether the revocable subtree is frozen.
func (c *Containerizer) RevocableFrozen() (bool, error) {
	return c.leverLayout().Frozen(c.RevocableCgroup())
}
