package shadow

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/qos"
)

const (
	// MaxShadows bounds the candidate settings an agent runs in shadow.
	MaxShadows = 2
	// MaxEstimates bounds the estimates a Scorer keeps to score samples
	// that arrive after later estimates were made (5 s at 100 ms; the
	// agent's samples arrive within one or two estimates).
	MaxEstimates = 50
	// DefaultTolerance is the excess over the real slack, in cores, below
	// which an over-offer is no violation: the backtest's and the
	// calibration's.
	DefaultTolerance = 0.05
	// ActiveName names the agent's active settings in reports and
	// metrics; no shadow may take it.
	ActiveName = "active"
)

// CheckName returns an error unless name may name a shadow: 1-32 of
// [a-z0-9-], starting with a letter, and not ActiveName.
func CheckName(name string) error {
	if name == "" || len(name) > 32 {
		return fmt.Errorf("shadow name %q: want 1-32 characters", name)
	}
	if name == ActiveName {
		return fmt.Errorf("shadow name %q is reserved for the active settings", name)
	}
	if name[0] < 'a' || name[0] > 'z' {
		return fmt.Errorf("shadow name %q: must start with a lower-case letter", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("shadow name %q: only a-z, 0-9 and '-' allowed", name)
		}
	}
	return nil
}

// estimateAt is an estimate and when it was made.
type estimateAt struct {
	made    time.Time
	offered float64
}

// Scorer scores a sequence of estimates against the samples that follow
// them, as the backtest does (doc.go). The zero Scorer uses
// DefaultTolerance. It is not safe for concurrent use.
type Scorer struct {
	// Tolerance overrides DefaultTolerance when positive.
	Tolerance float64

	estimates []estimateAt // the latest MaxEstimates, oldest first
	dropped   bool         // estimates were dropped from the front
	// through is the latest sample time scored or skipped.
	through time.Time

	estimateCount, shrinks        int
	firstEstimate, lastEstimate   time.Time
	samples, violations, unscored int
	sumIdeal, sumOffered, sumSafe float64
	maxExcess                     float64

	times []time.Time // scratch
}

// Observe scores the samples of in not scored yet against the estimates
// in force at their times, then records offered (cpus) as the estimate
// made at in.Now. Call it with every input an estimator is given, in
// order, and that estimator's result.
func (s *Scorer) Observe(in estimator.Input, offered float64) {
	s.score(in)
	if n := len(s.estimates); n > 0 {
		if offered < s.estimates[n-1].offered {
			s.shrinks++
		}
	} else if s.estimateCount == 0 {
		s.firstEstimate = in.Now
	}
	if len(s.estimates) == MaxEstimates {
		s.estimates = append(s.estimates[:0], s.estimates[1:]...)
		s.dropped = true
	}
	s.estimates = append(s.estimates, estimateAt{made: in.Now, offered: offered})
	s.estimateCount++
	s.lastEstimate = in.Now
}

// members calls fn for the guaranteed containers, then the protected
// services, of in, in order.
func members(in estimator.Input, fn func(c *estimator.Container)) {
	for i := range in.Containers {
		if !in.Containers[i].Revocable {
			fn(&in.Containers[i])
		}
	}
	for i := range in.Protected {
		fn(&in.Protected[i])
	}
}

// score scores the complete sample times of in after s.through.
func (s *Scorer) score(in estimator.Input) {
	// complete: the earliest of the members' latest samples; later times
	// wait for the members that have not reached them.
	var complete time.Time
	members(in, func(c *estimator.Container) {
		if n := len(c.History); n > 0 && (complete.IsZero() || c.History[n-1].Time.Before(complete)) {
			complete = c.History[n-1].Time
		}
	})
	if complete.IsZero() || !complete.After(s.through) {
		return
	}
	times := s.times[:0]
	members(in, func(c *estimator.Container) {
		for i := len(c.History) - 1; i >= 0 && c.History[i].Time.After(s.through); i-- {
			if t := c.History[i].Time; !t.After(complete) {
				times = append(times, t)
			}
		}
	})
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	times = slices.CompactFunc(times, time.Time.Equal)
	total := in.Total.CPUs()
	tolerance := s.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	for _, t := range times {
		offered, ok := s.inForce(t)
		if !ok {
			continue
		}
		alloc, usage := 0.0, 0.0
		members(in, func(c *estimator.Container) {
			h := c.History
			i := sort.Search(len(h), func(i int) bool { return !h[i].Time.Before(t) })
			if i < len(h) && h[i].Time.Equal(t) {
				alloc += c.Allocated.CPUs()
				usage += h[i].CPU
			}
		})
		capacity := alloc
		if total > 0 {
			capacity = min(alloc, total)
		}
		ideal := max(0, capacity-usage)
		excess := offered - ideal
		s.samples++
		s.sumIdeal += ideal
		s.sumOffered += offered
		s.sumSafe += min(offered, ideal)
		if excess > 0 {
			s.maxExcess = max(s.maxExcess, excess)
		}
		if excess > tolerance {
			s.violations++
		}
	}
	s.through = complete
	s.times = times[:0]
}

// inForce returns the latest estimate made strictly before t; false when
// there is none (before the first estimate, not counted, or dropped:
// counted as unscored).
func (s *Scorer) inForce(t time.Time) (float64, bool) {
	for i := len(s.estimates) - 1; i >= 0; i-- {
		if s.estimates[i].made.Before(t) {
			return s.estimates[i].offered, true
		}
	}
	if s.dropped {
		s.unscored++
	}
	return 0, false
}

// Report is what a Scorer and a QoS count say about one set of settings.
// The estimate fields follow estimator/backtest.Result (cpus, over the
// scored samples).
type Report struct {
	// Name is the shadow's name, or ActiveName.
	Name string
	// Estimator names the estimator; QoSControllers the QoS controllers.
	Estimator      string
	QoSControllers []string
	// Settings are the candidate's settings as given (flag name: value),
	// sorted by name; empty for the active settings.
	Settings []Setting

	// Latest is the latest estimate (cpus); Estimates how many were made,
	// Shrinks how many were below the one before, from FirstEstimate to
	// LastEstimate.
	Latest                      float64
	Estimates, Shrinks          int
	FirstEstimate, LastEstimate time.Time
	// Samples were scored, Violations of them exceeded the real slack by
	// more than the tolerance; Unscored arrived after the estimate in force
	// at their time was dropped.
	Samples, Violations, Unscored int
	MeanIdeal, MeanOffered        float64
	Harvest, SafeHarvest          float64
	ViolationRate, MaxExcess      float64

	// Corrections counts the QoS corrections asked for by kind
	// (qos.Kind.String()), over Evaluations evaluations from FirstEvaluation
	// to LastEvaluation.
	Corrections                     map[string]int
	Evaluations                     int
	FirstEvaluation, LastEvaluation time.Time
}

// Setting is one flag of a candidate's settings file.
type Setting struct{ Flag, Value string }

// CorrectionsPerHour is the corrections of every kind per hour of logical
// time between the first and latest evaluation (0 before an hour's
// fraction has passed).
func (r Report) CorrectionsPerHour() float64 {
	span := r.LastEvaluation.Sub(r.FirstEvaluation)
	if span <= 0 {
		return 0
	}
	n := 0
	for _, c := range r.Corrections {
		n += c
	}
	return float64(n) / span.Hours()
}

// report fills r's estimate fields.
func (s *Scorer) report(r *Report) {
	r.Estimates, r.Shrinks = s.estimateCount, s.shrinks
	r.FirstEstimate, r.LastEstimate = s.firstEstimate, s.lastEstimate
	if n := len(s.estimates); n > 0 {
		r.Latest = s.estimates[n-1].offered
	}
	r.Samples, r.Violations, r.Unscored = s.samples, s.violations, s.unscored
	r.MaxExcess = s.maxExcess
	if s.samples == 0 {
		return
	}
	n := float64(s.samples)
	r.MeanIdeal, r.MeanOffered = s.sumIdeal/n, s.sumOffered/n
	if s.sumIdeal > 0 {
		r.Harvest, r.SafeHarvest = s.sumOffered/s.sumIdeal, s.sumSafe/s.sumIdeal
	}
	r.ViolationRate = float64(s.violations) / n
}

// Report returns the scores so far (Name and the settings fields empty).
func (s *Scorer) Report() Report {
	var r Report
	s.report(&r)
	return r
}

// Config describes one set of settings run in shadow (or the active one,
// scored only).
type Config struct {
	// Name is the shadow's name (CheckName) or ActiveName.
	Name string
	// Estimator is run on every input (nil: the active settings, whose
	// estimates are given to Observe). EstimatorName names it.
	Estimator     estimator.Estimator
	EstimatorName string
	// QoS is evaluated on every input (nil: the active settings, whose
	// corrections are given to Count). QoSNames names its controllers.
	QoS      qos.Controller
	QoSNames []string
	// Settings are the candidate's settings, for reports.
	Settings []Setting
	// Tolerance overrides DefaultTolerance when positive.
	Tolerance float64
}

// Shadow is one set of settings scored on the agent's inputs. Its
// estimator half (Estimate, Observe) and QoS half (Evaluate, Count) may be
// called from different goroutines; each half from one at a time.
type Shadow struct {
	cfg Config

	estMu  sync.Mutex
	scorer Scorer

	qosMu            sync.Mutex
	corrections      map[qos.Kind]int
	evaluations      int
	firstEval, lastE time.Time
}

// New returns a Shadow of cfg.
func New(cfg Config) *Shadow {
	cfg.Settings = slices.Clone(cfg.Settings)
	slices.SortFunc(cfg.Settings, func(a, b Setting) int { return strings.Compare(a.Flag, b.Flag) })
	return &Shadow{cfg: cfg, scorer: Scorer{Tolerance: cfg.Tolerance}, corrections: map[qos.Kind]int{}}
}

// Name returns the shadow's name.
func (s *Shadow) Name() string { return s.cfg.Name }

// HasEstimator tells whether the shadow runs an estimator of its own.
func (s *Shadow) HasEstimator() bool { return s.cfg.Estimator != nil }

// HasQoS tells whether the shadow runs QoS controllers of its own.
func (s *Shadow) HasQoS() bool { return s.cfg.QoS != nil }

// Estimate runs the shadow's estimator on in and scores the result; it
// returns the estimate. Without an estimator it does nothing.
func (s *Shadow) Estimate(in estimator.Input) float64 {
	if s.cfg.Estimator == nil {
		return 0
	}
	offered := s.cfg.Estimator.Estimate(in).CPUs()
	s.Observe(in, offered)
	return offered
}

// Observe scores an estimate made from in (the active estimator's).
func (s *Shadow) Observe(in estimator.Input, offered float64) {
	s.estMu.Lock()
	defer s.estMu.Unlock()
	s.scorer.Observe(in, offered)
}

// ActiveEstimatorChanged tells the active settings' shadow that a node
// profile replaced the active estimator with name: its report names it,
// and its scores restart, so that the new estimator is not reported with
// the old one's.
func (s *Shadow) ActiveEstimatorChanged(name string) {
	s.estMu.Lock()
	defer s.estMu.Unlock()
	s.cfg.EstimatorName = name
	s.scorer = Scorer{Tolerance: s.cfg.Tolerance}
}

// ResetScores restarts the shadow's scores (not its estimator's or
// controllers' state): a rollout's shadow is compared with the active
// settings over the same inputs, and restarts with them when they change.
func (s *Shadow) ResetScores() {
	s.estMu.Lock()
	s.scorer = Scorer{Tolerance: s.cfg.Tolerance}
	s.estMu.Unlock()
	s.qosMu.Lock()
	s.corrections, s.evaluations, s.firstEval, s.lastE = map[qos.Kind]int{}, 0, time.Time{}, time.Time{}
	s.qosMu.Unlock()
}

// Evaluate runs the shadow's QoS controllers on in and counts their
// corrections, which are dropped. Without controllers it does nothing.
func (s *Shadow) Evaluate(in qos.Input) {
	if s.cfg.QoS == nil {
		return
	}
	s.Count(in.Now, s.cfg.QoS.Evaluate(in))
}

// Count counts corrections asked for at now (the active controllers').
func (s *Shadow) Count(now time.Time, corrections []qos.Correction) {
	s.qosMu.Lock()
	defer s.qosMu.Unlock()
	if s.evaluations == 0 {
		s.firstEval = now
	}
	s.evaluations++
	s.lastE = now
	for _, c := range corrections {
		s.corrections[c.Kind]++
	}
}

// Report returns the shadow's scores so far.
func (s *Shadow) Report() Report {
	r := Report{Name: s.cfg.Name, Settings: slices.Clone(s.cfg.Settings), Corrections: map[string]int{}}
	s.estMu.Lock()
	r.Estimator = s.cfg.EstimatorName
	s.scorer.report(&r)
	s.estMu.Unlock()
	s.qosMu.Lock()
	r.QoSControllers = slices.Clone(s.cfg.QoSNames)
	for k, n := range s.corrections {
		r.Corrections[k.String()] = n
	}
	r.Evaluations, r.FirstEvaluation, r.LastEvaluation = s.evaluations, s.firstEval, s.lastE
	s.qosMu.Unlock()
	return r
}
