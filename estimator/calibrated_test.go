package estimator_test

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/resources"
)

// heldoutScenarios returns one scenario per held-out trace
// (testdata/heldout, workloads of kinds the settings were never tuned on)
// and "heldout-mix", all of them together.
func heldoutScenarios(tb testing.TB) []backtest.Scenario {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "heldout", "*.csv.gz"))
	if err != nil || len(files) < 5 {
		tb.Fatalf("want at least five held-out traces in testdata/heldout, found %d (%v)", len(files), err)
	}
	slices.Sort(files)
	var traces []backtest.Trace
	var scenarios []backtest.Scenario
	for _, name := range files {
		tr, err := backtest.ReadTraceFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		if tr.Duration() < 30*time.Minute {
			tb.Errorf("%s covers %v, want at least 30 minutes", name, tr.Duration())
		}
		traces = append(traces, tr)
		scenarios = append(scenarios, backtest.Scenario{Name: tr.Name, Traces: []backtest.Trace{tr}})
	}
	mix := backtest.Mix(traces)
	mix.Name = "heldout-mix"
	return append(scenarios, mix)
}

// replayCalibrated replays sc through a fresh default estimator and returns
// the backtest's result and the calibration's own account.
func replayCalibrated(tb testing.TB, cfg estimator.Config, sc backtest.Scenario) (backtest.Result, estimator.CalibrationStats) {
	tb.Helper()
	est, err := estimator.New(estimator.DefaultName, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	res, err := backtest.Replay(estimator.DefaultName, est, sc, backtest.DefaultOptions())
	if err != nil {
		tb.Fatal(err)
	}
	return res, est.(estimator.Explainer).Explain().Calibration
}

// TestCalibratedViolationBound: on every recorded and every held-out trace
// (and their mixes), the default estimator's violation rate is at most the
// target plus the finite-sample allowance of adaptive conformal inference
// with delayed feedback,
//
//	α + (α + dγ)/(γT)
//
// (estimator.ViolationBound, derived in doc.go), with T the estimates
// scored and d = 1 (in a replay every outcome is known at the next
// estimate). With α = 1% and γ = 0.01 the allowance is 2/T: 0.13 points on
// the 150 s recorded traces (T = 1499) and 0.011 on the 30 min held-out
// ones.
// It also checks that the calibration counts violations exactly as the
// backtest does. The old default, fast, violates 1.53% on bursty: above
// this bound.
//
// And it holds calibrated's harvest to at least fast's on every trace,
// recorded and held out. Before the third expert (#29: rhythms only where
// they came true) four traces fell short: bursty 43.5% against fast's
// 51.7% (fast above the bound there), and held out queue 71.1% (73.6%),
// bursts-heavytail 82.3% (83.2%) and http-heavytail 78.9% (79.7%).
func TestCalibratedViolationBound(t *testing.T) {
	t.Parallel()
	cfg := estimator.DefaultConfig()
	cal := cfg.Calibration
	scenarios := append(recordedScenarios(t), heldoutScenarios(t)...)
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			res, stats := replayCalibrated(t, cfg, sc)
			if stats.MaxDelay != 1 || stats.Unresolved != 0 {
				t.Errorf("outcomes known %d estimates late, %d unresolved; a replay knows each at the next estimate", stats.MaxDelay, stats.Unresolved)
			}
			if stats.Resolved != res.Samples || math.Abs(stats.Violations-res.ViolationRate*float64(res.Samples)) > 1e-6 {
				t.Errorf("calibration scored %d estimates with %.0f violations, the backtest %d samples at %.4f%%",
					stats.Resolved, stats.Violations, res.Samples, 100*res.ViolationRate)
			}
			bound := estimator.ViolationBound(cal.TargetViolation, cal.Gamma, res.Samples, 1)
			t.Logf("harvest %.1f%% violations %.3f%% (bound %.3f%%, %d estimates)", 100*res.Harvest, 100*res.ViolationRate, 100*bound, res.Samples)
			if res.ViolationRate > bound {
				t.Errorf("violations %.3f%% over %d estimates, above the bound %.3f%%", 100*res.ViolationRate, res.Samples, 100*bound)
			}
			fast := replayScenario(t, "fast", estimator.Registry["fast"], sc)
			t.Logf("fast: harvest %.1f%% violations %.3f%%", 100*fast.Harvest, 100*fast.ViolationRate)
			if res.Harvest < fast.Harvest {
				t.Errorf("harvest %.2f%%, below fast's %.2f%%", 100*res.Harvest, 100*fast.Harvest)
			}
		})
	}
}

// regime is one stretch of the adversarial sequence.
type regime struct {
	name string
	cpu  func(rng *rand.Rand, i int) float64
}

// adversarialRegimes change every few minutes between kinds of load that
// need very different margins: what was safe in one is not in the next.
var adversarialRegimes = []regime{
	{"quiet", func(rng *rand.Rand, _ int) float64 { return 0.2 + 0.05*rng.Float64() }},
	{"spikes", func(rng *rand.Rand, _ int) float64 { // unpredictable 100 ms spikes
		if rng.Float64() < 0.08 {
			return 1.2 + 0.6*rng.Float64()
		}
		return 0.1
	}},
	{"noise", func(rng *rand.Rand, _ int) float64 { return 1.8 * rng.Float64() }},
	{"square", func(rng *rand.Rand, i int) float64 { // 3 s on, 3 s off
		if i/30%2 == 0 {
			return 1.5
		}
		return 0.1
	}},
	{"heavy-tail", func(rng *rand.Rand, _ int) float64 {
		return min(1.9, 0.05/math.Pow(1-rng.Float64(), 1/1.2))
	}},
	{"quiet", func(rng *rand.Rand, _ int) float64 { return 0.3 + 0.02*rng.Float64() }},
	{"spikes", func(rng *rand.Rand, _ int) float64 {
		if rng.Float64() < 0.15 {
			return 1.9
		}
		return 0.05
	}},
}

// adversarialTrace is the regimes in turn, perRegime samples each, for a
// container of 2 cpus, deterministic.
func adversarialTrace(perRegime int) backtest.Trace {
	rng := rand.New(rand.NewPCG(29, 1))
	tr := backtest.Trace{Name: "adversarial", Interval: 100 * time.Millisecond, Allocation: resources.New(2, 512, 0)}
	for r, reg := range adversarialRegimes {
		for i := range perRegime {
			j := r*perRegime + i
			tr.Points = append(tr.Points, backtest.Point{Offset: time.Duration(j+1) * tr.Interval, CPU: reg.cpu(rng, i)})
		}
	}
	return tr
}

// violationsByRegime replays the adversarial trace through est and returns
// each regime's violation rate (the backtest's definition, sample by
// sample) over the whole regime and over its second half.
func violationsByRegime(t *testing.T, est estimator.Estimator, tr backtest.Trace, perRegime int) (whole, lateHalf []float64) {
	t.Helper()
	var history []estimator.Sample
	offered := 0.0
	violated := make([]bool, len(tr.Points))
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for j, p := range tr.Points {
		ideal := max(0, 2-p.CPU)
		violated[j] = j > 0 && offered-ideal > 0.05
		at := epoch.Add(p.Offset)
		history = append(history, estimator.Sample{Time: at, CPU: p.CPU})
		if len(history) > 1200 {
			history = history[1:]
		}
		offered = est.Estimate(estimator.Input{Now: at, Containers: []estimator.Container{
			{ID: "g", Allocated: tr.Allocation, History: history},
		}}).CPUs()
	}
	rate := func(from, to int) float64 {
		n := 0
		for _, v := range violated[from:to] {
			if v {
				n++
			}
		}
		return float64(n) / float64(to-from)
	}
	for r := range adversarialRegimes {
		from := r * perRegime
		whole = append(whole, rate(max(1, from), from+perRegime))
		lateHalf = append(lateHalf, rate(from+perRegime/2, from+perRegime))
	}
	return whole, lateHalf
}

// TestCalibratedAdversarialRegimes: on a sequence whose kind of load
// changes every four minutes, the calibrated estimator's violation rate in
// every regime stays within the bound that holds for any run of n
// estimates, α + (α_max + dγ)/(γn) (estimator.WindowViolationBound): the
// rate comes back to the target after each change instead of settling on
// what the previous regime taught. fast, whose margin is fixed, violates
// far more in the spiky regimes, which is why this test fails on it.
func TestCalibratedAdversarialRegimes(t *testing.T) {
	t.Parallel()
	const perRegime = 2400 // four minutes at 100 ms
	tr := adversarialTrace(perRegime)
	cfg := estimator.DefaultConfig()
	cal := cfg.Calibration
	bound := estimator.WindowViolationBound(cal.TargetViolation, cal.Gamma, perRegime, 1)
	calibrated, err := estimator.New("calibrated", cfg)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := estimator.New("fast", cfg)
	if err != nil {
		t.Fatal(err)
	}
	cw, cl := violationsByRegime(t, calibrated, tr, perRegime)
	fw, _ := violationsByRegime(t, fast, tr, perRegime)
	var b strings.Builder
	fastOver := false
	for r, reg := range adversarialRegimes {
		fmt.Fprintf(&b, "%-10s calibrated %.2f%% (second half %.2f%%)  fast %.2f%%\n", reg.name, 100*cw[r], 100*cl[r], 100*fw[r])
		if cw[r] > bound {
			t.Errorf("regime %d (%s): calibrated violates %.2f%%, above the window bound %.2f%%", r, reg.name, 100*cw[r], 100*bound)
		}
		if half := estimator.WindowViolationBound(cal.TargetViolation, cal.Gamma, perRegime/2, 1); cl[r] > half {
			t.Errorf("regime %d (%s): calibrated violates %.2f%% in its second half, above the window bound %.2f%%", r, reg.name, 100*cl[r], 100*half)
		}
		fastOver = fastOver || fw[r] > bound
	}
	t.Logf("window bound %.2f%%\n%s", 100*bound, b.String())
	if !fastOver {
		t.Errorf("fast stays within %.2f%% in every regime: the sequence is not adversarial enough to tell the estimators apart", 100*bound)
	}
	if stats := calibrated.(estimator.Explainer).Explain().Calibration; stats.ViolationRate() > estimator.ViolationBound(cal.TargetViolation, cal.Gamma, stats.Resolved, 1) {
		t.Errorf("whole sequence: %.3f%% violations, above the long-run bound", 100*stats.ViolationRate())
	}
}

// TestCalibratedDelayedAndMissingFeedback: an outcome is scored only once
// every container's samples cover its horizon. Samples that arrive one
// estimate late delay each outcome by one more estimate (d = 2 in the
// bound); samples that stop arriving leave estimates unmeasured, which
// count as violations once maxPendingEstimates wait, until the calibration
// pauses and nothing is offered.
func TestCalibratedDelayedAndMissingFeedback(t *testing.T) {
	t.Parallel()
	const step = 100 * time.Millisecond
	run := func(t *testing.T, n int, visible func(i int) int) (estimator.Explanation, []float64) {
		est := newEstimator(t, "calibrated", estimator.DefaultConfig())
		var all []estimator.Sample
		var out []float64
		for i := range n {
			now := t0.Add(time.Duration(i+1) * step)
			all = append(all, estimator.Sample{Time: now, CPU: 0.2})
			history := all[:visible(i)]
			out = append(out, est.Estimate(estimator.Input{Now: now, Containers: []estimator.Container{
				guaranteed("g", "cpus:2", history),
			}}).CPUs())
		}
		return est.(estimator.Explainer).Explain(), out
	}
	t.Run("one estimate late", func(t *testing.T) {
		t.Parallel()
		ex, out := run(t, 300, func(i int) int { return i }) // the newest sample is not there yet
		c := ex.Calibration
		if c.MaxDelay != 2 || c.Resolved != 298 || c.Unresolved != 0 || c.Violations != 0 {
			t.Errorf("delay %d, %d scored, %d unmeasured, %v violations; want 2, 298, 0, 0", c.MaxDelay, c.Resolved, c.Unresolved, c.Violations)
		}
		if out[len(out)-1] < 1.5 {
			t.Errorf("estimate %v for a container using 0.2 of 2 cpus", out[len(out)-1])
		}
	})
	t.Run("samples stop", func(t *testing.T) {
		t.Parallel()
		ex, out := run(t, 400, func(i int) int { return min(i+1, 100) }) // the monitor stalls after 10 s
		c := ex.Calibration
		if c.Unresolved == 0 || !c.Paused || out[len(out)-1] != 0 {
			t.Errorf("%d unmeasured, paused %v, estimate %v: want unmeasured estimates to pause offers", c.Unresolved, c.Paused, out[len(out)-1])
		}
		if ex.Limiting != "" || !strings.Contains(ex.Reason(), "paused") {
			t.Errorf("limiting %q, reason %q: want the pause explained", ex.Limiting, ex.Reason())
		}
	})
}

// fastTargetHeldout adds the held-out traces where fast breaks the bound to
// TestFastHeldToTarget (long: each replay of a 30-minute trace takes
// seconds).
var fastTargetHeldout = flag.Bool("fast-target-heldout", false, "TestFastHeldToTarget: also the held-out traces")

// TestFastHeldToTarget is the honest comparison on the traces where fast
// itself breaks calibrated's bound (where "at least fast's harvest" says
// little: fast buys it with violations above the target): fast held to the
// target in hindsight, its margin raised in steps of 0.5% of the
// allocation until its violation rate on that very trace is at most the
// target. That is an oracle (its margin is chosen knowing the trace);
// calibrated harvests at least as much as it (before the third expert,
// #29, it did not: bursty 43.5% against 46.8%, queue 71.1% against
// 72.4%).
//
//	go test ./estimator -run TestFastHeldToTarget -v [-args -fast-target-heldout]
func TestFastHeldToTarget(t *testing.T) {
	t.Parallel()
	want := map[string]struct{ margin, harvest float64 }{
		"bursty": {0.105, 0.468},
		"queue":  {0.07, 0.724},
	}
	scenarios := recordedScenarios(t)
	if *fastTargetHeldout {
		scenarios = append(scenarios, heldoutScenarios(t)...)
	}
	cfg := estimator.DefaultConfig()
	for _, sc := range scenarios {
		w, ok := want[sc.Name]
		if !ok {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			var held backtest.Result
			margin := cfg.Fast.Margin
			for ; margin < 0.5; margin += 0.005 {
				c := cfg
				c.Fast.Margin = margin
				est, err := estimator.New("fast", c)
				if err != nil {
					t.Fatal(err)
				}
				if held, err = backtest.Replay("fast", est, sc, backtest.DefaultOptions()); err != nil {
					t.Fatal(err)
				}
				if held.ViolationRate <= cfg.Calibration.TargetViolation {
					break
				}
			}
			res, _ := replayCalibrated(t, cfg, sc)
			t.Logf("fast held to the target: margin %.1f%%, harvest %.1f%% at %.2f%%; calibrated %.1f%% at %.2f%%",
				100*margin, 100*held.Harvest, 100*held.ViolationRate, 100*res.Harvest, 100*res.ViolationRate)
			if math.Abs(margin-w.margin) > 1e-9 || math.Abs(held.Harvest-w.harvest) > 0.0005 {
				t.Errorf("fast held to the target: margin %.3f harvest %.4f, doc.go says %.3f and %.3f", margin, held.Harvest, w.margin, w.harvest)
			}
			if res.Harvest < held.Harvest {
				t.Errorf("calibrated %.2f%%, below fast held to the target (%.2f%%)", 100*res.Harvest, 100*held.Harvest)
			}
		})
	}
}
