package qos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Interference is the "interference" controller: a feedback controller on
// the revocable subtree's CPU limit, with hysteresis, that kills revocable
// containers only when throttling to the floor has not helped. The
// package documentation describes the algorithm; in short:
//
//   - violation: some guaranteed or protected container's run-queue p99 is
//     above RunqP99Enter, or its CPU PSI above CPUPressureEnter, or EventCount
//     eBPF threshold events arrived within EventWindow. Only signals sampled
//     after the last change of the limit count, so one stale sample does not
//     cause two decreases;
//   - calm: every signal below its Exit threshold and no events in the window;
//     in between, the limit holds;
//   - on violation, the limit is multiplied by DecreaseFactor (at once after a
//     calm spell, then at most every DecreaseInterval) down to the floor; a
//     violation within CalmPeriod of a raise undoes the raise instead (a
//     failed probe);
//   - after CalmPeriod of calm, the limit rises by one step every
//     IncreaseInterval, and is removed when it reaches the revocable
//     containers' allocation; a level that caused a violation is not tried
//     again for ProbeBackoff (doubling after each failed probe), unless the
//     guaranteed work's CPU use falls by more than a step;
//   - at the floor, once violations have gone on for KillAfter, it kills the
//     revocable container that delayed guaranteed work most, newest first
//     among equals, at most one per KillCooldown;
//   - never worse than nothing: with eBPF attribution, EffectWindow after the
//     first decrease of an episode (a violation after calm) it compares the
//     delay revocable containers cause guaranteed work with the delay before;
//     throttling that did not cut it by MinEffect is undone (the limit goes
//     back to where the episode started) and not tried again for
//     ProbeBackoff (doubling while it keeps failing), and the revocable
//     container that delayed guaranteed work most, if any did, is killed
//     instead, at most one per KillCooldown; throttling that cut it while
//     guaranteed work's whole run-queue wait did not fall by MinWaitGain
//     is undone the same way, and nothing is killed for it.
//
// In a set with the cpuset controller, it throttles only once that one has
// nothing left to try (see NewSet).
//
// State kept between evaluations: the recent threshold events, when the
// limit last changed and in which direction, since when the signals are
// calm, since when the subtree has been at the floor under violation, the
// level not to exceed and its backoff, the episode under judgement and the
// delay history it is judged by, the last kill and the kills still being
// carried out. The applied limit itself is read from Input.RevocableLimit
// at every evaluation.
type Interference struct {
	cfg   InterferenceConfig
	kills killTracker
	sig   detector

	effect             effect
	episodeFrom        float64   // the limit before the episode's first decrease
	episodeBase        float64   // the cores revocable work could use then
	ineffectiveUntil   time.Time // throttling did not help: none until then
	ineffectiveBackoff time.Duration
	killInstead        bool // ... because it did not cut the delay revocable work causes: kill instead

	// first, when set, acts before this controller throttles (cpuset).
	first firstResort

	lastChange         time.Time // when this controller last changed the limit
	lastChangeIncrease bool      // whether that change was a raise (a probe)
	beforeIncrease     float64   // the limit before that raise, restored if the probe fails

	calmSince  time.Time // zero while not calm
	floorSince time.Time // zero unless violating at the floor
	lastKill   time.Time

	capLimit         float64 // do not raise above this until capUntil; 0 = no cap
	capUntil         time.Time
	capGuaranteedCPU float64 // peak guaranteed CPU use since the cap was set
	backoff          time.Duration
}

// NewInterference returns an interference controller.
func NewInterference(cfg InterferenceConfig, killRetry time.Duration) *Interference {
	return &Interference{cfg: cfg, kills: newKillTracker(killRetry), backoff: cfg.ProbeBackoff,
		sig: detector{cfg: cfg}, effect: newEffect(cfg), ineffectiveBackoff: cfg.ProbeBackoff}
}

// firstResort is a controller that tries its corrections before the
// interference controller throttles. At its latest evaluation, exhausted
// reports whether it had nothing left to try, and fruitless whether that
// is because its correction cut the delay revocable work causes without
// guaranteed work waiting less in all (then throttling, which also takes
// revocable work's CPU, is not tried either).
type firstResort interface {
	exhausted() bool
	fruitless() bool
}

// epsilon absorbs float rounding when comparing CPU limits.
const epsilon = 1e-9

// subtree is what one evaluation knows of the revocable subtree's CPU
// limit and of the CPU in use, all in cores.
type subtree struct {
	current float64 // the applied limit (Input.RevocableLimit); 0 = none
	floor   float64 // the lowest limit the controller sets
	ceiling float64 // the revocable allocation, at most the node: a raise that reaches it removes the limit
	step    float64 // one raise; a fall of the guaranteed load by more than this lifts the cap

	revocableCPU  float64 // used by the revocable containers
	guaranteedCPU float64 // used by the guaranteed and protected containers
}

// Evaluate implements Controller.
func (c *Interference) Evaluate(in Input) []Correction {
	now := in.Now
	c.kills.forgetGone(in.Containers)

	byID := make(map[string]*Container, len(in.Containers))
	var (
		s                  subtree
		revocableAllocated float64
		hasVictims         bool
	)
	for i := range in.Containers {
		ct := &in.Containers[i]
		byID[ct.ID] = ct
		switch {
		case ct.guarded():
			s.guaranteedCPU += ct.CPU
		case ct.correctable():
			s.revocableCPU += ct.CPU
			revocableAllocated += ct.CPUAllocated
			hasVictims = true
		}
	}
	c.sig.keepEvents(in.Events, byID, now)
	judged := c.effect.observe(in) && c.cfg.MinAttributedDelay > 0

	worst, staleViolation, calm := c.sig.assess(in.Containers, now, c.lastChange)

	s.step = max(c.cfg.IncreaseStepCores, c.cfg.IncreaseStepFraction*in.Node.CPUs)
	s.floor = max(c.cfg.FloorCores, c.cfg.FloorFraction*in.Node.CPUs)
	s.ceiling = revocableAllocated
	if s.ceiling <= 0 || (in.Node.CPUs > 0 && s.ceiling > in.Node.CPUs) {
		s.ceiling = in.Node.CPUs
	}
	s.ceiling = max(s.ceiling, s.floor)
	s.current = in.RevocableLimit

	if calm {
		if c.calmSince.IsZero() {
			c.calmSince = now
		}
		c.floorSince = time.Time{}
		c.effect.calm()
		if now.Sub(c.calmSince) >= c.cfg.ProbeBackoffMax {
			c.ineffectiveBackoff = c.cfg.ProbeBackoff // the failures are long past
		}
	} else {
		c.calmSince = time.Time{}
	}
	c.updateCap(now, calm, s)

	// The verdict is due whether or not the violation goes on: throttling
	// that made revocable tasks delay guaranteed work more, below the
	// attribution gate or not, is undone all the same.
	if judged && hasVictims {
		removed := 0.0
		if c.episodeBase > 0 {
			applied := s.current
			if applied <= 0 {
				applied = c.episodeBase
			}
			removed = 1 - min(applied, c.episodeBase)/c.episodeBase
		}
		if due, out, why := c.effect.verdict(now, removed); due && out != helped {
			return c.undo(in, worst, s, out, why)
		} else if due {
			c.ineffectiveBackoff = c.cfg.ProbeBackoff
		}
	}
	switch {
	case worst != nil && hasVictims && now.Before(c.ineffectiveUntil):
		if !c.killInstead {
			return nil
		}
		return c.replace(in, worst)
	case worst != nil && hasVictims && c.first != nil && (!c.first.exhausted() || c.first.fruitless()):
		return nil // the first resort acts, or found that taking CPU does not help
	case worst != nil && hasVictims:
		return c.onViolation(in, worst, s, judged)
	case worst != nil || staleViolation:
		return nil // hold: nothing to throttle, or waiting for fresh samples
	case calm && s.current > 0 && now.Sub(c.calmSince) >= c.cfg.CalmPeriod && now.Sub(c.lastChange) >= c.cfg.IncreaseInterval:
		return c.raise(now, s)
	}
	return nil
}

// updateCap forgets the level not to exceed when the guaranteed work's CPU
// use has fallen by more than a step (the level was bad for a heavier
// load), or when the limit has stayed above it, calm, for CalmPeriod after
// the cap expired (the probe succeeded).
func (c *Interference) updateCap(now time.Time, calm bool, s subtree) {
	if c.capLimit <= 0 {
		return
	}
	c.capGuaranteedCPU = max(c.capGuaranteedCPU, s.guaranteedCPU)
	loadFell := s.guaranteedCPU < c.capGuaranteedCPU-s.step
	probeHeld := calm && !now.Before(c.capUntil) && (s.current <= 0 || s.current > c.capLimit+epsilon) &&
		now.Sub(c.lastChange) >= c.cfg.CalmPeriod
	if loadFell || probeHeld {
		c.capLimit, c.capUntil, c.capGuaranteedCPU = 0, time.Time{}, 0
		c.backoff = c.cfg.ProbeBackoff
	}
}

// onViolation lowers the limit, or at the floor kills a victim once
// throttling has failed for KillAfter. judged: the decrease starts an
// episode judged by its effect.
func (c *Interference) onViolation(in Input, v *violation, s subtree, judged bool) []Correction {
	now := in.Now
	if s.current > 0 && s.current <= s.floor+epsilon {
		if c.floorSince.IsZero() {
			c.floorSince = now
		}
		if now.Sub(c.floorSince) < c.cfg.KillAfter || (!c.lastKill.IsZero() && now.Sub(c.lastKill) < c.cfg.KillCooldown) {
			return nil
		}
		return c.kill(in, v, fmt.Sprintf("revocable CPU at the floor (%s) for %s", formatCores(s.current), now.Sub(c.floorSince)), false)
	}
	c.floorSince = time.Time{}

	sinceChange := now.Sub(c.lastChange)
	probeFailed := c.lastChangeIncrease && sinceChange < c.cfg.CalmPeriod
	if !c.lastChangeIncrease && !c.lastChange.IsZero() && sinceChange < c.cfg.DecreaseInterval {
		return nil // let the previous decrease show its effect
	}

	var limit, from float64
	reason := v.reason
	if probeFailed {
		limit = max(c.beforeIncrease, s.floor)
		c.setCap(now, limit, s.guaranteedCPU)
		c.backoff = min(2*c.backoff, c.cfg.ProbeBackoffMax)
		reason += fmt.Sprintf(" after raising the revocable CPU limit; back to %s for %s", formatCores(limit), c.capUntil.Sub(now))
	} else {
		from = s.current
		if from <= 0 {
			from = s.ceiling
		}
		// A limit above what revocable work uses, or above the CPUs it may
		// run on, would change nothing.
		if s.revocableCPU > 0 && s.revocableCPU < from {
			from = max(s.revocableCPU, s.floor)
		}
		if n := float64(len(in.RevocableCPUs)); n > 0 && n < from {
			from = max(n, s.floor)
		}
		limit = max(s.floor, from*c.cfg.DecreaseFactor)
		c.setCap(now, max(limit, from-s.step), s.guaranteedCPU)
	}
	if s.current > 0 && limit >= s.current-epsilon {
		return nil
	}
	if judged && !probeFailed && c.effect.begin(now) {
		c.episodeFrom, c.episodeBase = s.current, from
	}
	c.lastChange, c.lastChangeIncrease = now, false
	return []Correction{{Kind: Throttle, CPULimit: limit, Period: c.cfg.ThrottlePeriod, Reason: reason, Controller: "interference", Signal: v.signalAt}}
}

// undo takes back an episode's throttling that did not help. When it did
// not reduce the delay revocable containers cause (noEffect), it kills the
// one that caused most instead; when it did but guaranteed work waited no
// less in all (noGain), killing would not help either, and it only gives
// revocable work its CPU back.
func (c *Interference) undo(in Input, worst *violation, s subtree, out outcome, why string) []Correction {
	now := in.Now
	v := worst
	if v == nil {
		v = &violation{reason: "after throttling revocable work", signalAt: now}
	}
	c.effect.end()
	c.killInstead = out == noEffect
	c.ineffectiveUntil = now.Add(c.ineffectiveBackoff)
	if out != unknown {
		c.ineffectiveBackoff = min(2*c.ineffectiveBackoff, c.cfg.ProbeBackoffMax)
	}
	c.lastChange, c.lastChangeIncrease = now, false
	c.floorSince = time.Time{}
	// The levels were not what hurt: forget them.
	c.capLimit, c.capUntil, c.capGuaranteedCPU = 0, time.Time{}, 0
	c.backoff = c.cfg.ProbeBackoff
	verdict := "did not help"
	if out == unknown {
		verdict = "could not be judged"
	}
	var undone []Correction
	if s.current > 0 && (c.episodeFrom <= 0 || s.current < c.episodeFrom-epsilon) {
		undone = append(undone, Correction{Kind: Unthrottle, CPULimit: c.episodeFrom, Period: c.periodFor(c.episodeFrom),
			Reason:     fmt.Sprintf("%s; throttling %s (%s): undone for %s", v.reason, verdict, why, c.ineffectiveUntil.Sub(now)),
			Controller: "interference", Signal: v.signalAt})
	}
	if worst == nil || !c.killInstead {
		return undone // no violation, or nothing a kill would help
	}
	return append(undone, c.replace(in, worst)...)
}

// replace kills, instead of throttling, the revocable container that
// delayed guaranteed work most, if attribution names one.
func (c *Interference) replace(in Input, v *violation) []Correction {
	if !c.lastKill.IsZero() && in.Now.Sub(c.lastKill) < c.cfg.KillCooldown {
		return nil
	}
	return c.kill(in, v, "throttling does not reduce the delay revocable tasks cause", true)
}

// periodFor is the CFS period of a limit: ThrottlePeriod, none without a
// limit.
func (c *Interference) periodFor(limit float64) time.Duration {
	if limit <= 0 {
		return 0
	}
	return c.cfg.ThrottlePeriod
}

func (c *Interference) setCap(now time.Time, limit, guaranteedCPU float64) {
	c.capLimit, c.capUntil, c.capGuaranteedCPU = limit, now.Add(c.backoff), guaranteedCPU
}

// raise adds one step to the limit, up to the cap, and removes the limit at
// the ceiling.
func (c *Interference) raise(now time.Time, s subtree) []Correction {
	current := s.current
	target := current + s.step
	if c.capLimit > 0 && now.Before(c.capUntil) {
		target = min(target, c.capLimit)
	}
	if target <= current+epsilon {
		return nil
	}
	if target >= s.ceiling-epsilon {
		target = 0
	}
	c.lastChange, c.lastChangeIncrease, c.beforeIncrease = now, true, current
	return []Correction{{
		Kind:       Unthrottle,
		CPULimit:   target,
		Period:     c.periodFor(target),
		Reason:     fmt.Sprintf("guaranteed work calm for %s: revocable CPU limit %s -> %s", now.Sub(c.calmSince), formatCores(current), formatCores(target)),
		Controller: "interference",
		Signal:     c.calmSince,
	}}
}

// kill kills the revocable container that delayed guaranteed work most;
// context says why it comes to that. With needCulprit, only a container
// that delayed guaranteed work (who-delayed-whom or threshold events) is a
// victim.
func (c *Interference) kill(in Input, v *violation, context string, needCulprit bool) []Correction {
	delay := make(map[string]time.Duration)      // who-delayed-whom, last interval
	eventDelay := make(map[string]time.Duration) // threshold events in the window
	for i := range in.Containers {
		if ct := &in.Containers[i]; ct.guarded() {
			for culprit, d := range ct.DelayedBy {
				delay[culprit] += d
			}
		}
	}
	for _, e := range c.sig.events {
		if e.Culprit != "" {
			eventDelay[e.Culprit] += e.Latency
		}
	}
	var candidates []*Container
	for i := range in.Containers {
		if ct := &in.Containers[i]; ct.correctable() && !c.kills.pending(ct.ID, in.Now) {
			candidates = append(candidates, ct)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	victim := slices.MinFunc(candidates, func(a, b *Container) int {
		if r := cmp.Compare(delay[b.ID], delay[a.ID]); r != 0 {
			return r
		}
		if r := cmp.Compare(eventDelay[b.ID], eventDelay[a.ID]); r != 0 {
			return r
		}
		return newerFirst(a, b)
	})
	why := "the newest revocable container"
	switch {
	case delay[victim.ID] > 0:
		why = "delayed guaranteed work by " + formatDuration(delay[victim.ID])
	case eventDelay[victim.ID] > 0:
		why = "ran during guaranteed wakeups that waited " + formatDuration(eventDelay[victim.ID])
	case needCulprit:
		return nil
	}
	c.kills.record(victim.ID, in.Now)
	c.lastKill = in.Now
	// The levels that caused violations were measured with the victim running.
	c.capLimit, c.capUntil, c.capGuaranteedCPU = 0, time.Time{}, 0
	c.backoff = c.cfg.ProbeBackoff
	return []Correction{{
		Kind:        Kill,
		ContainerID: victim.ID,
		TaskID:      victim.TaskID,
		Reason:      fmt.Sprintf("%s; %s; %s %s", v.reason, context, victim.ID, why),
		Controller:  "interference",
		Signal:      v.signalAt,
	}}
}
