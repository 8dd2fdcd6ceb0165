package estimator

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/slackline/slackline/resources"
)

// maxPendingEstimates bounds the estimates waiting for their horizon to be
// measured (5 s of estimates at 100 ms). When it is full the oldest is
// counted as a violation, unscored (CalibrationStats.Unresolved): an
// estimate that cannot be checked is taken to have failed, which only makes
// the calibration more careful.
const maxPendingEstimates = 50

// lastingRiseOnsets is how large (in Fast.Onsets: 0.5 cores) a rise must
// be, besides following a confirmed fall, for the pacer to take it as
// lasting (#29). Chosen on the recorded traces: at one Onset the changes
// reaching the coordinator on the mix of seven containers rise by 11%
// (273 to 303 a minute), at two by 4.7% (to 286), at three by 3.4% (to
// 282), and the slack bench's second step (the burst's partly busy
// sample leaving the confirmation window) is 0.4-1.8 cores. A lasting rise
// of at least largeFallOnsets is large (RiseLarge): the pacer sends it
// at once even when the step before it was held.
const lastingRiseOnsets = 2

// largeFallOnsets is how large (in Fast.Onsets: 1 core) a confirmed fall
// must be for every expert to take its slack as lasting at once, without
// its longer confirmation: the slack a finished burst leaves (the slack
// bench's 2 cores) is offered after the short confirmation whichever
// expert is published. Chosen on the recorded traces, never on the
// held-out ones: at 0.25-1 core diurnal harvests 75-76%, the mix 84-86%,
// and bursty 48.8%, 50.4%, 51.5% and 51.7% (fast's: less falls short of
// it); 1.5 cores changes no trace by more than 0.3 points (measured
// after the third expert kept fast's burst-start extrapolation).
const largeFallOnsets = 4

// pendingEstimate is a published estimate whose outcome is not known yet:
// it is in force from made until the next estimate (until, zero until
// then), and it is scored once every member it counted has a sample at or
// after until.
type pendingEstimate struct {
	call        int
	made, until time.Time
	// offered is the published cpus, capacity min(Σ alloc, Total).
	offered, capacity float64
	// base, scale and offer are each expert's: its raw estimate before
	// the calibration and the clamp at 0, its score's unit (scoreScale)
	// and what it would have offered (before hysteresis and pacing).
	base, scale, offer [numExperts]float64
	members            []memberKey
}

// numExperts is how many base predictions (experts) the calibrated
// estimator calibrates side by side (expertSpecs).
const numExperts = 3

// expertSpec is one base prediction: how long a fall must last before its
// slack counts (long: Fast.Confirm, fast's second, instead of
// Calibration.Confirm) and whether recurring bursts due within
// ReclaimTime are held back (rhythms). Expert 0 is fast's prediction with
// Calibration.Confirm.
type expertSpec struct {
	long, rhythms, trusted bool
}

// expertSpecs are the experts, in order of preference on a tie: fast's
// prediction with the short confirmation, then with the long one, then
// the short one with each member's rhythms followed only while they come
// true (rhythmTrusted; the need, burst starts included, is fast's). Fast's rhythm prediction holds back a burst due on
// a lattice of three past onsets; on a load whose onsets are memoryless
// (bursty: exponential gaps) such lattices appear by chance and hold back
// slack for nothing, and the experts without it lose less there (#29).
var expertSpecs = [numExperts]expertSpec{{rhythms: true}, {long: true, rhythms: true}, {rhythms: true, trusted: true}}

// expertMemory is the time constant, in estimates, of the discounted loss
// by which the experts are compared (100 s at 100 ms). Chosen on the
// recorded traces only (among 3-300 s), never on the held-out ones.
const expertMemory = 1000

// expert is one base prediction's calibration: its own window of
// conformity scores (its level is unused: every expert's margin is taken at
// the one shared level α_t) and its discounted pinball loss.
type expert struct {
	scores *Calibration
	loss   float64
}

// calibratedEstimator is the default estimator "calibrated": fast's
// prediction with a margin that adaptive conformal inference keeps at the
// target violation rate (doc.go). Its state is fast's, the Calibration, the
// pending estimates and the last explanation, all functions of the inputs
// seen.
type calibratedEstimator struct {
	fast      *fastEstimator
	cfg       Config
	cal       *Calibration
	published resources.Resources
	pending   []pendingEstimate
	calls     int
	// maxDelay is the most estimates an outcome took to be known (D in the
	// bound), unresolved the estimates counted as violations unscored.
	maxDelay, unresolved int
	// predicted holds this call's predictions by member index (reused).
	predicted [][numExperts]float64
	// experts are the base predictions (expertSpecs), confirms their
	// confirmations, chosen the expert published.
	experts   [numExperts]expert
	confirms  [numExperts]time.Duration
	chosen    int
	explained Explanation
	// memberScratch is where explain builds the members' explanations
	// before it copies them (or shares the last estimate's, equal).
	memberScratch []MemberExplanation
	pacer         *Pacer
	// freeKeys are resolved pending estimates' member keys, for reuse (at
	// most maxFreeKeys).
	freeKeys [][]memberKey
}

// maxFreeKeys bounds calibratedEstimator.freeKeys: estimates resolve a
// few at a time.
const maxFreeKeys = 8

func newCalibrated(cfg Config) (Estimator, error) {
	short, long := cfg.Calibration.Confirm, max(cfg.Fast.Confirm, cfg.Calibration.Confirm)
	cfg.Fast.Confirm = cfg.Calibration.Confirm
	f, err := newFast(cfg)
	cal, calErr := NewCalibration(cfg.Calibration)
	pacer, paceErr := NewPacer(cfg.RiseInterval)
	if err := errors.Join(err, calErr, paceErr); err != nil {
		return nil, err
	}
	fast := f.(*fastEstimator)
	c := &calibratedEstimator{
		fast: fast, cfg: fast.cfg, cal: cal, pacer: pacer,
	}
	for i, spec := range expertSpecs {
		c.experts[i].scores, _ = NewCalibration(cfg.Calibration)
		c.confirms[i] = short
		if spec.long {
			c.confirms[i] = long
		}
	}
	return c, nil
}

// Estimate implements Estimator.
func (c *calibratedEstimator) Estimate(in Input) resources.Resources {
	c.calls++
	members := membersInto(c.fast.members[:0], in, c.cfg.Window)
	// Each member's state (its window, its rhythm record), the state of
	// members gone dropped.
	c.fast.track(members)
	if n := len(c.pending); n > 0 && c.pending[n-1].until.IsZero() {
		c.pending[n-1].until = in.Now
	}
	c.resolve()

	// predicted[i] is members[i]'s (zero for a member not predicted).
	c.predicted = slices.Grow(c.predicted[:0], len(members))[:len(members)]
	clear(c.predicted)
	// A sample is within a confirmation d of now when it is after now − d.
	var since [numExperts]time.Time
	for e, d := range c.confirms {
		since[e] = in.Now.Add(-d)
	}
	sinceLongest := in.Now.Add(-slices.Max(c.confirms[:]))
	lasting := false
	// retireLong is set when a member's large fall (largeFallOnsets) has
	// held for the short confirmation within the long one: the experts
	// with the long confirmation are not published (pick).
	retireLong := false
	raw := c.fast.raw(in, members, func(m member, now time.Time) float64 {
		// need is fast's (the peak, or a burst's start extrapolated), due
		// the burst held back on a rhythm; an expert that does not follow
		// the member's rhythms takes need alone. The peaks are walked once
		// for the three (#29).
		peak, before := c.fast.peaks(m, now)
		need, due := c.fast.predictFrom(m, now, peak, before)
		p := need + due
		trusted := c.rhythmTrusted(m, now, due)
		fell := c.fast.fellFrom(peak, before)
		large := c.cfg.Fast.Onset > 0 && before-peak >= largeFallOnsets*c.cfg.Fast.Onset
		// within[e] is the peak over expert e's confirmation, from one
		// walk back over the longest (0 without samples in it; every
		// prediction is at least 0, so it raises none that way).
		var within [numExperts]float64
		for i := len(m.window) - 1; !large && i >= 0 && m.window[i].Time.After(sinceLongest); i-- {
			for e := range within {
				if m.window[i].Time.After(since[e]) {
					within[e] = max(within[e], m.window[i].CPU)
				}
			}
		}
		var pred [numExperts]float64
		for e, spec := range expertSpecs {
			pred[e] = need
			if spec.rhythms && (!spec.trusted || trusted) {
				pred[e] = p
			}
			// A large confirmed fall (largeFallOnsets, held for the short
			// confirmation) is lasting for every expert: its slack is not
			// held for a longer confirmation (#29's slack -> offer pacing).
			if !large {
				pred[e] = max(pred[e], within[e])
			}
			if spec.long && (large || c.cfg.Fast.Onset > 0 && within[e]-peak >= largeFallOnsets*c.cfg.Fast.Onset) {
				retireLong = true
			}
		}
		c.predicted[m.index] = pred
		lasting = lasting || fell
		return p
	})
	ex := c.explain(in, members, retireLong)
	out := resources.New(ex.Calibrated, raw.Mem(), 0).With(resources.Bandwidth, raw.Bandwidth())
	rise := RiseNoisy
	if up := out.CPUs() - c.published.CPUs(); lasting && up >= largeFallOnsets*c.cfg.Fast.Onset {
		rise = RiseLarge
	} else if lasting && up >= lastingRiseOnsets*c.cfg.Fast.Onset {
		rise = RiseLasting
	}
	if paced, ok := c.pacer.Next(in.Now, c.cfg.Hysteresis.Apply(c.published, out), rise); ok {
		c.published = paced
	}
	ex.CPUs = c.published.CPUs()
	ex.Calibration.RisesHeld = c.pacer.Deferred()
	c.explained = ex

	if len(c.pending) == maxPendingEstimates {
		c.maxDelay = max(c.maxDelay, c.calls-c.pending[0].call)
		c.pending = c.pending[1:]
		c.unresolved++
		c.cal.Observe(1, math.NaN())
	}
	// The keys of a resolved estimate's members are reused (#29).
	var keys []memberKey
	if n := len(c.freeKeys); n > 0 {
		keys, c.freeKeys = c.freeKeys[n-1][:0], c.freeKeys[:n-1]
	}
	for _, m := range members {
		keys = append(keys, m.key)
	}
	c.pending = append(c.pending, pendingEstimate{
		call: c.calls, made: in.Now, offered: ex.CPUs, capacity: ex.Capacity,
		base: ex.bases, scale: ex.scales, offer: ex.offers, members: keys,
	})
	clear(members)
	c.fast.members = members[:0]
	return c.published
}

// resolve scores the pending estimates whose horizon every member's samples
// now cover, oldest first, and feeds them to the calibration.
func (c *calibratedEstimator) resolve() {
	done := 0
	for _, p := range c.pending {
		usage, ok := c.horizonUsage(p)
		if !ok {
			break
		}
		real := max(0, p.capacity-usage)
		tol := c.cfg.Calibration.Tolerance
		violated := 0.0
		if p.offered-real > tol {
			violated = 1
		}
		// The level follows what was published; each expert's window takes
		// its own score, and its loss what it would have offered.
		c.cal.Observe(violated, math.NaN())
		alpha := c.cfg.Calibration.TargetViolation
		for i := range c.experts {
			e := &c.experts[i]
			e.scores.AddScore((p.base[i] - real - tol) / p.scale[i])
			e.loss = e.loss*(1-1.0/expertMemory) + pinball(real+tol-p.offer[i], alpha)
		}
		c.maxDelay = max(c.maxDelay, c.calls-p.call)
		done++
	}
	if done > 0 {
		for _, p := range c.pending[:done] {
			if len(c.freeKeys) < maxFreeKeys {
				c.freeKeys = append(c.freeKeys, p.members)
			}
		}
		c.pending = append(c.pending[:0], c.pending[done:]...)
	}
}

// horizonUsage returns the guaranteed use over p's horizon (made, until]:
// the sum of each member's peak in it (with one sample per horizon, the
// backtest's usage at that sample). A member whose samples do not reach
// until yet makes it not known (false). A member gone since, or with no
// sample left in its window, counts for nothing: its allocation is free.
// A member with no sample inside the horizon counts with its first sample
// after it.
func (c *calibratedEstimator) horizonUsage(p pendingEstimate) (float64, bool) {
	if p.until.IsZero() {
		return 0, false
	}
	usage := 0.0
	for _, key := range p.members {
		st := c.fast.present(key)
		if st == nil || len(st.window) == 0 {
			continue
		}
		w := st.window
		if w[len(w)-1].Time.Before(p.until) {
			return 0, false
		}
		peak, after := -1.0, -1.0
		for i := len(w) - 1; i >= 0 && w[i].Time.After(p.made); i-- {
			if w[i].Time.After(p.until) {
				after = w[i].CPU
				continue
			}
			peak = max(peak, w[i].CPU)
		}
		if peak < 0 {
			peak = after
		}
		usage += max(0, peak)
	}
	return usage, true
}

// explain breaks this call's estimate down per member and applies the
// calibration: Calibrated is the estimate before hysteresis. retireLong
// keeps the experts with the long confirmation from being published.
func (c *calibratedEstimator) explain(in Input, members []member, retireLong bool) Explanation {
	_, paused := c.cal.Margin()
	ex := Explanation{
		Now: in.Now, Estimator: "calibrated",
		Calibration: CalibrationStats{
			Target: c.cfg.Calibration.TargetViolation, Alpha: c.cal.Alpha(), Paused: paused,
			Resolved: c.cal.Resolved(), Violations: c.cal.Violations(),
			MaxDelay: c.maxDelay, Unresolved: c.unresolved, Gamma: c.cfg.Calibration.Gamma,
		},
		Members: c.memberScratch[:0],
	}
	var alloc, giveBack float64
	var extra [numExperts]float64
	for _, m := range members {
		e := MemberExplanation{ID: m.container.ID, Protected: m.protected, Allocated: m.container.Allocated.CPUs()}
		if len(m.window) >= c.cfg.MinSamples {
			if m.protected && e.Allocated == 0 {
				e.Allocated = cpuPeak(m.window)
			}
			e.PredictedPeak = c.predicted[m.index][0]
			for i, p := range c.predicted[m.index] {
				extra[i] += p - e.PredictedPeak
			}
			e.Margin = c.cfg.Margin * e.Allocated
			giveBack += e.Margin
		} else {
			e.WarmingUp = true
			e.PredictedPeak = e.Allocated
		}
		alloc += e.Allocated
		ex.need += e.PredictedPeak + e.Margin
		ex.Members = append(ex.Members, e)
	}
	ex.Capacity = alloc
	if total := in.Total.CPUs(); total > 0 && total < alloc {
		ex.Capacity, ex.TotalBound = total, true
	}
	// Each expert's margin is relative (a share of its estimate,
	// scoreScale) and taken at the shared level α_t from its own scores;
	// what the calibration may give back is bounded by fast's own margins:
	// the predicted peaks are always held back. The expert with the least
	// discounted loss is published, but for the long ones after a large
	// fall.
	c.chosen = c.pick(retireLong)
	ex.Expert = c.chosen
	var added float64
	for i, e := range c.experts {
		base := ex.Capacity - ex.need - extra[i]
		ex.bases[i], ex.scales[i] = base, scoreScale(base)
		q, _ := e.scores.MarginAt(c.cal.Alpha())
		a := max(q*ex.scales[i], -giveBack)
		ex.offers[i] = max(0, base-a)
		if paused {
			ex.offers[i] = 0
		}
		if i == c.chosen {
			added = a
		}
	}
	for i := range ex.Members {
		if m := &ex.Members[i]; !m.WarmingUp {
			m.PredictedPeak = c.predicted[i][c.chosen]
		}
	}
	ex.need += extra[c.chosen]
	if expertSpecs[c.chosen].long {
		ex.heldFor = c.confirms[c.chosen]
	}
	ex.Uncalibrated = max(0, ex.Capacity-ex.need)
	if paused {
		added = ex.Capacity - ex.need
	}
	ex.Calibration.Margin = added
	ex.Calibrated = max(0, ex.Capacity-ex.need-added)
	if paused {
		ex.Calibrated = 0
	}
	for i := range ex.Members {
		e := &ex.Members[i]
		if alloc > 0 && !math.IsInf(added, 0) {
			e.Calibration = added * e.Allocated / alloc
		}
		e.Need = e.PredictedPeak + e.Margin + e.Calibration
	}
	// Members are handed out and never written again: the scratch's are
	// copied, unless they equal the last estimate's, which are shared
	// instead (an idle node's are the same estimate after estimate).
	c.memberScratch = ex.Members
	if len(ex.Members) > 0 && sameMembers(ex.Members, c.explained.Members) {
		ex.Members = c.explained.Members
	} else {
		ex.Members = append(make([]MemberExplanation, 0, len(ex.Members)), ex.Members...)
	}
	ex.Limiting = limitingOf(ex)
	return ex
}

// sameMembers reports whether a and b are the same explanations, their
// figures equal to the bit.
func sameMembers(a, b []MemberExplanation) bool {
	if len(a) != len(b) {
		return false
	}
	same := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
	for i := range a {
		x, y := &a[i], &b[i]
		if x.ID != y.ID || x.Protected != y.Protected || x.WarmingUp != y.WarmingUp || !same(x.Allocated, y.Allocated) ||
			!same(x.PredictedPeak, y.PredictedPeak) || !same(x.Margin, y.Margin) || !same(x.Calibration, y.Calibration) || !same(x.Need, y.Need) {
			return false
		}
	}
	return true
}

// limitingOf names the member holding back the most cpus ("" when there is
// none, or the calibration is paused), the first on a tie.
func limitingOf(ex Explanation) string {
	if best := mostHeldBack(ex); best >= 0 && !ex.Calibration.Paused {
		return ex.Members[best].ID
	}
	return ""
}

// mostHeldBack returns the index of the member with the largest need, the
// first on a tie; -1 without members.
func mostHeldBack(ex Explanation) int {
	best := -1
	for i, e := range ex.Members {
		if best < 0 || e.Need > ex.Members[best].Need {
			best = i
		}
	}
	return best
}

// Reason says in a sentence what holds the estimate down and why, for an
// operator asking why the slack is what it is. It is written when asked
// (GetEstimate), not at every estimate: formatting it cost a twentieth of
// the agent's CPU at 100 ms estimates (#29).
func (ex Explanation) Reason() string {
	switch {
	case len(ex.Members) == 0:
		return "no guaranteed containers or protected services: no allocation to oversubscribe"
	case ex.Calibration.Paused:
		return fmt.Sprintf("calibration paused: recent offers exceeded the real slack more often than the %.2g%% target (level %.4f ≤ 0); nothing is offered until enough estimates pass without violation",
			100*ex.Calibration.Target, ex.Calibration.Alpha)
	}
	e := ex.Members[mostHeldBack(ex)]
	var reason string
	if e.WarmingUp {
		reason = fmt.Sprintf("%s has too few samples yet: its whole allocation (%.2f cpus) is held back", e.ID, e.Allocated)
	} else {
		reason = fmt.Sprintf("%s holds back %.2f of its %.2f cpus: predicted peak %.2f + margin %.2f + calibration %+.2f",
			e.ID, e.Need, e.Allocated, e.PredictedPeak, e.Margin, e.Calibration)
		if ex.heldFor > 0 {
			reason += fmt.Sprintf(" (peaks held for %v: slack that lasted less was recently taken back)", ex.heldFor)
		}
	}
	if ex.TotalBound {
		reason += fmt.Sprintf("; the node's total (%.2f cpus) is below the guaranteed allocations", ex.Capacity)
	}
	return reason
}

// Explain implements Explainer: how the last estimate was made. Its
// Members are shared with the estimator, which never writes them again
// (each estimate makes new ones): the agent asks at every estimate, and a
// copy of 100 members cost as much as a tenth of the estimate (#29).
func (c *calibratedEstimator) Explain() Explanation { return c.explained }

// ExplainMemory implements MemoryExplainer: fast's account, whose memory
// estimate the calibrated one publishes (the calibration is of cpus).
func (c *calibratedEstimator) ExplainMemory() MemoryAccount { return c.fast.memory }

// Explainer is implemented by estimators that can say how their last
// estimate was made (the calibrated one). Like Estimate, Explain is called
// from the estimator's goroutine. The Explanation's Members must not be
// modified (they may be shared with the estimator and with earlier
// callers); they are safe to read from any goroutine.
type Explainer interface {
	Explain() Explanation
}

// Explanation is the breakdown of one estimate (cpus), for GetEstimate and
// `slacklinectl get estimate`.
type Explanation struct {
	// Now is the estimate's time, Estimator its name.
	Now       time.Time
	Estimator string
	// CPUs is the published estimate; Calibrated the estimate before
	// hysteresis; Uncalibrated the published expert's estimate before the
	// calibration (fast's prediction with the short confirmation, with the
	// peak of the last second, or with rhythms followed only where they
	// came true: doc.go, "Experts").
	CPUs, Calibrated, Uncalibrated float64
	// Capacity is min(Σ allocations, the node's total cpus); TotalBound is
	// set when the total is the smaller.
	Capacity   float64
	TotalBound bool
	// Members are the guaranteed containers and protected services.
	Members []MemberExplanation
	// Limiting is the member holding back the most cpus ("" when nothing
	// is, or the calibration is paused); the method Reason says why, in a
	// sentence.
	Limiting string
	// Calibration is the state of the online calibration.
	Calibration CalibrationStats
	// Expert is the published expert's index in expertSpecs (doc.go,
	// "Experts"): 0 fast's prediction, 1 with the last second's peak
	// held, 2 with rhythms followed only where they came true.
	Expert int
	// need is Σ predicted peak + margin (before the calibration) of the
	// published expert; bases, scales and offers are each expert's raw
	// estimate, score unit (scoreScale) and calibrated estimate.
	need                  float64
	bases, scales, offers [numExperts]float64
	// heldFor is the published expert's longer confirmation (0 for the
	// experts with the short one), for the reason.
	heldFor time.Duration
}

// pick returns the expert with the least discounted loss, the short one on
// a tie; with retireLong, among the experts with the short confirmation
// only. After a large fall that has held for the short confirmation
// (largeFallOnsets), an expert held to the peak of the last second would
// keep the slack back for the rest of that second (its own prediction
// exempts such a fall only while the confirmation before the last holds
// the load: a fall in steps, or from a load that sagged before it ended,
// is never exempt), or offer it and take it back: the slack bench's slow
// trials (#29). Which expert is published does not touch the guarantee
// (doc.go, "Experts"): the level follows whatever was published, and
// every expert's scores and loss are kept as before.
func (c *calibratedEstimator) pick(retireLong bool) int {
	best := -1
	for i, e := range c.experts {
		if retireLong && expertSpecs[i].long {
			continue
		}
		if best < 0 || e.loss < c.experts[best].loss {
			best = i
		}
	}
	return best
}

// pinball is the quantile (pinball) loss at level alpha of an offer that
// left u cpus of the real slack (plus tolerance) unoffered: alpha·u when u
// ≥ 0, (1 − alpha)·(−u) when the offer exceeded it. Its expectation is
// least for the offer at the alpha-quantile of the real slack: the largest
// offer that violates a share alpha of the time.
func pinball(u, alpha float64) float64 {
	if u >= 0 {
		return alpha * u
	}
	return (alpha - 1) * u
}

// minScoreScale is the least unit of a score, in cpus: fast's estimates
// below it are scored as if they were this large, so that a score stays
// finite when fast offers (almost) nothing.
const minScoreScale = 0.1

// scoreScale returns the unit of an estimate's conformity score: fast's
// uncalibrated estimate b, at least minScoreScale. The score of an estimate
// is s = (b − r − tolerance)/scoreScale(b), r the real slack over its
// horizon, and a margin q takes q·scoreScale(b) cpus off b: it violates
// exactly when s > q. The margin is thus a share of what fast would offer
// (multiplicative), not a fixed number of cpus: a large estimate is cut by
// more than a small one, where an additive margin, set by the largest
// misses, would take the whole of the small slack left in busy periods.
func scoreScale(base float64) float64 {
	return max(base, minScoreScale)
}

// MemberExplanation is one guaranteed container's (or protected service's)
// part in an estimate, in cpus: it is taken to need PredictedPeak + Margin +
// Calibration of its Allocated, and the rest is slack.
type MemberExplanation struct {
	ID        string
	Protected bool
	Allocated float64
	// PredictedPeak is fast's prediction (its whole allocation while
	// WarmingUp: fewer than MinSamples samples).
	PredictedPeak float64
	// Margin is the fixed safety margin (Fast.Margin × Allocated).
	Margin float64
	// Calibration is the member's share (by allocation) of what the
	// calibration added; negative when it gave margin back.
	Calibration float64
	// Need is PredictedPeak + Margin + Calibration.
	Need      float64
	WarmingUp bool
}

// CalibrationStats is the calibration's state as an operator sees it.
type CalibrationStats struct {
	// Target is α, Alpha α_t, Gamma γ.
	Target, Alpha, Gamma float64
	// Margin is what the calibration added to the need, in cpus (negative:
	// it gave part of fast's margin back).
	Margin float64
	// Paused is set when α_t ≤ 0: nothing is offered.
	Paused bool
	// Resolved is how many estimates have been scored, Violations how many
	// of them violated (a sum of shares).
	Resolved   int
	Violations float64
	// MaxDelay is the most estimates an outcome took to be known (d in
	// ViolationBound), Unresolved how many were counted as violations because their
	// horizon was never measured.
	MaxDelay, Unresolved int
	// RisesHeld counts estimates whose rise the pacer held back
	// (Config.RiseInterval).
	RisesHeld int
}

// ViolationRate returns Violations / Resolved (0 before any).
func (s CalibrationStats) ViolationRate() float64 {
	if s.Resolved == 0 {
		return 0
	}
	return s.Violations / float64(s.Resolved)
}

// Bound returns the finite-sample bound on ViolationRate after Resolved
// estimates, ViolationBound(Target, Gamma, Resolved, MaxDelay); +Inf before
// any estimate is scored.
func (s CalibrationStats) Bound() float64 {
	return ViolationBound(s.Target, s.Gamma, s.Resolved, s.MaxDelay)
}

// ViolationBound is the calibration's guarantee (doc.go derives it): over
// the first t estimates whose outcome is known, each known at most d
// estimates after it was made (d ≥ 1: the next estimate at the earliest),
// starting at α_1 = α, the share that violated is at most
//
//	α + (α + dγ)/(γt),
//
// whatever the usage was. It is +Inf when t is 0.
func ViolationBound(alpha, gamma float64, t, d int) float64 {
	if t <= 0 {
		return math.Inf(1)
	}
	return alpha + (alpha+float64(max(d, 1))*gamma)/(gamma*float64(t))
}

// WindowViolationBound bounds the violations in ANY run of n consecutive
// scored estimates (not only from the start): at most
//
//	α + (α_max + dγ)/(γn)
//
// of them, with α_max = min(1, 10α) the ceiling of α_t. It is what makes
// the rate come back to the target after a change of regime. +Inf when n
// is 0.
func WindowViolationBound(alpha, gamma float64, n, d int) float64 {
	if n <= 0 {
		return math.Inf(1)
	}
	return alpha + (min(1, levelCeilingFactor*alpha)+float64(max(d, 1))*gamma)/(gamma*float64(n))
}

// rhythmOutcomes is how many of a member's latest rhythm predictions
// decide whether its rhythms are trusted, rhythmMinOutcomes how many it
// takes before they can be distrusted, and rhythmMinHits how many of the
// latest must have come true.
const (
	rhythmOutcomes    = 8
	rhythmMinOutcomes = 4
	rhythmMinHits     = 4
)

// rhythmRecord is one member's record of its rhythm predictions: since is
// when the current one began (zero when no burst is due), outcomes the
// latest rhythmOutcomes outcomes, newest in bit 0 (1: a burst did start),
// n how many are recorded (at most rhythmOutcomes).
type rhythmRecord struct {
	since    time.Time
	outcomes uint8
	n        int
}

// rhythmTrusted records whether a burst is due for m (due > 0) and
// returns whether m's rhythm predictions are trusted: a prediction lasts
// while a burst is due, and it came true if one of m's onsets falls in it
// (from OnsetJitter before it began). Until rhythmMinOutcomes predictions
// are known they are trusted, then while at least rhythmMinHits of the
// latest rhythmOutcomes came true.
func (c *calibratedEstimator) rhythmTrusted(m member, now time.Time, due float64) bool {
	r := &m.state.rhythm
	switch {
	case due > 0 && r.since.IsZero():
		r.since = now
	case due == 0 && !r.since.IsZero():
		hit := uint8(0)
		if h := &m.state.bursts; len(h.onsets) > 0 &&
			!h.onsets[len(h.onsets)-1].at.Before(r.since.Add(-c.cfg.Fast.OnsetJitter)) {
			hit = 1
		}
		r.outcomes = r.outcomes<<1 | hit
		r.n = min(r.n+1, rhythmOutcomes)
		r.since = time.Time{}
	}
	if r.n < rhythmMinOutcomes {
		return true
	}
	return bits.OnesCount8(r.outcomes) >= rhythmMinHits
}
