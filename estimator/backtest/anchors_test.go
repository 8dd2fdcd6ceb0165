package backtest_test

import (
	"math"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/resources"
)

// anchorRun feeds an anchor one 1 s sample of a 4-cpu guaranteed container
// per second, cpu(second) cores, estimating after each, and returns the
// estimates.
func anchorRun(est estimator.Estimator, seconds int, cpu func(s int) float64) []float64 {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var history []estimator.Sample
	out := make([]float64, seconds)
	for s := range seconds {
		now := start.Add(time.Duration(s+1) * time.Second)
		history = append(history, estimator.Sample{Time: now, CPU: cpu(s)})
		out[s] = est.Estimate(estimator.Input{Now: now, Containers: []estimator.Container{
			{ID: "g", Allocated: resources.MustParse("cpus:4"), History: history},
		}}).CPUs()
	}
	return out
}

// TestKoordinator: batch cpu = total × 60% − the mean use of the 30 s
// before a report; the first report 30 s after the first estimate (at 1 s
// here), then every 60 s; changes within 10% wait for the update time
// (300 s after the last change).
func TestKoordinator(t *testing.T) {
	est := anchorRun(backtest.NewKoordinator(backtest.DefaultKoordinatorConfig()), 400, func(s int) float64 {
		switch {
		case s < 60:
			return 1 // 4 × 0.6 − 1 = 1.4
		case s < 150:
			return 0.5 // 1.9: more than 10% above 1.4
		default:
			return 0.45 // 1.95: within 10% of 1.9, published at the 300 s update
		}
	})
	for _, tt := range []struct {
		second int
		want   float64
	}{
		{29, 0},     // no report yet
		{30, 1.4},   // report at 31 s
		{89, 1.4},   // next report at 91 s
		{90, 1.9},   // the mean of (61 s, 91 s]
		{330, 1.9},  // reports at 211, 271, 331 s: 1.95 is within 10% of 1.9
		{390, 1.95}, // 300 s after the change at 91 s
	} {
		if got := est[tt.second]; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("after %d s: %.3f, want %.3f", tt.second+1, got, tt.want)
		}
	}
}

// TestKatalyst: the mean of the last four 30 s samples of total − use,
// nothing until four are in, changes below 0.3 cores ignored and above 4
// cores clipped to 4.
func TestKatalyst(t *testing.T) {
	est := anchorRun(backtest.NewKatalyst(backtest.DefaultKatalystConfig()), 240, func(s int) float64 {
		switch {
		case s < 120:
			return 1 // headroom 3
		case s < 180:
			return 0.8 // 3.2: the mean moves by 0.05 then 0.1, under the 0.3 step
		default:
			return 0 // 4: the mean reaches 3.5 at 210 s, a step of 0.5
		}
	})
	for _, tt := range []struct {
		second int
		want   float64
	}{
		{89, 0},     // samples at 1, 31, 61 s: not four yet
		{90, 3},     // the fourth at 91 s
		{150, 3},    // means of 3.05 and 3.1: under the minimum step
		{180, 3.35}, // (3 + 3.2 + 3.2 + 4) / 4
		{210, 3.35}, // 3.6: a step of 0.25, under the minimum
	} {
		if got := est[tt.second]; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("after %d s: %.3f, want %.3f", tt.second+1, got, tt.want)
		}
	}
	small := backtest.DefaultKatalystConfig()
	small.MaxStep = 0.5
	est = anchorRun(backtest.NewKatalyst(small), 240, func(s int) float64 {
		if s < 120 {
			return 4 // headroom 0
		}
		return 0 // headroom 4: the mean moves by 1 per sample
	})
	for second, want := range map[int]float64{120: 0.5, 150: 1} {
		if got := est[second]; math.Abs(got-want) > 1e-9 {
			t.Errorf("max step 0.5, after %d s: %.3f, want %.3f", second+1, got, want)
		}
	}
}

// TestTimeToOffer: slack that appears at 10 s and is offered after the
// estimator's delay d counts d; slack the estimator never offers counts as
// missed, with the time until it went.
func TestTimeToOffer(t *testing.T) {
	tr := backtest.Trace{Name: "drop", Interval: 100 * time.Millisecond, Allocation: resources.MustParse("cpus:2")}
	for i := range 300 {
		cpu := 2.0
		if i >= 100 && i < 250 { // idle from 10 s to 25 s
			cpu = 0
		}
		tr.Points = append(tr.Points, backtest.Point{Offset: time.Duration(i+1) * 100 * time.Millisecond, CPU: cpu})
	}
	sc := backtest.Scenario{Name: "drop", Traces: []backtest.Trace{tr}}
	// lagging offers what was free delay ago.
	lagging := func(delay time.Duration) estimator.Estimator {
		return estimator.Func(func(in estimator.Input) resources.Resources {
			h := in.Containers[0].History
			cutoff := in.Now.Add(-delay)
			for i := len(h) - 1; i >= 0; i-- {
				if !h[i].Time.After(cutoff) {
					return resources.New(2-h[i].CPU, 0, 0)
				}
			}
			return resources.Resources{}
		})
	}
	for _, tt := range []struct {
		name   string
		est    estimator.Estimator
		want   float64
		missed int
	}{
		{"offered at once", lagging(0), 0.1, 0}, // the estimate after the first idle sample applies from the next
		{"offered 2 s later", lagging(2 * time.Second), 2.1, 0},
		{"never offered", estimator.Func(func(estimator.Input) resources.Resources { return resources.Resources{} }), 15, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := backtest.Replay(tt.name, tt.est, sc, backtest.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			if r.Appearances != 1 || r.Missed != tt.missed || math.Abs(r.MeanTimeToOffer-tt.want) > 1e-9 {
				t.Errorf("appearances %d, missed %d, mean time to offer %.2f s; want 1, %d, %.2f s",
					r.Appearances, r.Missed, r.MeanTimeToOffer, tt.missed, tt.want)
			}
		})
	}
}
