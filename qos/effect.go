package qos

import (
	"fmt"
	"time"
)

// effect judges a controller's corrections by what they change in the delay
// revocable containers cause guaranteed and protected work (eBPF
// who-delayed-whom, Container.DelayedBy): "never worse than nothing". An
// episode starts with a controller's first tightening after calm; once
// EffectWindow has passed, the delay rate since then is compared with the
// rate just before (the last quarter of an EffectWindow: the violation may
// have begun within the window). A correction that did not cut it by at
// least MinEffect of what it took from revocable work did not help, and the
// controller undoes it; so did one after which guaranteed work waited more
// in all (Container.RunqWait, when measured), whoever made it wait.
//
// Without attribution (no eBPF: every DelayedBy nil) nothing can be judged,
// and neither can it when attribution is turned off (MinAttributedDelay 0):
// corrections then stand, as before.
type effect struct {
	window    time.Duration
	minEffect float64

	history []delaySample // the last 2 × window of evaluations, oldest first
	last    time.Time     // the previous evaluation

	active     bool      // an episode is being judged
	judged     bool      // ... and its verdict was given
	start      time.Time // its first correction
	latest     time.Time // its latest correction
	before     float64   // delay rate (seconds per second) just before it
	waitBefore float64   // guarded work's whole wait rate then (0: unknown)
}

// delaySample is one evaluation's attributable delay: delay caused during
// the span (at-span, at].
type delaySample struct {
	when  time.Time
	span  time.Duration
	delay time.Duration
	wait  time.Duration // all the run-queue wait of guarded work (0: unknown)
}

func newEffect(window time.Duration, minEffect float64) effect {
	return effect{window: window, minEffect: minEffect}
}

// observe records the delay revocable containers caused guarded work since
// the previous evaluation; it reports whether attribution is available.
func (e *effect) observe(in Input) bool {
	var delay, wait time.Duration
	attributed := false
	for i := range in.Containers {
		ct := &in.Containers[i]
		if !ct.guarded() || ct.DelayedBy == nil {
			continue
		}
		attributed = true
		for _, d := range ct.DelayedBy {
			delay += d
		}
		wait += ct.RunqWait
	}
	defer func() { e.last = in.Now }()
	if !attributed || e.last.IsZero() || !in.Now.After(e.last) {
		return attributed
	}
	e.history = append(e.history, delaySample{when: in.Now, span: in.Now.Sub(e.last), delay: delay, wait: wait})
	drop := 0
	for drop < len(e.history) && in.Now.Sub(e.history[drop].when) > 2*e.window {
		drop++
	}
	e.history = e.history[drop:]
	return true
}

// rates is the attributable delay per second over the samples whose
// interval lies within (from, to], and guarded work's whole run-queue wait
// per second (0 when not measured).
func (e *effect) rates(from, to time.Time) (delay, wait float64, ok bool) {
	var d, w, span time.Duration
	for _, s := range e.history {
		if s.when.Add(-s.span).Before(from) || s.when.After(to) {
			continue
		}
		d += s.delay
		w += s.wait
		span += s.span
	}
	if span <= 0 {
		return 0, 0, false
	}
	return d.Seconds() / span.Seconds(), w.Seconds() / span.Seconds(), true
}

// begin starts an episode at a tightening unless one is under way, and
// notes the tightening; it reports whether it started one.
func (e *effect) begin(now time.Time) bool {
	if e.active {
		e.latest = now
		return false
	}
	// The delay just before: the violation may have begun within the
	// window, and calm samples would dilute it, so the latest sample alone
	// counts if it is worse.
	before, waitBefore, ok := e.rates(now.Add(-e.window/4), now)
	if !ok {
		return false
	}
	if last := e.history[len(e.history)-1]; last.span > 0 {
		before = max(before, last.delay.Seconds()/last.span.Seconds())
	}
	e.active, e.judged, e.start, e.latest, e.before, e.waitBefore = true, false, now, now, before, waitBefore
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
// cores of limit): the delay it caused should fall about as much. failed
// reports that the delay rate just before the verdict fell by less than
// MinEffect × removed from the rate before the episode; why describes the
// rates.
func (e *effect) verdict(now time.Time, removed float64) (due, failed bool, why string) {
	if !e.active || e.judged || now.Sub(e.start) < e.window || now.Sub(e.latest) < e.window/2 {
		return false, false, ""
	}
	after, waitAfter, ok := e.rates(now.Add(-e.window/4), now)
	if !ok {
		return false, false, ""
	}
	e.judged = true
	removed = min(max(removed, 0), 1)
	failed = e.before <= 0 || after > e.before*(1-e.minEffect*removed)
	why = fmt.Sprintf("revocable tasks delayed guaranteed work %s per second before, %s per second after taking %.0f%% of their CPU",
		formatDuration(time.Duration(e.before*float64(time.Second))), formatDuration(time.Duration(after*float64(time.Second))), 100*removed)
	// Waiting moved elsewhere is not waiting saved: with revocable work
	// confined, a server's threads may crowd the CPUs left to them.
	if e.waitBefore > 0 && waitAfter > e.waitBefore*(1+maxWaitGrowth) {
		failed = true
		why += fmt.Sprintf(", but guaranteed work waited %s per second in all, up from %s",
			formatDuration(time.Duration(waitAfter*float64(time.Second))), formatDuration(time.Duration(e.waitBefore*float64(time.Second))))
	}
	return true, failed, why
}

// maxWaitGrowth is how much more guaranteed work may wait in all, after a
// correction, before the correction counts as not having helped, whatever
// it did to the part revocable work causes.
const maxWaitGrowth = 0.1
