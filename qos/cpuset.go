package qos

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// CPUSet is the "cpuset" controller: it keeps revocable work off the CPUs
// guaranteed work uses by confining the revocable subtree to some CPUs
// (Confine), moving one CPU at a time, in the manner of Heracles's core
// controller. Revocable work gets the highest-numbered CPUs of the node;
// guaranteed work is never confined, so it keeps every CPU its allocation
// promised, and preempts idle-priority revocable work wherever it runs.
//
//   - violation (the interference controller's thresholds and attribution):
//     one CPU taken back, at most one per ShrinkInterval, down to MinCPUs;
//   - sizing, only with Headroom > 0: while guaranteed and protected work
//     uses CPU, revocable work has at most N - ceil(use × Headroom) of the
//     node's N CPUs, taken back one per ShrinkInterval without waiting for
//     a violation (Koordinator's and Katalyst's suppression); off by
//     default: beside a root it is idle next to, revocable work confined so
//     gave up a third of its CPU without the server's p99 improving
//     (docs/colocation-study.md);
//   - never worse than nothing: with eBPF attribution, EffectWindow after
//     the first CPU taken for a violation (or taken back after a failed
//     probe), the delay revocable containers cause guaranteed work, and
//     guaranteed work's whole run-queue wait, are compared with before; a
//     confinement that did not cut the first by MinEffect, or the second
//     by MinWaitGain, is undone (the CPUs come back) and not tried again
//     for ProbeBackoff, doubling while it keeps failing; when only the
//     whole wait did not fall, the interference controller does not
//     throttle meanwhile either (fruitless);
//   - calm for GrowAfter, and no CPU limit in force: one CPU given back per
//     GrowInterval, never onto the last CPU free of revocable work while
//     guaranteed or protected work uses any (nor past what sizing allows);
//     a violation within GrowAfter of a CPU given back takes it back (a
//     failed probe), and that size is not tried again for ProbeBackoff
//     (doubling);
//   - with no guaranteed or protected work on the node, every CPU comes back
//     at once.
//
// It never throttles or kills. Where the node has no cpuset controller
// (Input.RevocableCPUs nil) it does nothing. In a set with the interference
// controller it acts first, and that one throttles only once this one has
// nothing left to try: revocable work at MinCPUs, or confinement found not
// to help (see NewSet).
//
// State kept between evaluations: the recent threshold events, the last
// change and whether it was a probe (and the size before it), since when
// the signals are calm, the size not to exceed and its backoff, the episode
// under judgement, and whether the latest evaluation left anything to try.
type CPUSet struct {
	cfg CPUSetConfig
	sig detector

	effect             effect
	episodeFrom        int // CPUs before the episode's first
	ineffectiveUntil   time.Time
	ineffectiveBackoff time.Duration
	noGainUntil        time.Time // confining cut revocable work's delay, not guaranteed work's waiting

	lastChange time.Time
	lastGrow   bool // the last change gave a CPU back (a probe)
	beforeGrow int

	calmSince time.Time

	capSize  int // do not grow above this until capUntil; 0 = no cap
	capUntil time.Time
	backoff  time.Duration

	noneLeft bool // the latest evaluation had nothing left to try
	noGain   bool // ... because confining was undone for want of gain (noGainUntil)
}

// NewCPUSet returns a cpuset controller; interference supplies the
// thresholds of violation and calm and the effect test's window.
func NewCPUSet(cfg CPUSetConfig, interference InterferenceConfig) *CPUSet {
	return &CPUSet{cfg: cfg, sig: detector{cfg: interference},
		effect: newEffect(interference), backoff: cfg.ProbeBackoff,
		ineffectiveBackoff: cfg.ProbeBackoff}
}

// exhausted reports whether the latest evaluation had nothing left to try.
func (c *CPUSet) exhausted() bool { return c.noneLeft }

// fruitless reports whether, at the latest evaluation, confining is held
// back because it cut the delay revocable work causes and guaranteed work
// waited no less in all: taking revocable work's CPU another way would not
// help either.
func (c *CPUSet) fruitless() bool { return c.noGain }

// Evaluate implements Controller.
func (c *CPUSet) Evaluate(in Input) []Correction {
	now := in.Now
	if in.RevocableCPUs == nil {
		c.noneLeft, c.noGain = true, false
		return nil
	}
	all := nodeCPUs(in.Node)
	current := len(in.RevocableCPUs)
	byID := make(map[string]*Container, len(in.Containers))
	var guaranteedCPU float64
	var guarded, revocable bool
	for i := range in.Containers {
		ct := &in.Containers[i]
		byID[ct.ID] = ct
		switch {
		case ct.guarded():
			guarded = true
			guaranteedCPU += ct.CPU
		case ct.correctable():
			revocable = true
		}
	}
	c.sig.keepEvents(in.Events, byID, now)
	judged := c.effect.observe(in) && c.sig.cfg.MinAttributedDelay > 0
	worst, _, calm := c.sig.assess(in.Containers, now, c.lastChange)
	if calm {
		if c.calmSince.IsZero() {
			c.calmSince = now
		}
		c.effect.calm()
		if now.Sub(c.calmSince) >= c.cfg.ProbeBackoffMax {
			c.ineffectiveBackoff = c.cfg.ProbeBackoff // the failures are long past
		}
		if c.lastGrow && now.Sub(c.lastChange) >= c.cfg.GrowAfter {
			c.backoff = c.cfg.ProbeBackoff // the probe held
		}
	} else {
		c.calmSince = time.Time{}
	}

	// The most CPUs revocable work may grow to, or be sized to.
	allowed := len(all)
	reserve := 0
	if guaranteedCPU > 0.01 {
		reserve = max(1, int(math.Ceil(guaranteedCPU*c.cfg.Headroom-epsilon)))
		allowed = len(all) - reserve
	}
	sizing := c.cfg.Headroom > 0
	allowed = min(max(allowed, c.cfg.MinCPUs), len(all))
	ineffective := now.Before(c.ineffectiveUntil)
	c.noGain = now.Before(c.noGainUntil)
	c.noneLeft = current <= c.cfg.MinCPUs || ineffective || !revocable
	violating := worst != nil && revocable

	// Due whether or not the violation goes on (see Interference).
	if judged && revocable {
		removed := 1 - float64(current)/float64(max(c.episodeFrom, current))
		if due, out, why := c.effect.verdict(now, removed); due && out != helped {
			c.effect.end()
			c.ineffectiveUntil = now.Add(c.ineffectiveBackoff)
			if out != unknown {
				c.ineffectiveBackoff = min(2*c.ineffectiveBackoff, c.cfg.ProbeBackoffMax)
			}
			c.noneLeft = true
			switch out {
			case noGain:
				c.noGainUntil, c.noGain = c.ineffectiveUntil, true
			case noEffect:
				// Confining did not cut the delay: another way of taking
				// revocable work's CPU, or a kill, may.
				c.noGainUntil, c.noGain = time.Time{}, false
			}
			// The sizes were not what hurt: forget the probe's cap.
			c.capSize, c.capUntil, c.backoff = 0, time.Time{}, c.cfg.ProbeBackoff
			reason, signal := "after confining revocable work", now
			if worst != nil {
				reason, signal = worst.reason, worst.signalAt
			}
			verdict := "did not help"
			if out == unknown {
				verdict = "could not be judged"
			}
			return c.confine(now, all, max(c.episodeFrom, current), signal,
				fmt.Sprintf("%s; confining revocable work %s (%s): undone for %s", reason, verdict, why, c.ineffectiveUntil.Sub(now)))
		} else if due {
			c.ineffectiveBackoff = c.cfg.ProbeBackoff
		}
	}

	sinceChange := now.Sub(c.lastChange)
	switch {
	case !guarded && current < len(all):
		return c.confine(now, all, len(all), now, "no guaranteed work on the node")
	case sizing && current > allowed && (c.lastChange.IsZero() || sinceChange >= c.cfg.ShrinkInterval):
		return c.confine(now, all, current-1, now, fmt.Sprintf("guaranteed work uses %s: %d of %d CPUs kept free of revocable work",
			formatCores(guaranteedCPU), reserve, len(all)))
	case violating && c.lastGrow && sinceChange < c.cfg.GrowAfter:
		// A failed probe: back to the size before it, not tried again for a
		// while. Taking the CPU back is judged like any other confinement.
		if judged && c.effect.begin(now) {
			c.episodeFrom = current
		}
		c.capSize, c.capUntil = c.beforeGrow, now.Add(c.backoff)
		c.backoff = min(2*c.backoff, c.cfg.ProbeBackoffMax)
		return c.confine(now, all, c.beforeGrow, worst.signalAt, fmt.Sprintf("%s after giving revocable work a CPU; back to %d for %s",
			worst.reason, c.beforeGrow, c.capUntil.Sub(now)))
	case violating && !ineffective && current > c.cfg.MinCPUs && (c.lastChange.IsZero() || sinceChange >= c.cfg.ShrinkInterval):
		if judged && c.effect.begin(now) {
			c.episodeFrom = current
		}
		return c.confine(now, all, current-1, worst.signalAt, worst.reason)
	case calm && current < allowed && in.RevocableLimit <= 0 && now.Sub(c.calmSince) >= c.cfg.GrowAfter && sinceChange >= c.cfg.GrowInterval:
		if c.capSize > 0 && now.Before(c.capUntil) && current+1 > c.capSize {
			return nil
		}
		out := c.confine(now, all, current+1, c.calmSince, fmt.Sprintf("guaranteed work calm for %s", now.Sub(c.calmSince)))
		c.lastGrow, c.beforeGrow = true, current
		return out
	}
	return nil
}

// confine asks for the size highest-numbered CPUs (every CPU: an empty
// list).
func (c *CPUSet) confine(now time.Time, all []int, size int, signal time.Time, reason string) []Correction {
	size = min(max(size, c.cfg.MinCPUs, 1), len(all))
	c.lastChange, c.lastGrow = now, false
	var cpus []int
	if size < len(all) {
		cpus = slices.Clone(all[len(all)-size:])
	}
	return []Correction{{Kind: Confine, CPUs: cpus, Reason: reason, Controller: "cpuset", Signal: signal}}
}

// nodeCPUs returns the node's CPU numbers, sorted.
func nodeCPUs(n Node) []int {
	if len(n.CPUList) > 0 {
		cpus := slices.Clone(n.CPUList)
		slices.Sort(cpus)
		return slices.Compact(cpus)
	}
	cpus := make([]int, max(int(math.Round(n.CPUs)), 1))
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}
