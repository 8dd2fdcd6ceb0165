package qos

import (
	"errors"
	"fmt"
	"time"
)

// ReclaimConfig configures the reclaim controller. The node is under
// memory pressure when any of these holds (a zero threshold is ignored):
//
//   - MemAvailable < line(LowAvailableBytes, LowAvailableFraction), where
//     line(b, f) = max(f × MemTotal, min(b, ByteLineCap × f × MemTotal)):
//     a byte line counts only up to ByteLineCap times its fraction's, so
//     that on a small node (a bounded one: 1.5 GiB) the lines scale with
//     its memory instead of taking a third of it, while on nodes of at
//     least b / (ByteLineCap × f) (3.4 GiB with the defaults) nothing
//     changes; a zero fraction (an operator's line in bytes) leaves the
//     bytes as they are;
//   - a guaranteed or protected container's memory.pressure some avg10 >
//     SomeEnter, or full avg10 > FullEnter;
//   - the node's /proc/pressure/memory some avg10 > NodeSomeEnter, or full
//     avg10 > NodeFullEnter (on a node bounded by a cgroup's memory limit,
//     that cgroup's memory.pressure: the agent's monitor). Node PSI also
//     counts the stalls of revocable work being reclaimed, which this
//     controller causes, so its defaults are higher than the containers'.
//
// It is calm when every measure is below half its threshold and
// MemAvailable is above its line by max(CalmMarginBytes,
// CalmMarginFraction) (the same line(b, f)); in between, nothing changes.
type ReclaimConfig struct {
	LowAvailableBytes    uint64
	LowAvailableFraction float64
	// CalmMarginBytes and CalmMarginFraction are the hysteresis above the
	// MemAvailable line (defaults 128 MiB and 2%).
	CalmMarginBytes      uint64
	CalmMarginFraction   float64
	SomeEnter, FullEnter float64
	// NodeSomeEnter and NodeFullEnter are the node's thresholds.
	NodeSomeEnter, NodeFullEnter float64
	// CriticalAvailableBytes and CriticalAvailableFraction: below
	// max(CriticalAvailableBytes, CriticalAvailableFraction × MemTotal) of
	// MemAvailable there is no time to reclaim step by step: the revocable
	// subtree is frozen at once.
	CriticalAvailableBytes    uint64
	CriticalAvailableFraction float64
	// ByteLineCap bounds each byte line (LowAvailableBytes,
	// CriticalAvailableBytes, CalmMarginBytes) to ByteLineCap times its
	// fraction of MemTotal where that fraction is positive (default 1.5;
	// 0: the byte lines are not bounded).
	ByteLineCap float64
	// StepFraction and MinStepBytes: each Reclaim lowers the subtree's
	// memory.high by max(MinStepBytes, StepFraction × its usage), at most
	// once per StepInterval, never below FloorBytes. Release raises it by
	// the same step once calm.
	StepFraction float64
	MinStepBytes uint64
	FloorBytes   uint64
	StepInterval time.Duration
	// FreezeAfter is how long pressure may last after the first Reclaim of
	// an episode before the subtree is frozen.
	FreezeAfter time.Duration
	// KillAfter is how long pressure may last with the subtree frozen
	// before the newest revocable container is killed; KillCooldown
	// separates two kills (PSI avg10 needs about ten seconds to show one).
	KillAfter, KillCooldown time.Duration
	// CalmPeriod is how long it must be calm before Thaw, and between the
	// Thaw and the first Release.
	CalmPeriod time.Duration
}

// DefaultReclaimConfig returns the reclaim controller's defaults.
func DefaultReclaimConfig() ReclaimConfig {
	return ReclaimConfig{
		LowAvailableBytes: 512 << 20, LowAvailableFraction: 0.10,
		CalmMarginBytes: 128 << 20, CalmMarginFraction: 0.02,
		SomeEnter: 10, FullEnter: 2,
		NodeSomeEnter: 40, NodeFullEnter: 10,
		CriticalAvailableBytes: 256 << 20, CriticalAvailableFraction: 0.05, ByteLineCap: 1.5,
		StepFraction: 0.10, MinStepBytes: 32 << 20, FloorBytes: 64 << 20, StepInterval: time.Second,
		FreezeAfter: 10 * time.Second, KillAfter: 5 * time.Second, KillCooldown: 10 * time.Second,
		CalmPeriod: 10 * time.Second,
	}
}

func (c ReclaimConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("reclaim "+format, args...)) }
	for name, v := range map[string]float64{"some enter": c.SomeEnter, "full enter": c.FullEnter,
		"node some enter": c.NodeSomeEnter, "node full enter": c.NodeFullEnter} {
		if v < 0 || v > 100 {
			bad("%s must be a percentage in [0, 100], got %v", name, v)
		}
	}
	for name, v := range map[string]float64{"low available fraction": c.LowAvailableFraction,
		"critical available fraction": c.CriticalAvailableFraction, "step fraction": c.StepFraction,
		"calm margin fraction": c.CalmMarginFraction} {
		if v < 0 || v >= 1 {
			bad("%s must be in [0, 1), got %v", name, v)
		}
	}
	if c.ByteLineCap < 0 || (c.ByteLineCap > 0 && c.ByteLineCap < 1) {
		bad("byte line cap must be 0 or at least 1, got %v", c.ByteLineCap)
	}
	if c.StepFraction == 0 && c.MinStepBytes == 0 {
		bad("step must be positive (fraction %v, min bytes %d)", c.StepFraction, c.MinStepBytes)
	}
	for name, d := range map[string]time.Duration{"step interval": c.StepInterval, "freeze after": c.FreezeAfter,
		"kill after": c.KillAfter, "kill cooldown": c.KillCooldown, "calm period": c.CalmPeriod} {
		if d <= 0 {
			bad("%s must be positive, got %v", name, d)
		}
	}
	return errors.Join(errs...)
}

// line is byteLine with the config's ByteLineCap.
func (c ReclaimConfig) line(bytes uint64, fraction float64, total uint64) uint64 {
	return byteLine(bytes, fraction, c.ByteLineCap, total)
}

// byteLine is a MemAvailable line of a node of total bytes: max(fraction ×
// total, min(bytes, byteCap × fraction × total)), bytes alone when
// fraction or byteCap is 0. A byte line thus counts only up to byteCap
// times its fraction's, so that on a small node the line scales with its
// memory (the reclaim and memory controllers' lines, #28).
func byteLine(bytes uint64, fraction, byteCap float64, total uint64) uint64 {
	frac := uint64(fraction * float64(total))
	if fraction > 0 && byteCap > 0 {
		bytes = min(bytes, uint64(byteCap*fraction*float64(total)))
	}
	return max(bytes, frac)
}

// KeepFree implements MemoryKeeper: the MemAvailable this controller needs
// to be calm on a node of memTotal bytes, its low line (or its critical
// line, were it set higher) plus its calm margin. Revocable work that
// leaves less drives it to reclaim, freeze and kill.
func (r *MemoryReclaim) KeepFree(memTotal uint64) uint64 {
	c := r.cfg
	low := max(c.line(c.LowAvailableBytes, c.LowAvailableFraction, memTotal),
		c.line(c.CriticalAvailableBytes, c.CriticalAvailableFraction, memTotal))
	return low + c.line(c.CalmMarginBytes, c.CalmMarginFraction, memTotal)
}

// MemoryReclaim is the "reclaim" controller: under node memory pressure it takes
// memory back from revocable work in steps that cost it less than a kill,
// and never touches a guaranteed or protected container:
//
//  1. Reclaim: lower the revocable subtree's memory.high (cgroup v2) below
//     its usage, one step per StepInterval: the kernel reclaims its page
//     cache and swaps or throttles its anonymous memory;
//  2. Freeze: when pressure lasts FreezeAfter past the first step, when
//     memory.high reached FloorBytes, when MemAvailable is critical, or
//     when the node has no memory.high (cgroup v1), freeze the subtree
//     (cgroup.freeze): it stops allocating;
//  3. Kill: when pressure lasts KillAfter past the episode's first freeze
//     (or without a freezer), kill the newest revocable container, then the
//     next after KillCooldown. Freezing stops revocable work from
//     allocating but frees nothing, so a freeze that does not end the
//     pressure must lead to a kill: a subtree thawed by someone else
//     (an operator, a benchmark's slices) while pressure lasts is frozen
//     again without restarting the kill clock.
//
// Each step is undone when it has been calm for CalmPeriod: Thaw first (of
// its own freeze only: a subtree frozen by someone else stays frozen),
// then Release raises memory.high one step per StepInterval, and removes
// it once it no longer binds (above the subtree's usage plus
// MemAvailable). Every correction names its signal.
//
// State: when pressure began, the latest step, the latest kill, when calm
// began, and the kills still being carried out. The applied memory.high
// and frozen state are read from the Input each time.
type MemoryReclaim struct {
	cfg          ReclaimConfig
	kills        killTracker
	pressureFrom time.Time // start of the episode's pressure; zero: none
	stepAt       time.Time // latest Reclaim or Release
	frozenAt     time.Time // when this controller froze the subtree (zero once thawed by anyone)
	// escalatedAt is when this controller first froze the subtree in the
	// current pressure episode: the kill clock (KillAfter) runs from it and
	// is not restarted when someone else thaws the subtree and it is frozen
	// again, since freezing holds memory and frees none.
	escalatedAt time.Time
	lastKill    time.Time
	calmFrom    time.Time // zero: not calm
}

// NewMemoryReclaim returns a reclaim controller.
func NewMemoryReclaim(cfg ReclaimConfig, killRetry time.Duration) *MemoryReclaim {
	return &MemoryReclaim{cfg: cfg, kills: newKillTracker(killRetry)}
}

// Evaluate implements Controller.
func (r *MemoryReclaim) Evaluate(in Input) []Correction {
	r.kills.forgetGone(in.Containers)
	signal, signalAt, critical := r.pressure(in, 1)
	if signal == "" {
		r.pressureFrom, r.escalatedAt = time.Time{}, time.Time{}
		if r.calm(in) {
			return r.undo(in)
		}
		r.calmFrom = time.Time{}
		return nil
	}
	r.calmFrom = time.Time{}
	if r.pressureFrom.IsZero() {
		r.pressureFrom = in.Now
	}
	var usage uint64
	revocable := 0
	for i := range in.Containers {
		if c := &in.Containers[i]; c.correctable() {
			usage += c.MemBytes
			revocable++
		}
	}
	if revocable == 0 {
		return nil
	}
	mk := func(kind Kind, reason string) Correction {
		return Correction{Kind: kind, Controller: "reclaim", Reason: reason, Signal: signalAt}
	}

	if !in.RevocableFrozen {
		r.frozenAt = time.Time{} // thawed by someone else
	}
	if (in.RevocableFrozen && !r.frozenAt.IsZero()) || !in.Node.Freeze {
		// Frozen by this controller, or nothing to freeze with: kill after
		// KillAfter.
		since := r.escalatedAt
		if since.IsZero() {
			since = r.pressureFrom.Add(r.cfg.FreezeAfter)
			if critical || !in.Node.MemoryHigh {
				since = r.pressureFrom
			}
		}
		if in.Now.Sub(since) < r.cfg.KillAfter || r.kills.anyPending(in.Now) ||
			(!r.lastKill.IsZero() && in.Now.Sub(r.lastKill) < r.cfg.KillCooldown) {
			return nil
		}
		var victim *Container
		for i := range in.Containers {
			c := &in.Containers[i]
			if c.correctable() && !r.kills.pending(c.ID, in.Now) && (victim == nil || newerFirst(c, victim) < 0) {
				victim = c
			}
		}
		if victim == nil {
			return nil
		}
		r.kills.record(victim.ID, in.Now)
		r.lastKill = in.Now
		how := "frozen"
		if !in.RevocableFrozen {
			how = "reclaimed (no freezer)"
		}
		c := mk(Kill, fmt.Sprintf("%s for %s with revocable work %s; %s is the newest revocable container (%s)",
			signal, in.Now.Sub(r.pressureFrom).Round(time.Second), how, victim.ID, formatBytes(victim.MemBytes)))
		c.ContainerID, c.TaskID = victim.ID, victim.TaskID
		return []Correction{c}
	}

	high := in.RevocableMemoryHigh
	atFloor := high > 0 && high <= r.cfg.FloorBytes
	if critical || !in.Node.MemoryHigh || atFloor || in.Now.Sub(r.pressureFrom) >= r.cfg.FreezeAfter {
		why := fmt.Sprintf("for %s", in.Now.Sub(r.pressureFrom).Round(time.Second))
		switch {
		case critical:
			why = "(critical)"
		case !in.Node.MemoryHigh:
			why += " (no memory.high: cgroup v1)"
		case atFloor:
			why += fmt.Sprintf(" with memory.high at its floor %s", formatBytes(high))
		}
		r.frozenAt = in.Now
		if r.escalatedAt.IsZero() {
			r.escalatedAt = in.Now
		} else {
			why += fmt.Sprintf(", again (thawed by someone else; frozen first %s ago)", in.Now.Sub(r.escalatedAt).Round(time.Second))
		}
		return []Correction{mk(Freeze, fmt.Sprintf("%s %s; revocable work holds %s", signal, why, formatBytes(usage)))}
	}
	if !r.stepAt.IsZero() && in.Now.Sub(r.stepAt) < r.cfg.StepInterval {
		return nil
	}
	current := usage
	if high > 0 {
		current = min(high, usage)
	}
	target := r.cfg.FloorBytes
	if step := r.step(usage); current > step {
		target = max(current-step, r.cfg.FloorBytes)
	}
	if high > 0 && target >= high {
		return nil
	}
	r.stepAt = in.Now
	c := mk(Reclaim, fmt.Sprintf("%s; revocable work holds %s", signal, formatBytes(usage)))
	c.MemoryHigh = target
	return []Correction{c}
}

// step is one Reclaim or Release step for a subtree using usage bytes.
func (r *MemoryReclaim) step(usage uint64) uint64 {
	return max(r.cfg.MinStepBytes, uint64(r.cfg.StepFraction*float64(usage)))
}

// undo thaws, then releases memory.high step by step, once calm lasted
// CalmPeriod.
func (r *MemoryReclaim) undo(in Input) []Correction {
	if r.calmFrom.IsZero() {
		r.calmFrom = in.Now
	}
	if in.Now.Sub(r.calmFrom) < r.cfg.CalmPeriod {
		return nil
	}
	reason := fmt.Sprintf("calm for %s", in.Now.Sub(r.calmFrom).Round(time.Second))
	if !in.RevocableFrozen {
		r.frozenAt = time.Time{}
	}
	// Only a freeze of this controller's is undone: the subtree may be
	// frozen for other reasons (an operator, a benchmark's slices).
	if in.RevocableFrozen && !r.frozenAt.IsZero() {
		r.frozenAt, r.stepAt = time.Time{}, in.Now
		return []Correction{{Kind: Thaw, Controller: "reclaim", Reason: reason, Signal: in.Now}}
	}
	high := in.RevocableMemoryHigh
	if high == 0 || (!r.stepAt.IsZero() && in.Now.Sub(r.stepAt) < r.cfg.StepInterval) {
		return nil
	}
	var usage uint64
	for i := range in.Containers {
		if c := &in.Containers[i]; c.correctable() {
			usage += c.MemBytes
		}
	}
	next := high + r.step(max(high, usage))
	if next >= usage+in.Node.MemAvailable {
		next = 0 // it would no longer bind
	}
	r.stepAt = in.Now
	return []Correction{{Kind: Release, MemoryHigh: next, Controller: "reclaim", Reason: reason, Signal: in.Now}}
}

// pressure returns the strongest memory-pressure signal at scale × the
// thresholds (1: enter), when it was observed, and whether MemAvailable is
// critical; "" when there is none.
func (r *MemoryReclaim) pressure(in Input, scale float64) (signal string, at time.Time, critical bool) {
	cfg, node := r.cfg, in.Node
	at = in.Now
	if node.MemTotal > 0 {
		line := cfg.line(cfg.LowAvailableBytes, cfg.LowAvailableFraction, node.MemTotal)
		crit := cfg.line(cfg.CriticalAvailableBytes, cfg.CriticalAvailableFraction, node.MemTotal)
		if node.MemAvailable < crit {
			return fmt.Sprintf("node MemAvailable %s < %s", formatBytes(node.MemAvailable), formatBytes(crit)), at, true
		}
		if float64(node.MemAvailable) < float64(line)/scale {
			return fmt.Sprintf("node MemAvailable %s < %s", formatBytes(node.MemAvailable), formatBytes(uint64(float64(line)/scale))), at, false
		}
	}
	for i := range in.Containers {
		c := &in.Containers[i]
		if !c.guarded() {
			continue
		}
		if cfg.FullEnter > 0 && c.MemPressureFull10 > cfg.FullEnter*scale {
			return fmt.Sprintf("%s memory pressure full avg10 %.1f%% > %g%%", c.ID, c.MemPressureFull10, cfg.FullEnter*scale), c.sampledAt(in.Now), false
		}
		if cfg.SomeEnter > 0 && c.MemPressureSome10 > cfg.SomeEnter*scale {
			return fmt.Sprintf("%s memory pressure some avg10 %.1f%% > %g%%", c.ID, c.MemPressureSome10, cfg.SomeEnter*scale), c.sampledAt(in.Now), false
		}
	}
	if cfg.NodeFullEnter > 0 && node.MemPressureFull10 > cfg.NodeFullEnter*scale {
		return fmt.Sprintf("node memory pressure full avg10 %.1f%% > %g%%", node.MemPressureFull10, cfg.NodeFullEnter*scale), at, false
	}
	if cfg.NodeSomeEnter > 0 && node.MemPressureSome10 > cfg.NodeSomeEnter*scale {
		return fmt.Sprintf("node memory pressure some avg10 %.1f%% > %g%%", node.MemPressureSome10, cfg.NodeSomeEnter*scale), at, false
	}
	return "", at, false
}

// calm reports whether every measure is well below its threshold: the PSI
// ones below half, MemAvailable above its line by the calm margin.
func (r *MemoryReclaim) calm(in Input) bool {
	if total := in.Node.MemTotal; total > 0 {
		line := r.cfg.line(r.cfg.LowAvailableBytes, r.cfg.LowAvailableFraction, total)
		margin := r.cfg.line(r.cfg.CalmMarginBytes, r.cfg.CalmMarginFraction, total)
		if in.Node.MemAvailable < line+margin {
			return false
		}
	}
	psiOnly := in
	psiOnly.Node.MemTotal = 0
	signal, _, _ := r.pressure(psiOnly, 0.5)
	return signal == ""
}
