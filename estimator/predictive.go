package estimator

import (
	"math"
	"time"

	"github.com/slackline/slackline/resources"
)

// The periodic model's constants. They are not configuration: the backtests
// that chose them are in doc.go.
const (
	// bucketWidth is the resolution of the periodic model: it keeps the peak
	// CPU of each second.
	bucketWidth = time.Second
	// maxBuckets bounds the model's memory per container (10 minutes).
	maxBuckets = 600
	// minPeriod and minPeriods: a period is at least 4 s and must have been
	// seen three times before it is trusted.
	minPeriod  = 4
	minPeriods = 3
	// minCorrelation is the autocorrelation a period needs, and
	// correlationDip how much lower it must be at some shorter lag: a real
	// oscillation decorrelates between its repeats, a level shift or a
	// trend does not.
	minCorrelation = 0.6
	correlationDip = 0.3
	// minPeriodicStdDev (cores) keeps a flat, noisy load from being read as
	// periodic.
	minPeriodicStdDev = 0.05
	// horizonBuckets is how far ahead a prediction must hold: the estimate
	// interval plus the time to rescind offers and throttle revocable tasks.
	horizonBuckets = 2
	// phaseGuard buckets on each side of the predicted phase absorb jitter in
	// the period.
	phaseGuard = 1
	// periodsBack is how many past periods a prediction takes its peak from.
	periodsBack = 3
	// recentBuckets: the last seconds' peak is always part of a prediction,
	// so a load that is already up is never predicted away.
	recentBuckets = 2
)

// periodicEstimator is the predictive estimator "predictive". It is usage
// with a better prediction for loads that repeat: it keeps each guaranteed
// container's per-second CPU peaks for ten minutes, looks for a period by
// autocorrelation, and when it finds a trustworthy one predicts the peak over
// the next horizonBuckets seconds from the same phase of the last three
// periods (and the last two seconds) instead of from the whole window. A
// periodic load then leaves its allocation to revocable tasks between its
// bursts and takes it back shortly before each one. Without a trusted period
// the prediction is exactly usage's.
//
// It is stateful: the per-container series (bounded, dropped when a
// container leaves) and the published estimate. Both are functions of the
// samples seen: a sample is taken in once, when it is newer than the newest
// seen for that container.
type periodicEstimator struct {
	usage  usageEstimator
	series map[memberKey]*peakSeries
}

func newPredictive(cfg Config) (Estimator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &periodicEstimator{usage: usageEstimator{cfg: cfg}, series: map[memberKey]*peakSeries{}}, nil
}

// Estimate implements Estimator.
func (p *periodicEstimator) Estimate(in Input) resources.Resources {
	members := guaranteedMembers(in, p.usage.cfg.Window)
	seen := make(map[memberKey]bool, len(members))
	for _, m := range members {
		seen[m.key] = true
		s := p.series[m.key]
		if s == nil {
			s = &peakSeries{}
			p.series[m.key] = s
		}
		s.ingest(m.container.History, in.Now)
	}
	for key := range p.series {
		if !seen[key] {
			delete(p.series, key)
		}
	}
	var raw resources.Resources
	raw, p.usage.memory = slackOf(in, p.usage.cfg, members, p.predictCPU)
	p.usage.published = p.usage.cfg.Hysteresis.Apply(p.usage.published, raw)
	return p.usage.published
}

// ExplainMemory implements MemoryExplainer.
func (p *periodicEstimator) ExplainMemory() MemoryAccount { return p.usage.memory }

func (p *periodicEstimator) predictCPU(m member, now time.Time) float64 {
	if peak, ok := p.series[m.key].predict(now); ok {
		return peak
	}
	return p.usage.predictCPU(m, now)
}

// peakSeries is the peak CPU of each bucketWidth of one container's history;
// NaN marks a bucket with no sample.
type peakSeries struct {
	first  int64 // bucket number of peaks[0]
	peaks  []float64
	newest time.Time // newest sample taken in
}

func bucketOf(t time.Time) int64 {
	// A sample ends its interval at Time, so one at exactly 2 s belongs to
	// the second (1 s, 2 s]: bucket 1.
	return (t.UnixNano() - 1) / int64(bucketWidth)
}

// ingest takes in the samples newer than any seen before, up to now.
func (s *peakSeries) ingest(history []Sample, now time.Time) {
	for _, sample := range history {
		if !sample.Time.After(s.newest) || sample.Time.After(now) {
			continue
		}
		if !goodSample(sample) {
			continue
		}
		s.newest = sample.Time
		b := bucketOf(sample.Time)
		if len(s.peaks) == 0 || b-s.first >= 2*maxBuckets {
			s.first, s.peaks = b, s.peaks[:0]
		}
		for s.first+int64(len(s.peaks)) <= b {
			s.peaks = append(s.peaks, math.NaN())
		}
		i := b - s.first
		if math.IsNaN(s.peaks[i]) || sample.CPU > s.peaks[i] {
			s.peaks[i] = sample.CPU
		}
		if over := len(s.peaks) - maxBuckets; over > 0 {
			s.peaks = append(s.peaks[:0], s.peaks[over:]...)
			s.first += int64(over)
		}
	}
}

// at returns the peak of bucket b, or NaN when unknown.
func (s *peakSeries) at(b int64) float64 {
	if i := b - s.first; i >= 0 && i < int64(len(s.peaks)) {
		return s.peaks[i]
	}
	return math.NaN()
}

// predict returns the predicted peak over the next horizonBuckets when the
// series has a trusted period; ok is false otherwise.
func (s *peakSeries) predict(now time.Time) (peak float64, ok bool) {
	if s == nil {
		return 0, false
	}
	current := bucketOf(now)
	period := s.period(current)
	if period == 0 {
		return 0, false
	}
	for b := current - recentBuckets; b <= current; b++ {
		if v := s.at(b); !math.IsNaN(v) {
			peak = max(peak, v)
		}
	}
	for k := int64(1); k <= periodsBack; k++ {
		center := current - k*period
		for b := center - phaseGuard; b <= center+horizonBuckets+phaseGuard; b++ {
			if v := s.at(b); !math.IsNaN(v) {
				peak = max(peak, v)
			}
		}
	}
	return peak, true
}

// period returns the trusted period in buckets of the complete buckets before
// current, or 0. It uses the newest run of buckets with no gap.
func (s *peakSeries) period(current int64) int64 {
	end := min(current-s.first, int64(len(s.peaks))) // exclusive; current may be incomplete
	start := end
	for start > 0 && !math.IsNaN(s.peaks[start-1]) {
		start--
	}
	x := s.peaks[start:max(start, end)]
	n := len(x)
	if n < minPeriods*minPeriod {
		return 0
	}
	mean := 0.0
	for _, v := range x {
		mean += v
	}
	mean /= float64(n)
	variance := 0.0
	for _, v := range x {
		variance += (v - mean) * (v - mean)
	}
	if variance/float64(n) < minPeriodicStdDev*minPeriodicStdDev {
		return 0
	}
	correlation := func(lag int) float64 {
		sum := 0.0
		for i := lag; i < n; i++ {
			sum += (x[i] - mean) * (x[i-lag] - mean)
		}
		// Mean product per pair over the variance: not shrunk at long lags.
		return (sum / float64(n-lag)) / (variance / float64(n))
	}
	best, bestLag := 0.0, 0
	lowest := math.Inf(1)
	lowestBeforeBest := math.Inf(1)
	for lag := 1; lag <= n/minPeriods; lag++ {
		r := correlation(lag)
		if lag >= minPeriod && r > best {
			best, bestLag, lowestBeforeBest = r, lag, lowest
		}
		lowest = min(lowest, r)
	}
	if best < minCorrelation || lowestBeforeBest > best-correlationDip {
		return 0
	}
	return int64(bestLag)
}
