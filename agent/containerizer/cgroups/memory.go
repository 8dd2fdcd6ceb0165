package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Memory QoS: guaranteed tasks are protected from reclaim, revocable ones
// are reclaimed first and before anything is killed.
//
//	                     cgroup v2 (pure)                  hybrid (v1 memory controller)
//	guaranteed task      memory.min = ½ mem, memory.low =  memory.soft_limit_in_bytes = mem
//	                     mem, memory.swap.max = 0          (reclaimed last under global
//	                                                       pressure), memsw = mem (no swap)
//	revocable task       memory.high = 90% of memory.max,  memory.soft_limit_in_bytes = 0
//	                     swap allowed                      (reclaimed first), swap allowed
//	<root>, guaranteed   memory.min = memory.low = max     -
//	subtree              (the tasks' own values decide)
//	revocable subtree    memory.high: max, lowered by the  memory.soft_limit_in_bytes = 0
//	                     reclaim QoS controller
//	freezing             cgroup.freeze of the v2 tree (hybrid hosts have it too, without
//	                     controllers); the v1 freezer is not used
//
// v1 has no memory.min, memory.low or memory.high: the soft limit is its
// only reclaim ordering, and the reclaim QoS controller goes straight to
// freezing there (SetMemoryHigh wraps ErrUnsupported).

// MemoryQoS is what a container's memory gets besides its limit; zero
// fields are not written.
type MemoryQoS struct {
	// Min and Low are v2 memory.min and memory.low (guaranteed).
	Min, Low int64
	// High is v2 memory.high (revocable).
	High int64
	// SoftLimit is v1 memory.soft_limit_in_bytes.
	SoftLimit int64
}

// Fractions of the memory limit that MemoryQoSOf uses.
const (
	// GuaranteedMinFraction of a guaranteed task's mem is memory.min:
	// never reclaimed; the rest up to memory.low is reclaimed only when
	// nothing unprotected is left.
	GuaranteedMinFraction = 0.5
	// RevocableHighFraction of a revocable task's mem is memory.high:
	// above it the task is reclaimed and throttled before memory.max
	// OOM-kills it.
	RevocableHighFraction = 0.9
)

// MemoryQoSOf returns the memory QoS of a container with limits lim (none
// without a memory limit).
func MemoryQoSOf(lim Limits) MemoryQoS {
	if lim.MemoryBytes <= 0 {
		return MemoryQoS{}
	}
	if lim.Revocable {
		return MemoryQoS{High: int64(RevocableHighFraction * float64(lim.MemoryBytes)), SoftLimit: 0}
	}
	return MemoryQoS{Min: int64(GuaranteedMinFraction * float64(lim.MemoryBytes)), Low: lim.MemoryBytes, SoftLimit: lim.MemoryBytes}
}

// setupMemoryQoS sets the subtrees' memory QoS (SetupRoot): on v2 the root
// and guaranteed subtree pass their tasks' protection down (memory.min and
// memory.low "max": a parent's protection bounds its children's); on
// hybrid the revocable subtree's soft limit is 0. Files the kernel lacks
// are skipped.
func (l Layout) setupMemoryQoS(root string) error {
	var writes []struct{ file, value string }
	switch l.Mode {
	case ModeV2:
		for _, rel := range []string{root, Subtree(root, Guaranteed)} {
			for _, f := range []string{"memory.min", "memory.low"} {
				writes = append(writes, struct{ file, value string }{filepath.Join(l.Unified, rel, f), "max"})
			}
		}
	case ModeHybrid:
		writes = append(writes, struct{ file, value string }{filepath.Join(l.Memory, Subtree(root, Revocable), "memory.soft_limit_in_bytes"), "0"})
	}
	for _, w := range writes {
		if !exists(w.file) {
			continue
		}
		if err := os.WriteFile(w.file, []byte(w.value), 0o644); err != nil {
			return wrap("write", w.file, err)
		}
	}
	return nil
}

// SetMemoryHigh sets memory.high of the cgroup at rel to bytes (0: "max",
// no throttle). It wraps ErrUnsupported where there is no memory.high
// (hybrid hosts: the v1 memory controller has none).
func (l Layout) SetMemoryHigh(rel string, bytes uint64) error {
	file, err := l.memoryHighFile(rel)
	if err != nil {
		return err
	}
	value := "max"
	if bytes > 0 {
		value = strconv.FormatUint(bytes, 10)
	}
	if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
		return wrap("write", file, err)
	}
	return nil
}

// MemoryHigh reads memory.high of the cgroup at rel: bytes, 0 for "max".
func (l Layout) MemoryHigh(rel string) (uint64, error) {
	file, err := l.memoryHighFile(rel)
	if err != nil {
		return 0, err
	}
	data, err := l.Files.ReadFile(file)
	if err != nil {
		return 0, wrap("read", file, err)
	}
	text := strings.TrimSpace(string(data))
	if text == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %q", file, text)
	}
	return v, nil
}

func (l Layout) memoryHighFile(rel string) (string, error) {
	if l.Mode != ModeV2 {
		return "", fmt.Errorf("%w: no memory.high on a %s host (the v1 memory controller has none)", ErrUnsupported, l.Mode)
	}
	file := filepath.Join(l.Unified, rel, "memory.high")
	if !exists(file) {
		return "", fmt.Errorf("%w: %s does not exist (memory controller not enabled there?)", ErrUnsupported, file)
	}
	return file, nil
}

// SetFrozen freezes (or thaws) the cgroup at rel and its descendants with
// the v2 tree's cgroup.freeze, which hybrid hosts have too. It wraps
// ErrUnsupported without it (kernels before 5.2).
func (l Layout) SetFrozen(rel string, frozen bool) error {
	file := filepath.Join(l.Unified, rel, "cgroup.freeze")
	if !exists(file) {
		return fmt.Errorf("%w: %s does not exist (kernel before 5.2?)", ErrUnsupported, file)
	}
	value := "0"
	if frozen {
		value = "1"
	}
	if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
		return wrap("write", file, err)
	}
	return nil
}

// Frozen reports whether the cgroup at rel was asked to freeze
// (cgroup.freeze 1).
func (l Layout) Frozen(rel string) (bool, error) {
	file := filepath.Join(l.Unified, rel, "cgroup.freeze")
	data, err := l.Files.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("%w: %s does not exist (kernel before 5.2?)", ErrUnsupported, file)
	}
	if err != nil {
		return false, wrap("read", file, err)
	}
	return strings.TrimSpace(string(data)) == "1", nil
}
