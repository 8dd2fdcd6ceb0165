package qos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// detector decides, from the guaranteed and protected containers' signals
// and the recent eBPF threshold events, whether guaranteed work is
// interfered with (a violation), calm, or in between, by the thresholds of
// InterferenceConfig. Every controller that reacts to interference keeps
// one: it holds the threshold events of the last EventWindow.
type detector struct {
	cfg    InterferenceConfig
	events []Event // qualifying threshold events within EventWindow, oldest first
}

// violation is the worst signal of one evaluation.
type violation struct {
	reason   string
	signalAt time.Time
	severity float64 // how far above its threshold: value / threshold
}

// keepEvents adds the qualifying new events (a guaranteed or protected
// victim known to the input, latency at least EventLatency) and drops those
// older than EventWindow. Events from victims the agent did not list (host
// processes) are ignored: nothing in Slackline answers for them.
func (d *detector) keepEvents(events []Event, byID map[string]*Container, now time.Time) {
	if d.cfg.EventCount <= 0 {
		return
	}
	for _, e := range events {
		victim, ok := byID[e.Container]
		if !ok || !victim.guarded() || e.Latency < d.cfg.EventLatency || e.Time.After(now) {
			continue
		}
		if d.cfg.MinAttributedDelay > 0 && victim.DelayedBy != nil &&
			(e.Culprit == "" || (e.Delayed > 0 && float64(e.Delayed) < d.cfg.MinAttributedShare*float64(e.Latency))) {
			continue // attribution says revocable tasks held the CPU for little or none of the wait
		}
		d.events = append(d.events, e)
	}
	slices.SortStableFunc(d.events, func(a, b Event) int { return a.Time.Compare(b.Time) })
	horizon := now.Add(-d.cfg.EventWindow)
	drop := 0
	for drop < len(d.events) && !d.events[drop].Time.After(horizon) {
		drop++
	}
	d.events = slices.Delete(d.events, 0, drop)
}

// assess returns the worst fresh violation (nil if none; percentiles and PSI
// name the reason before events, the signal time is the earliest fresh
// sign), whether some
// violation was seen only in samples older than the last change, and
// whether every signal is calm.
func (d *detector) assess(containers []Container, now, lastChange time.Time) (worst *violation, staleViolation, calm bool) {
	calm = len(d.events) == 0
	earliest := time.Time{}
	consider := func(v violation, sampled time.Time) {
		if !lastChange.IsZero() && !sampled.After(lastChange) {
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
		if !d.attributed(ct) {
			continue // not the revocable tasks' doing: neither violation nor alarm
		}
		if ct.RunqP99 > d.cfg.RunqP99Enter {
			consider(violation{
				reason:   fmt.Sprintf("%s run-queue p99 %s > %s", ct.ID, formatDuration(ct.RunqP99), formatDuration(d.cfg.RunqP99Enter)),
				signalAt: sampled,
				severity: float64(ct.RunqP99) / float64(d.cfg.RunqP99Enter),
			}, sampled)
		}
		if d.cfg.CPUPressureEnter > 0 && ct.CPUPressureSome10 > d.cfg.CPUPressureEnter {
			consider(violation{
				reason:   fmt.Sprintf("%s cpu pressure some avg10 %.1f%% > %g%%", ct.ID, ct.CPUPressureSome10, d.cfg.CPUPressureEnter),
				signalAt: sampled,
				severity: ct.CPUPressureSome10 / d.cfg.CPUPressureEnter,
			}, sampled)
		}
		if ct.RunqP99 > d.cfg.RunqP99Exit || (d.cfg.CPUPressureEnter > 0 && ct.CPUPressureSome10 > d.cfg.CPUPressureExit) {
			calm = false
		}
	}
	if d.cfg.EventCount > 0 {
		// Only events after the last change show that it was not enough.
		var fresh []Event
		for _, e := range d.events {
			if e.Time.After(lastChange) {
				fresh = append(fresh, e)
			}
		}
		if len(fresh) >= d.cfg.EventCount {
			w := slices.MaxFunc(fresh, func(a, b Event) int { return cmp.Compare(a.Latency, b.Latency) })
			behind := ""
			if w.Culprit != "" {
				behind = " behind " + w.Culprit
			}
			v := violation{
				reason: fmt.Sprintf("%s: %d wakeups waited over %s within %s (worst %s%s)",
					w.Container, len(fresh), formatDuration(d.cfg.EventLatency), formatDuration(d.cfg.EventWindow), formatDuration(w.Latency), behind),
				signalAt: fresh[0].Time,
				severity: float64(len(fresh)) / float64(d.cfg.EventCount),
			}
			// A percentile or PSI reason reads better; the events may
			// still be the earliest sign.
			if worst == nil {
				worst = &v
			}
			if earliest.IsZero() || v.signalAt.Before(earliest) {
				earliest = v.signalAt
			}
		} else if len(d.events) >= d.cfg.EventCount {
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
func (d *detector) attributed(ct *Container) bool {
	if d.cfg.MinAttributedDelay <= 0 || ct.DelayedBy == nil {
		return true
	}
	var total time.Duration
	for _, d := range ct.DelayedBy {
		total += d
	}
	if ct.RunqWait > 0 && float64(total) < d.cfg.MinAttributedShare*float64(ct.RunqWait) {
		return false // revocable work caused a small part of the waiting
	}
	return total >= d.cfg.MinAttributedDelay
}
