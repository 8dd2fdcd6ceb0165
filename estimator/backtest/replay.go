package backtest

import (
	"errors"
	"fmt"
	"time"

	"github.com/slackline/slackline/estimator"
)

// Scenario is a set of traces replayed together, each as one guaranteed
// container with its trace's allocation, sample i of every trace taken at
// the same moment.
type Scenario struct {
	Name   string
	Traces []Trace
}

// Options control a replay.
type Options struct {
	// EstimateInterval is how often the estimator is called (the agent's
	// --oversubscribed-resources-interval); a multiple of the traces'
	// sampling interval. An estimate holds until the next one.
	EstimateInterval time.Duration
	// History is how much history each container carries into Estimate (the
	// agent's bound); it should cover the estimator's window.
	History time.Duration
	// Tolerance is the excess, in cores, below which an over-offer is not
	// counted as a violation (measurement noise).
	Tolerance float64
	// Sustain and MinRise say when slack appears, for
	// Result.MeanTimeToOffer: the real slack sustained over Sustain (its
	// minimum over the next Sustain) rises by at least MinRise cores from
	// one sample to the next.
	Sustain time.Duration
	MinRise float64
}

// DefaultOptions are the agent's defaults (an estimate every 100 ms, two
// minutes of history), 0.05 cores of tolerance, and slack appearing when
// 0.25 cores more are free for at least 5 s.
func DefaultOptions() Options {
	return Options{EstimateInterval: 100 * time.Millisecond, History: 2 * time.Minute, Tolerance: 0.05,
		Sustain: 5 * time.Second, MinRise: 0.25}
}

// Result is how one estimator did on one scenario, over every sample after
// the first estimate. All amounts are cpus (cores).
//
// At sample j, the real slack is ideal_j = max(0, Σ allocation − Σ usage_j)
// over the guaranteed containers: what revocable tasks could have used at
// that moment without taking anything from guaranteed ones. offered_j is the
// latest estimate made from samples before j (never from j itself or
// later). Sample j is a violation when offered_j − ideal_j > Tolerance: had
// revocable tasks used all they were offered, revocable + guaranteed usage
// would have exceeded the guaranteed allocation.
type Result struct {
	Estimator string `json:"estimator"`
	Scenario  string `json:"scenario"`
	// Samples is the number of samples evaluated.
	Samples int `json:"samples"`
	// MeanIdeal is the mean real slack, mean(ideal_j).
	MeanIdeal float64 `json:"mean_ideal"`
	// MeanOffered is the mean estimate, mean(offered_j).
	MeanOffered float64 `json:"mean_offered"`
	// Harvest is MeanOffered / MeanIdeal.
	Harvest float64 `json:"harvest"`
	// SafeHarvest is mean(min(offered_j, ideal_j)) / MeanIdeal: the share of
	// the real slack offered without exceeding it.
	SafeHarvest float64 `json:"safe_harvest"`
	// ViolationRate is the fraction of samples that are violations.
	ViolationRate float64 `json:"violation_rate"`
	// MeanExcess is mean(offered_j − ideal_j) over the violations.
	MeanExcess float64 `json:"mean_excess"`
	// MaxExcess is the largest offered_j − ideal_j.
	MaxExcess float64 `json:"max_excess"`
	// ExcessCoreSeconds is Σ max(0, offered_j − ideal_j) × interval over
	// all samples: how much CPU guaranteed tasks would have had to win back.
	ExcessCoreSeconds float64 `json:"excess_core_seconds"`
	// ChangesPerMinute is how often the estimate changed.
	ChangesPerMinute float64 `json:"changes_per_minute"`
	// MeanTimeToOffer is the mean time, in seconds, from slack appearing
	// to half of it being offered, over the Appearances of slack: sample j
	// is one when the sustained slack rises by R = S_j − S_{j−1} ≥
	// Options.MinRise, with S_j the minimum of ideal over the Sustain from
	// j on; it is offered at the first sample k ≥ j with
	// offered_k ≥ min(offered_{j−1}, S_{j−1}) + R/2 (half the rise on top
	// of what was offered, or of the old slack if more was offered).
	// Missed appearances, where ideal fell back below S_{j−1} + R/2 (or
	// the trace ended) first, count with the time until then: with
	// Missed > 0, MeanTimeToOffer is a lower bound.
	MeanTimeToOffer float64 `json:"mean_time_to_offer_seconds"`
	Appearances     int     `json:"appearances"`
	Missed          int     `json:"missed"`
	// ShrinksPerMinute is how often the estimate fell: the changes that may
	// make the coordinator rescind offers.
	ShrinksPerMinute float64 `json:"shrinks_per_minute"`
}

// ErrScenario is wrapped by Replay's errors about an unusable scenario or
// options.
var ErrScenario = errors.New("bad scenario")

// epoch is the wall time a replay starts at; any fixed time would do.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Replay feeds the scenario through est, one estimate per EstimateInterval,
// and scores the estimates against the usage that followed them. It is
// deterministic. est must be fresh (stateful estimators remember what they
// saw).
func Replay(name string, est estimator.Estimator, sc Scenario, opt Options) (Result, error) {
	if len(sc.Traces) == 0 {
		return Result{}, fmt.Errorf("%w: %s has no traces", ErrScenario, sc.Name)
	}
	interval := sc.Traces[0].Interval
	n := len(sc.Traces[0].Points)
	var allocCPU float64
	for _, t := range sc.Traces {
		if t.Interval != interval {
			return Result{}, fmt.Errorf("%w: %s mixes sampling intervals %v and %v", ErrScenario, sc.Name, interval, t.Interval)
		}
		n = min(n, len(t.Points))
		allocCPU += t.Allocation.CPUs()
	}
	if opt.EstimateInterval < interval || opt.EstimateInterval%interval != 0 {
		return Result{}, fmt.Errorf("%w: estimate interval %v is not a multiple of the sampling interval %v", ErrScenario, opt.EstimateInterval, interval)
	}
	every := int(opt.EstimateInterval / interval)
	keep := max(1, int(opt.History/interval))

	containers := make([]estimator.Container, len(sc.Traces))
	for i, t := range sc.Traces {
		containers[i] = estimator.Container{ID: fmt.Sprintf("%s-%d", t.Name, i), Allocated: t.Allocation}
	}
	at := func(j int) time.Time { return epoch.Add(time.Duration(j+1) * interval) }

	var (
		res                          = Result{Estimator: name, Scenario: sc.Name}
		offered, sumIdeal, sumOffer  float64
		sumSafe, sumExcess, excessCS float64
		violations, changes, shrinks int
		estimated                    bool
		ideals, offers               []float64
	)
	for j := range n {
		if estimated {
			usage := 0.0
			for _, t := range sc.Traces {
				usage += t.Points[j].CPU
			}
			ideal := max(0, allocCPU-usage)
			excess := offered - ideal
			ideals, offers = append(ideals, ideal), append(offers, offered)
			res.Samples++
			sumIdeal += ideal
			sumOffer += offered
			sumSafe += min(offered, ideal)
			if excess > 0 {
				excessCS += excess * interval.Seconds()
				res.MaxExcess = max(res.MaxExcess, excess)
			}
			if excess > opt.Tolerance {
				violations++
				sumExcess += excess
			}
		}
		if (j+1)%every != 0 {
			continue
		}
		// Estimate at the end of sample j from samples up to j; it applies
		// from sample j+1 on.
		first := max(0, j+1-keep)
		for i, t := range sc.Traces {
			history := containers[i].History[:0]
			for k := first; k <= j; k++ {
				p := t.Points[k]
				history = append(history, estimator.Sample{Time: at(k), CPU: p.CPU, MemBytes: p.MemBytes})
			}
			containers[i].History = history
		}
		next := est.Estimate(estimator.Input{Now: at(j), Containers: containers}).CPUs()
		if estimated && next != offered {
			changes++
			if next < offered {
				shrinks++
			}
		}
		offered, estimated = next, true
	}
	if res.Samples == 0 {
		return res, fmt.Errorf("%w: %s is shorter than one estimate interval", ErrScenario, sc.Name)
	}
	s := float64(res.Samples)
	res.MeanIdeal = sumIdeal / s
	res.MeanOffered = sumOffer / s
	if sumIdeal > 0 {
		res.Harvest = sumOffer / sumIdeal
		res.SafeHarvest = sumSafe / sumIdeal
	}
	res.ViolationRate = float64(violations) / s
	if violations > 0 {
		res.MeanExcess = sumExcess / float64(violations)
	}
	res.ExcessCoreSeconds = excessCS
	res.ChangesPerMinute = float64(changes) / (s * interval.Minutes())
	res.ShrinksPerMinute = float64(shrinks) / (s * interval.Minutes())
	res.MeanTimeToOffer, res.Appearances, res.Missed = timeToOffer(ideals, offers, interval, opt)
	return res, nil
}

// timeToOffer computes Result.MeanTimeToOffer, Appearances and Missed from
// the scored samples' ideal and offered series.
func timeToOffer(ideal, offered []float64, interval time.Duration, opt Options) (mean float64, appearances, missed int) {
	w := max(1, int(opt.Sustain/interval))
	n := len(ideal)
	if n < w {
		return 0, 0, 0
	}
	// sustained[j] = min(ideal[j : j+w]), for j <= n-w.
	sustained := make([]float64, n-w+1)
	for j := range sustained {
		sustained[j] = ideal[j]
		for _, v := range ideal[j+1 : j+w] {
			sustained[j] = min(sustained[j], v)
		}
	}
	total := 0
	for j := 1; j < len(sustained); j++ {
		rise := sustained[j] - sustained[j-1]
		if rise < opt.MinRise {
			continue
		}
		appearances++
		target, floor := min(offered[j-1], sustained[j-1])+rise/2, sustained[j-1]+rise/2
		k := j
		for k < n && offered[k] < target-1e-9 && ideal[k] >= floor {
			k++
		}
		if k == n || offered[k] < target-1e-9 {
			missed++
		}
		total += k - j
	}
	if appearances == 0 {
		return 0, 0, 0
	}
	return float64(total) * interval.Seconds() / float64(appearances), appearances, missed
}

// Mix returns the scenario of all traces together (one guaranteed container
// per trace), named "mix".
func Mix(traces []Trace) Scenario {
	return Scenario{Name: "mix", Traces: traces}
}
