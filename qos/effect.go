package qos

import (
	"fmt"
	"time"
)

// effect judges a controller's corrections by what they change for
// guaranteed and protected work: "never worse than nothing". An episode
// starts with a controller's first tightening after calm; once
// EffectWindow has passed, two things are compared with just before it
// (the last quarter of an EffectWindow: the violation may have begun within
// the window):
//
//   - effect: the delay revocable containers cause guarded work (eBPF
//     who-delayed-whom, Container.DelayedBy) must have fallen by at least
//     MinEffect of what the episode took from revocable work;
//   - cost: guarded work's whole run-queue wait (Container.RunqWait; its
//     run-queue p99 where the wait is not measured), over the last half
//     window, must have fallen by at least MinWaitGain. The part attributed
//     to revocable work can fall while the whole does not (the server's
//     threads crowd the CPUs left to them, or the violation was a passing
//     one that would have ended anyway), and then the correction costs
//     best-effort work its CPU for nothing.
//
// The verdict waits until revocable work has run in at least minRanShare of
// the samples of that half window, and is then given on those samples
// alone: while it stands still, neither says anything of the correction.
// It waits at most verdictDeadline EffectWindows after the episode began:
// then it is given on the samples of the last half window, or since the
// latest tightening, where revocable work ran, and, if there are none, the
// episode is undone (unknown): a correction that cannot be judged does not
// keep revocable work's CPU. An episode
// that fails either test is undone by its controller. Without
// attribution (no eBPF: every DelayedBy nil) nothing can be judged, and
// neither can it when attribution is turned off (MinAttributedDelay 0):
// corrections then stand, as before.
type effect struct {
	window      time.Duration
	minEffect   float64
	minWaitGain float64
	// floorCores and floorFraction are the interference controller's floor
	// (max(FloorCores, FloorFraction × node CPUs)): revocable work
	// throttled to it must still count as running.
	floorCores, floorFraction float64

	history    []delaySample // the last 2 × window of evaluations, oldest first
	last       time.Time     // the previous evaluation
	minUseLast float64       // the latest minUse, for verdicts' reasons

	active     bool      // an episode is being judged
	judged     bool      // ... and its verdict was given
	start      time.Time // its first correction
	latest     time.Time // its latest correction
	before     float64   // delay rate (seconds per second) just before it
	waitBefore float64   // guarded work's whole wait rate then (0: unknown)
	p99Before  float64   // guarded work's highest run-queue p99 then, seconds (0: unknown)
}

// outcome is an episode's verdict.
type outcome int

const (
	// helped: the delay revocable work causes fell, and so did guarded
	// work's whole wait (or p99) where measured.
	helped outcome = iota
	// noEffect: the delay revocable work causes did not fall enough.
	noEffect
	// noGain: it fell, but guarded work did not wait less in all: the
	// correction cost revocable work CPU and bought guarded work nothing.
	noGain
	// unknown: revocable work did not run after the correction before the
	// verdict's deadline: nothing could be judged.
	unknown
)

// delaySample is one evaluation's attributable delay: delay caused during
// the span (at-span, at].
type delaySample struct {
	when  time.Time
	span  time.Duration
	delay time.Duration
	wait  time.Duration // all the run-queue wait of guarded work (0: unknown)
	p99   time.Duration // the highest run-queue p99 of guarded work (0: unknown)
	// ran: revocable containers used at least the node's minimum use
	// (minUse): a verdict needs them to have run after the correction.
	ran bool
}

func newEffect(cfg InterferenceConfig) effect {
	return effect{window: cfg.EffectWindow, minEffect: cfg.MinEffect, minWaitGain: cfg.MinWaitGain,
		floorCores: cfg.FloorCores, floorFraction: cfg.FloorFraction}
}

// observe records the delay revocable containers caused guarded work since
// the previous evaluation; it reports whether attribution is available.
func (e *effect) observe(in Input) bool {
	var delay, wait, p99 time.Duration
	var revocableCPU float64
	attributed := false
	for i := range in.Containers {
		ct := &in.Containers[i]
		if ct.correctable() {
			revocableCPU += ct.CPU
		}
		if !ct.guarded() || ct.DelayedBy == nil {
			continue
		}
		attributed = true
		for _, d := range ct.DelayedBy {
			delay += d
		}
		wait += ct.RunqWait
		p99 = max(p99, ct.RunqP99)
	}
	defer func() { e.last = in.Now }()
	if !attributed || e.last.IsZero() || !in.Now.After(e.last) {
		return attributed
	}
	e.history = append(e.history, delaySample{when: in.Now, span: in.Now.Sub(e.last), delay: delay, wait: wait, p99: p99,
		ran: revocableCPU >= e.minUse(in.Node.CPUs)})
	drop := 0
	for drop < len(e.history) && in.Now.Sub(e.history[drop].when) > 2*e.window {
		drop++
	}
	e.history = e.history[drop:]
	return true
}

// rates are, over the samples whose interval lies within (from, to], the
// attributable delay per second, guarded work's whole run-queue wait per
// second (0 when not measured) and the mean of its highest run-queue p99 (0
// when not measured), in seconds.
func (e *effect) rates(from, to time.Time) (delay, wait, p99 float64, ok bool) {
	return e.ratesOf(from, to, false)
}

// ratesOf is rates, over the samples where revocable work ran if ranOnly.
func (e *effect) ratesOf(from, to time.Time, ranOnly bool) (delay, wait, p99 float64, ok bool) {
	var d, w, span time.Duration
	var p99Sum float64
	p99N := 0
	for _, s := range e.history {
		if s.when.Add(-s.span).Before(from) || s.when.After(to) || (ranOnly && !s.ran) {
			continue
		}
		d += s.delay
		w += s.wait
		span += s.span
		if s.p99 > 0 {
			p99Sum += s.p99.Seconds()
			p99N++
		}
	}
	if span <= 0 {
		return 0, 0, 0, false
	}
	if p99N > 0 {
		p99 = p99Sum / float64(p99N)
	}
	return d.Seconds() / span.Seconds(), w.Seconds() / span.Seconds(), p99, true
}

// begin starts an episode at a tightening unless one is under way, and
// notes the tightening; it reports whether it started one.
func (e *effect) begin(now time.Time) bool {
	if e.active {
		e.latest = now
		return false
	}
	// The delay and the whole wait just before: the violation may have
	// begun within the window, and calm samples would dilute it, so the
	// latest sample alone counts if it is worse.
	before, waitBefore, p99Before, ok := e.rates(now.Add(-e.window/4), now)
	if !ok {
		return false
	}
	if last := e.history[len(e.history)-1]; last.span > 0 {
		before = max(before, last.delay.Seconds()/last.span.Seconds())
		waitBefore = max(waitBefore, last.wait.Seconds()/last.span.Seconds())
		p99Before = max(p99Before, last.p99.Seconds())
	}
	e.active, e.judged, e.start, e.latest = true, false, now, now
	e.before, e.waitBefore, e.p99Before = before, waitBefore, p99Before
	return true
}

// end forgets the episode (the controller undid it).
func (e *effect) end() { e.active, e.judged = false, false }

// calm ends a judged episode; one not judged yet still is when due: calm
// may only mean that revocable work's share of the waiting fell under the
// attribution gate while guaranteed work waits as much as before.
func (e *effect) calm() {
	if e.judged {
		e.end()
	}
}

// verdict is given once per episode, EffectWindow after its start and at
// least half of one after its latest tightening (a mechanism that tightens
// step by step is judged once its last step had time to show). removed is
// the fraction of revocable work's CPU the episode took away (CPUs, or
// cores of limit): the delay it caused should fall about as much. The
// outcome is noEffect when the delay rate just before the verdict fell by
// less than MinEffect × removed from the rate before the episode, noGain
// when it did but guarded work's whole wait over the last half window (its
// run-queue p99 where the wait is not measured) did not fall by
// MinWaitGain; why describes the rates. Only samples where revocable work
// ran count; the verdict waits for enough of them (see effect), and is
// unknown when there are none by the deadline.
func (e *effect) verdict(now time.Time, removed float64) (due bool, out outcome, why string) {
	if !e.active || e.judged || now.Sub(e.start) < e.window || now.Sub(e.latest) < e.window/2 {
		return false, helped, ""
	}
	half := now.Add(-e.window / 2)
	after, _, _, ok := e.ratesOf(now.Add(-e.window/4), now, true)
	// The whole wait is noisier than the part revocable work causes: a
	// longer span, all of it after the latest tightening.
	_, waitAfter, p99After, okHalf := e.ratesOf(half, now, true)
	if !ok || e.ranShare(half, now) < minRanShare {
		if now.Sub(e.start) < verdictDeadline*e.window {
			return false, helped, ""
		}
		// Past the deadline: whatever revocable work ran shows.
		if !okHalf {
			after, waitAfter, p99After, okHalf = e.ratesOf(e.latest, now, true)
		} else if !ok {
			after = e.rateOfDelay(half, now)
		}
		if !okHalf {
			e.judged = true
			return true, unknown, fmt.Sprintf("revocable tasks used less than %s in the %s since the correction",
				formatCores(e.minUseLast), now.Sub(e.latest).Round(time.Millisecond))
		}
	}
	e.judged = true
	removed = min(max(removed, 0), 1)
	why = fmt.Sprintf("revocable tasks delayed guaranteed work %s per second before, %s per second after taking %.0f%% of their CPU",
		formatRate(e.before), formatRate(after), 100*removed)
	if e.before <= 0 || after > e.before*(1-e.minEffect*removed) {
		return true, noEffect, why
	}
	// Waiting moved elsewhere, or a violation that passed by itself, is not
	// waiting saved.
	switch {
	case e.waitBefore > 0 && waitAfter > e.waitBefore*(1-e.minWaitGain):
		return true, noGain, why + fmt.Sprintf(", but guaranteed work waited %s per second in all, against %s before (not %.0f%% less)",
			formatRate(waitAfter), formatRate(e.waitBefore), 100*e.minWaitGain)
	case e.waitBefore <= 0 && e.p99Before > 0 && p99After > e.p99Before*(1-e.minWaitGain):
		return true, noGain, why + fmt.Sprintf(", but guaranteed work's run-queue p99 was %s, against %s before (not %.0f%% less)",
			formatRate(p99After), formatRate(e.p99Before), 100*e.minWaitGain)
	}
	return true, helped, why
}

// rateOfDelay is the attributable delay per second over the samples within
// (from, to] where revocable work ran.
func (e *effect) rateOfDelay(from, to time.Time) float64 {
	d, _, _, _ := e.ratesOf(from, to, true)
	return d
}

// ranShare is the share of the time within (from, to], over its samples,
// in which revocable work ran (used at least minUse). While it stands still
// (paused, frozen, between jobs) the delay it causes and guaranteed work's
// waiting say nothing of a correction that only matters when it runs.
func (e *effect) ranShare(from, to time.Time) float64 {
	var ran, all time.Duration
	for _, s := range e.history {
		if s.when.Add(-s.span).Before(from) || s.when.After(to) {
			continue
		}
		all += s.span
		if s.ran {
			ran += s.span
		}
	}
	if all <= 0 {
		return 0
	}
	return ran.Seconds() / all.Seconds()
}

// minUse is the CPU (cores) revocable work must use for a sample to show
// what a correction does to it: minRevocableUse, or half the interference
// controller's floor where that is lower (work throttled to the floor
// still runs).
func (e *effect) minUse(nodeCPUs float64) float64 {
	use := minRevocableUse
	if floor := max(e.floorCores, e.floorFraction*nodeCPUs); floor > 0 {
		use = min(use, floor/2)
	}
	e.minUseLast = use
	return use
}

const (
	// minRevocableUse is the most CPU (cores) minUse asks for: less than
	// the interference controller's default floor (0.1 cores), more than
	// a frozen or idle subtree's.
	minRevocableUse = 0.05
	// minRanShare is the share of the verdict's half window in which
	// revocable work must have run: work that pauses now and then is
	// judged on the samples where it ran.
	minRanShare = 0.75
	// verdictDeadline is how many EffectWindows after an episode began its
	// verdict waits at most for revocable work to run.
	verdictDeadline = 3
)

// formatRate formats seconds (per second) as a duration.
func formatRate(seconds float64) string {
	return formatDuration(time.Duration(seconds * float64(time.Second)))
}
