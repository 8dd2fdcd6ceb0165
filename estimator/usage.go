package estimator

import (
	"time"

	"github.com/slackline/slackline/resources"
)

// usageEstimator is the default estimator: the slack of guaranteed containers
// and protected services, each predicted to need the larger of its
// Percentile-th CPU percentile over Window and its decaying peak hold, plus
// Margin of its allocation. Its only state is the last published estimate
// (for Hysteresis).
type usageEstimator struct {
	cfg       Config
	published resources.Resources
	memory    MemoryAccount // the last estimate's
}

func newUsage(cfg Config) (Estimator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &usageEstimator{cfg: cfg}, nil
}

// Estimate implements Estimator.
func (u *usageEstimator) Estimate(in Input) resources.Resources {
	var raw resources.Resources
	raw, u.memory = slackOf(in, u.cfg, guaranteedMembers(in, u.cfg.Window), u.predictCPU)
	u.published = u.cfg.Hysteresis.Apply(u.published, raw)
	return u.published
}

// ExplainMemory implements MemoryExplainer.
func (u *usageEstimator) ExplainMemory() MemoryAccount { return u.memory }

func (u *usageEstimator) predictCPU(m member, now time.Time) float64 {
	return max(percentileCPU(m.window, u.cfg.Percentile), decayingPeak(m.window, now, u.cfg.PeakHalfLife))
}
