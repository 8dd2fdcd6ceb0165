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
//     among equals, at most one per KillCooldown.
//
// State kept between evaluations: the recent threshold events, when the
// limit last changed and in which direction, since when the signals are
// calm, since when the subtree has been at the floor under violation, the
// level not to exceed and its backoff, the last kill and the kills still
// being carried out. The applied limit itself is read from
// Input.RevocableLimit at every evaluation.
type Interference struct {
	cfg   InterferenceConfig
	kills killTracker

	events []Event // qualifying threshold events within EventWindow, oldest first

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
	return &Interference{cfg: cfg, kills: newKillTracker(killRetry), backoff: cfg.ProbeBackoff}
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

// violation is the worst signal of one evaluation.
type violation struct {
	reason   string
	signalAt time.Time
	severity float64 // how far above its threshold: value / threshold
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
	c.keepEvents(in.Events, byID, now)

	worst, staleViolation, calm := c.assess(in.Containers, now)

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
	} else {
		c.calmSince = time.Time{}
	}
	c.updateCap(now, calm, s)

	switch {
	case worst != nil && hasVictims:
		return c.onViolation(in, worst, s)
	case worst != nil || staleViolation:
		return nil // hold: nothing to throttle, or waiting for fresh samples
	case calm && s.current > 0 && now.Sub(c.calmSince) >= c.cfg.CalmPeriod && now.Sub(c.lastChange) >= c.cfg.IncreaseInterval:
		return c.raise(now, s)
	}
	return nil
}

// keepEvents adds the qualifying new events (a guaranteed or protected
// victim known to the input, latency at least EventLatency) and drops those
// older than EventWindow. Events from victims the agent did not list (host
// processes) are ignored: nothing in Slackline answers for them.
func (c *Interference) keepEvents(events []Event, byID map[string]*Container, now time.Time) {
	if c.cfg.EventCount <= 0 {
		return
	}
	for _, e := range events {
		victim, ok := byID[e.Container]
		if !ok || !victim.guarded() || e.Latency < c.cfg.EventLatency || e.Time.After(now) {
			continue
		}
		if c.cfg.MinAttributedDelay > 0 && victim.DelayedBy != nil && e.Culprit == "" {
			continue // attribution says no revocable task held the CPU
		}
		c.events = append(c.events, e)
	}
	slices.SortStableFunc(c.events, func(a, b Event) int { return a.Time.Compare(b.Time) })
	horizon := now.Add(-c.cfg.EventWindow)
	drop := 0
	for drop < len(c.events) && !c.events[drop].Time.After(horizon) {
		drop++
	}
	c.events = slices.Delete(c.events, 0, drop)
}

// assess returns the worst fresh violation (nil if none; percentiles and PSI
// name the reason before events, the signal time is the earliest fresh
// sign), whether some
// violation was seen only in samples older than the last change, and
// whether every signal is calm.
func (c *Interference) assess(containers []Container, now time.Time) (worst *violation, staleViolation, calm bool) {
	calm = len(c.events) == 0
	earliest := time.Time{}
	consider := func(v violation, sampled time.Time) {
		if !c.lastChange.IsZero() && !sampled.After(c.lastChange) {
			staleViolation = true
			return
		}
		if earliest.IsZero() || v.signalAt.Before(earliest) {
			earliest = v.signalAt
		}
		if worst == nil || v.severity > worst.severity {
			worst = &v
		}
	}
	for i := range containers {
		ct := &containers[i]
		if !ct.guarded() {
			continue
		}
		sampled := ct.sampledAt(now)
		if !c.attributed(ct) {
			continue // not the revocable tasks' doing: neither violation nor alarm
		}
		if ct.RunqP99 > c.cfg.RunqP99Enter {
			consider(violation{
				reason:   fmt.Sprintf("%s run-queue p99 %s > %s", ct.ID, formatDuration(ct.RunqP99), formatDuration(c.cfg.RunqP99Enter)),
				signalAt: sampled,
				severity: float64(ct.RunqP99) / float64(c.cfg.RunqP99Enter),
			}, sampled)
		}
		if c.cfg.CPUPressureEnter > 0 && ct.CPUPressureSome10 > c.cfg.CPUPressureEnter {
			consider(violation{
				reason:   fmt.Sprintf("%s cpu pressure some avg10 %.1f%% > %g%%", ct.ID, ct.CPUPressureSome10, c.cfg.CPUPressureEnter),
				signalAt: sampled,
				severity: ct.CPUPressureSome10 / c.cfg.CPUPressureEnter,
			}, sampled)
		}
		if ct.RunqP99 > c.cfg.RunqP99Exit || (c.cfg.CPUPressureEnter > 0 && ct.CPUPressureSome10 > c.cfg.CPUPressureExit) {
			calm = false
		}
	}
	if c.cfg.EventCount > 0 {
		// Only events after the last change show that it was not enough.
		var fresh []Event
		for _, e := range c.events {
			if e.Time.After(c.lastChange) {
				fresh = append(fresh, e)
			}
		}
		if len(fresh) >= c.cfg.EventCount {
			w := slices.MaxFunc(fresh, func(a, b Event) int { return cmp.Compare(a.Latency, b.Latency) })
			behind := ""
			if w.Culprit != "" {
				behind = " behind " + w.Culprit
			}
			v := violation{
				reason: fmt.Sprintf("%s: %d wakeups waited over %s within %s (worst %s%s)",
					w.Container, len(fresh), formatDuration(c.cfg.EventLatency), formatDuration(c.cfg.EventWindow), formatDuration(w.Latency), behind),
				signalAt: fresh[0].Time,
				severity: float64(len(fresh)) / float64(c.cfg.EventCount),
			}
			// A percentile or PSI reason reads better; the events may
			// still be the earliest sign.
			if worst == nil {
				worst = &v
			}
			if earliest.IsZero() || v.signalAt.Before(earliest) {
				earliest = v.signalAt
			}
		} else if len(c.events) >= c.cfg.EventCount {
			staleViolation = true
		}
	}
	if worst != nil {
		worst.signalAt = earliest
	}
	return worst, staleViolation, calm
}

// attributed reports whether revocable containers delayed ct enough to
// count its violations: always when attribution is off or unavailable.
func (c *Interference) attributed(ct *Container) bool {
	if c.cfg.MinAttributedDelay <= 0 || ct.DelayedBy == nil {
		return true
	}
	var total time.Duration
	for _, d := range ct.DelayedBy {
		total += d
	}
	return total >= c.cfg.MinAttributedDelay
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
// throttling has failed for KillAfter.
func (c *Interference) onViolation(in Input, v *violation, s subtree) []Correction {
	now := in.Now
	if s.current > 0 && s.current <= s.floor+epsilon {
		if c.floorSince.IsZero() {
			c.floorSince = now
		}
		if now.Sub(c.floorSince) < c.cfg.KillAfter || (!c.lastKill.IsZero() && now.Sub(c.lastKill) < c.cfg.KillCooldown) {
			return nil
		}
		return c.kill(in, v, s.current)
	}
	c.floorSince = time.Time{}

	sinceChange := now.Sub(c.lastChange)
	probeFailed := c.lastChangeIncrease && sinceChange < c.cfg.CalmPeriod
	if !c.lastChangeIncrease && !c.lastChange.IsZero() && sinceChange < c.cfg.DecreaseInterval {
		return nil // let the previous decrease show its effect
	}

	var limit float64
	reason := v.reason
	if probeFailed {
		limit = max(c.beforeIncrease, s.floor)
		c.setCap(now, limit, s.guaranteedCPU)
		c.backoff = min(2*c.backoff, c.cfg.ProbeBackoffMax)
		reason += fmt.Sprintf(" after raising the revocable CPU limit; back to %s for %s", formatCores(limit), c.capUntil.Sub(now))
	} else {
		from := s.current
		if from <= 0 {
			from = s.ceiling
		}
		// A limit above what revocable work uses would change nothing.
		if s.revocableCPU > 0 && s.revocableCPU < from {
			from = max(s.revocableCPU, s.floor)
		}
		limit = max(s.floor, from*c.cfg.DecreaseFactor)
		c.setCap(now, max(limit, from-s.step), s.guaranteedCPU)
	}
	if s.current > 0 && limit >= s.current-epsilon {
		return nil
	}
	c.lastChange, c.lastChangeIncrease = now, false
	return []Correction{{Kind: Throttle, CPULimit: limit, Reason: reason, Controller: "interference", Signal: v.signalAt}}
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
		Reason:     fmt.Sprintf("guaranteed work calm for %s: revocable CPU limit %s -> %s", now.Sub(c.calmSince), formatCores(current), formatCores(target)),
		Controller: "interference",
		Signal:     c.calmSince,
	}}
}

// kill kills the revocable container that delayed guaranteed work most.
func (c *Interference) kill(in Input, v *violation, current float64) []Correction {
	delay := make(map[string]time.Duration)      // who-delayed-whom, last interval
	eventDelay := make(map[string]time.Duration) // threshold events in the window
	for i := range in.Containers {
		if ct := &in.Containers[i]; ct.guarded() {
			for culprit, d := range ct.DelayedBy {
				delay[culprit] += d
			}
		}
	}
	for _, e := range c.events {
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
		Reason: fmt.Sprintf("%s; revocable CPU at the floor (%s) for %s; %s %s",
			v.reason, formatCores(current), in.Now.Sub(c.floorSince), victim.ID, why),
		Controller: "interference",
		Signal:     v.signalAt,
	}}
}
