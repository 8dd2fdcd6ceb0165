package estimator

import (
	"math"
	"slices"
	"time"

	"github.com/slackline/slackline/resources"
)

// Candidates are the predictive estimators that lost the backtests to
// "predictive" (see doc.go). They are kept here, in test code only, so the
// comparison table can be reproduced:
//
//	go test ./estimator -run TestCandidateTable -v
var Candidates = map[string]Factory{
	// mean + 3σ of the window's samples, exponentially weighted (half-life
	// PeakHalfLife), but never below the last second's peak.
	"mean-3sigma": func(cfg Config) (Estimator, error) {
		return candidate(cfg, func(m member, now time.Time) float64 {
			var sw, s1, s2 float64
			for _, s := range m.window {
				w := math.Exp2(-now.Sub(s.Time).Seconds() / cfg.PeakHalfLife.Seconds())
				sw, s1, s2 = sw+w, s1+w*s.CPU, s2+w*s.CPU*s.CPU
			}
			mean := s1 / sw
			sigma := math.Sqrt(max(0, s2/sw-mean*mean))
			return max(mean+3*sigma, lastSecondPeak(m.window, now))
		})
	},
	// A decaying histogram (as in Kubernetes' VPA): the Percentile-th
	// percentile of the window's samples weighted by 2^(−age/30 s).
	"decaying-histogram": func(cfg Config) (Estimator, error) {
		return candidate(cfg, func(m member, now time.Time) float64 {
			type weighted struct{ cpu, w float64 }
			ws := make([]weighted, len(m.window))
			total := 0.0
			for i, s := range m.window {
				ws[i] = weighted{s.CPU, math.Exp2(-now.Sub(s.Time).Seconds() / 30)}
				total += ws[i].w
			}
			slices.SortFunc(ws, func(a, b weighted) int { return compareFloat(a.cpu, b.cpu) })
			acc := 0.0
			for _, x := range ws {
				acc += x.w
				if acc >= cfg.Percentile/100*total {
					return max(x.cpu, lastSecondPeak(m.window, now))
				}
			}
			return ws[len(ws)-1].cpu
		})
	},
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func lastSecondPeak(window []Sample, now time.Time) float64 {
	peak := 0.0
	for _, s := range window {
		if now.Sub(s.Time) < time.Second {
			peak = max(peak, s.CPU)
		}
	}
	return peak
}

type candidateEstimator struct {
	cfg       Config
	predict   cpuPredictor
	published resources.Resources
}

func candidate(cfg Config, predict cpuPredictor) (Estimator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &candidateEstimator{cfg: cfg, predict: predict}, nil
}

func (c *candidateEstimator) Estimate(in Input) resources.Resources {
	raw, _ := slackOf(in, c.cfg, guaranteedMembers(in, c.cfg.Window), c.predict)
	c.published = c.cfg.Hysteresis.Apply(c.published, raw)
	return c.published
}
