package estimator_test

import (
	"math"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/resources"
)

// synthetic returns a trace of n 100 ms samples whose CPU is cpu(i).
func synthetic(name string, n int, alloc string, cpu func(i int) float64) backtest.Trace {
	t := backtest.Trace{Name: name, Interval: 100 * time.Millisecond, Allocation: resources.MustParse(alloc)}
	for i := range n {
		t.Points = append(t.Points, backtest.Point{Offset: time.Duration(i+1) * 100 * time.Millisecond, CPU: cpu(i)})
	}
	return t
}

func replay(t *testing.T, name string, cfg estimator.Config, tr backtest.Trace) backtest.Result {
	t.Helper()
	res, err := backtest.Replay(name, newEstimator(t, name, cfg), backtest.Scenario{Name: tr.Name, Traces: []backtest.Trace{tr}}, backtest.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestPredictiveHarvestsBetweenBursts: on a load that repeats every 20 s (8 s
// at 1.5 cores, 12 s at 0.1), usage can only offer what the bursts leave;
// predictive learns the period, offers the idle phase and takes it back
// before each burst, with no violation.
func TestPredictiveHarvestsBetweenBursts(t *testing.T) {
	square := synthetic("square", 3000, "cpus:2", func(i int) float64 {
		if i%200 < 80 {
			return 1.5 + 0.02*math.Sin(float64(i))
		}
		return 0.1
	})
	usage := replay(t, "usage", estimator.DefaultConfig(), square)
	predictive := replay(t, "predictive", estimator.DefaultConfig(), square)
	t.Logf("usage: %+v", usage)
	t.Logf("predictive: %+v", predictive)
	if predictive.ViolationRate > 0 {
		t.Errorf("predictive violates %.2f%% of samples of an exact period, want none", 100*predictive.ViolationRate)
	}
	if predictive.SafeHarvest < usage.SafeHarvest+0.2 {
		t.Errorf("predictive harvests %.0f%%, usage %.0f%%: want at least 20 points more", 100*predictive.SafeHarvest, 100*usage.SafeHarvest)
	}
}

// TestPredictiveFallsBackToUsage: loads with no period (flat noise, a load
// step, a slow ramp) get exactly usage's estimates.
func TestPredictiveFallsBackToUsage(t *testing.T) {
	traces := []backtest.Trace{
		synthetic("noise", 1500, "cpus:2", func(i int) float64 { return 0.5 + 0.03*math.Sin(float64(i)*1.3) }),
		synthetic("step", 1500, "cpus:2", func(i int) float64 {
			if i >= 500 && i < 1000 {
				return 1.2
			}
			return 0.05
		}),
		synthetic("ramp", 1500, "cpus:2", func(i int) float64 { return float64(i) / 1000 }),
	}
	for _, tr := range traces {
		t.Run(tr.Name, func(t *testing.T) {
			usage := replay(t, "usage", estimator.DefaultConfig(), tr)
			predictive := replay(t, "predictive", estimator.DefaultConfig(), tr)
			usage.Estimator, predictive.Estimator = "", ""
			if usage != predictive {
				t.Errorf("predictive differs from usage on a load with no period:\nusage      %+v\npredictive %+v", usage, predictive)
			}
		})
	}
}

// TestPredictiveDeterministic: the model is a function of the inputs seen,
// so two fresh estimators replaying the same trace agree exactly.
func TestPredictiveDeterministic(t *testing.T) {
	tr := synthetic("square", 1200, "cpus:2", func(i int) float64 {
		if i%100 < 40 {
			return 1.5
		}
		return 0.1
	})
	a := replay(t, "predictive", estimator.DefaultConfig(), tr)
	b := replay(t, "predictive", estimator.DefaultConfig(), tr)
	if a != b {
		t.Errorf("two replays of the same trace differ:\n%+v\n%+v", a, b)
	}
}
