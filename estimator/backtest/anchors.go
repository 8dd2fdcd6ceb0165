package backtest

import (
	"math"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// Anchors are reference implementations of how two production colocation
// systems size the slack they give best-effort work, replayed beside
// Slackline's estimators on the same traces so that the table says where
// Slackline stands. They live here, in the backtest, and nowhere else: the
// agent never runs them. Both read cpus only and ignore the Config; the
// node's total is Input.Total's cpus when set, otherwise the sum of the
// guaranteed containers' allocations (a replayed trace fills its node).
var Anchors = map[string]estimator.Factory{
	"koordinator": func(estimator.Config) (estimator.Estimator, error) {
		return NewKoordinator(DefaultKoordinatorConfig()), nil
	},
	"katalyst": func(estimator.Config) (estimator.Estimator, error) {
		return NewKatalyst(DefaultKatalystConfig()), nil
	},
}

// KoordinatorConfig is the part of Koordinator's ColocationStrategy that
// sizes batch CPU (its slo-controller's noderesource batch plugin, policy
// "usage"), with Koordinator's defaults in DefaultKoordinatorConfig.
type KoordinatorConfig struct {
	// ThresholdPercent is cpuReclaimThresholdPercent: guaranteed use and
	// batch together may fill this share of the node (default 60).
	ThresholdPercent float64
	// ReportInterval is metricReportIntervalSeconds (60 s): how often the
	// node's metrics are reported, and so how often batch CPU is
	// recomputed.
	ReportInterval time.Duration
	// AggregateDuration is metricAggregateDurationSeconds (30 s):
	// guaranteed use is its mean over this long before a report.
	AggregateDuration time.Duration
	// DiffThreshold is resourceDiffThreshold (0.1): the node's batch
	// allocatable changes only when the new value differs from it by more
	// than this fraction of it...
	DiffThreshold float64
	// UpdateTime is updateTimeThresholdSeconds (300 s): ...or when it has
	// not changed for this long.
	UpdateTime time.Duration
}

// DefaultKoordinatorConfig returns Koordinator's defaults
// (DefaultColocationStrategy).
func DefaultKoordinatorConfig() KoordinatorConfig {
	return KoordinatorConfig{
		ThresholdPercent: 60, ReportInterval: time.Minute, AggregateDuration: 30 * time.Second,
		DiffThreshold: 0.1, UpdateTime: 5 * time.Minute,
	}
}

// koordinator is Koordinator's batch formula:
//
//	batch cpu = node total × ThresholdPercent/100 − guaranteed use
//
// where guaranteed use is the mean over AggregateDuration before each
// report, reports come every ReportInterval (the first AggregateDuration
// after the first estimate, when a whole window of samples exists), and the
// published value follows a report only past DiffThreshold or UpdateTime.
type koordinator struct {
	cfg                    KoordinatorConfig
	start, report, updated time.Time
	published              float64
	reported               bool
}

// NewKoordinator returns the Koordinator anchor with cfg.
func NewKoordinator(cfg KoordinatorConfig) estimator.Estimator { return &koordinator{cfg: cfg} }

func (k *koordinator) Estimate(in estimator.Input) resources.Resources {
	if k.start.IsZero() {
		k.start = in.Now
	}
	due := !k.reported && in.Now.Sub(k.start) >= k.cfg.AggregateDuration ||
		k.reported && in.Now.Sub(k.report) >= k.cfg.ReportInterval
	if due {
		k.reported, k.report = true, in.Now
		used := 0.0
		for _, c := range guaranteedOf(in) {
			used += meanCPU(c.History, in.Now.Add(-k.cfg.AggregateDuration), in.Now)
		}
		batch := max(0, nodeTotal(in)*k.cfg.ThresholdPercent/100-used)
		if k.updated.IsZero() || math.Abs(batch-k.published) > k.cfg.DiffThreshold*k.published ||
			in.Now.Sub(k.updated) >= k.cfg.UpdateTime {
			k.published, k.updated = batch, in.Now
		}
	}
	return resources.New(k.published, 0, 0)
}

// KatalystConfig is the part of Katalyst's sysadvisor that reports the
// reclaimed-cores CPU headroom: its sliding-window reporter, with the values
// Katalyst's own tests of it use in DefaultKatalystConfig.
type KatalystConfig struct {
	// SyncPeriod is how often a headroom sample is taken (30 s).
	SyncPeriod time.Duration
	// SlidingWindow (2 min) holds SlidingWindow/SyncPeriod samples; the
	// reported headroom is their mean, and nothing is reported until the
	// window is full (samples expire after twice the window).
	SlidingWindow time.Duration
	// MinStep and MaxStep (0.3 and 4 cores) cap each change of the report:
	// smaller changes are ignored, larger ones clipped to MaxStep.
	MinStep, MaxStep float64
}

// DefaultKatalystConfig returns the reporter's settings of Katalyst's tests
// of its headroom manager: a 30 s sync over a 2 min window, steps of 0.3
// to 4 cores.
func DefaultKatalystConfig() KatalystConfig {
	return KatalystConfig{SyncPeriod: 30 * time.Second, SlidingWindow: 2 * time.Minute, MinStep: 0.3, MaxStep: 4}
}

// katalyst is Katalyst's smoothed headroom: every SyncPeriod a sample of
// node total − guaranteed use (the latest samples), the mean of the window's
// samples once it is full, published through the capped step.
type katalyst struct {
	cfg       KatalystConfig
	samples   []katalystSample
	next      time.Time
	published float64
	has       bool
}

type katalystSample struct {
	at       time.Time
	headroom float64
}

// NewKatalyst returns the Katalyst anchor with cfg.
func NewKatalyst(cfg KatalystConfig) estimator.Estimator { return &katalyst{cfg: cfg} }

func (k *katalyst) Estimate(in estimator.Input) resources.Resources {
	if !k.next.IsZero() && in.Now.Before(k.next) {
		return resources.New(k.published, 0, 0)
	}
	k.next = in.Now.Add(k.cfg.SyncPeriod)
	used := 0.0
	for _, c := range guaranteedOf(in) {
		if n := len(c.History); n > 0 {
			used += c.History[n-1].CPU
		}
	}
	size := max(1, int(k.cfg.SlidingWindow/k.cfg.SyncPeriod))
	k.samples = append(k.samples, katalystSample{in.Now, max(0, nodeTotal(in)-used)})
	if len(k.samples) > size {
		k.samples = k.samples[len(k.samples)-size:]
	}
	sum, valid := 0.0, 0
	for _, s := range k.samples {
		if in.Now.Sub(s.at) < 2*k.cfg.SlidingWindow {
			sum, valid = sum+s.headroom, valid+1
		}
	}
	if valid < size {
		return resources.New(k.published, 0, 0)
	}
	smoothed := sum / float64(valid)
	step := math.Abs(smoothed - k.published)
	switch {
	case !k.has:
		k.published, k.has = smoothed, true
	case step < k.cfg.MinStep:
	case step > k.cfg.MaxStep:
		k.published += math.Copysign(k.cfg.MaxStep, smoothed-k.published)
	default:
		k.published = smoothed
	}
	return resources.New(k.published, 0, 0)
}

// guaranteedOf returns the containers whose use is guaranteed: the
// non-revocable containers and the protected services.
func guaranteedOf(in estimator.Input) []estimator.Container {
	var out []estimator.Container
	for _, c := range in.Containers {
		if !c.Revocable {
			out = append(out, c)
		}
	}
	return append(out, in.Protected...)
}

// nodeTotal is Input.Total's cpus, or the guaranteed containers'
// allocations when Total has none.
func nodeTotal(in estimator.Input) float64 {
	if t := in.Total.CPUs(); t > 0 {
		return t
	}
	total := 0.0
	for _, c := range guaranteedOf(in) {
		total += c.Allocated.CPUs()
	}
	return total
}

// meanCPU is the mean CPU of the samples in (from, to], 0 without any.
func meanCPU(history []estimator.Sample, from, to time.Time) float64 {
	sum, n := 0.0, 0
	for _, s := range history {
		if s.Time.After(from) && !s.Time.After(to) {
			sum, n = sum+s.CPU, n+1
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
