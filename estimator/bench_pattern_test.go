package estimator_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
)

// benchPattern is scripts/bench/slack's load replayed in logical time: a
// guaranteed container of 2 cpus burns them for 3.5 s (its first and last
// samples partial: the burst starts and ends within a sample), then idles
// until an estimate of at least 1 cpu is published and, after that, for
// idle samples more (0: the burst restarts at once, as the bench did
// before --idle), trials times. The agent's estimate runs 10 ms after
// each sample; lag is how many of the newest samples it has not seen yet
// (0: estimates follow samples, as the agent does now; 1: the two loops
// ticking independently, as it did before).
//
// With dipEvery n > 0, every n-th trial's burn has, a second before it
// ends, a dip: the task starved of CPU for 0.4 s (about 1 cpu), which the
// estimate offers and takes back, so that its slack comes shortly after
// another change (the slack bench's slow trials on a quiet machine: the
// pacer held the second step of their rise for up to RiseInterval).
type benchPattern struct {
	trials   int
	idle     func(rng *rand.Rand) int
	lag      int
	dipEvery int
	// With sagEvery n > 0, every n-th trial's burn sags to sagLevel-
	// sagLevel+0.15 cpus for its last sagFor samples (the task losing a
	// little CPU to other processes just before it stops, as on a machine
	// that is quiet but not idle), so that the estimate rises a little a
	// few hundred milliseconds before the slack appears.
	sagEvery int
	sagFor   int
	sagLevel float64
	// With briefDips, the burn holds about burnLevel cpus (default 1.9-2)
	// with a dip of half a second to about 1 cpu in every second, and ends
	// in steps (its last two samples at about 1.1 cpus, the one it stops
	// in at about 0.55, then idle at about 0.25: its task forks a sleep
	// every 20 ms): the slack bench's burn on a machine quiet but not
	// idle, as its estimate log showed it (#29). A short confirmation
	// offers each dip and loses it, so the expert held to the last
	// second's peak is published.
	briefDips bool
	burnLevel float64
}

// benchResult is what a replay of a benchPattern measured: each trial's
// wait from the first idle sample to the offer, the violations scored
// (the backtest's definition: an estimate above the real slack of the
// next sample by more than 0.05 cores) and how many estimates.
type benchResult struct {
	waits      []time.Duration
	dipped     []bool // per trial: whether its burn dipped or sagged
	violations int
	estimates  int
	// longPublished counts the trials whose last burning estimate was
	// published from an expert held to the last second's peak.
	longPublished int
}

func (p benchPattern) replay(t *testing.T, name string) benchResult {
	t.Helper()
	const step = 100 * time.Millisecond
	est := newEstimator(t, name, estimator.DefaultConfig())
	rng := rand.New(rand.NewPCG(29, 7))
	var all []estimator.Sample
	var res benchResult
	offered := 0.0
	sample := func(cpu float64) float64 {
		res.estimates++
		at := t0.Add(time.Duration(res.estimates) * step)
		if offered-(2-cpu) > 0.05 {
			res.violations++
		}
		all = append(all, estimator.Sample{Time: at, CPU: cpu})
		if len(all) > 3000 {
			all = all[1:]
		}
		offered = est.Estimate(estimator.Input{Now: at.Add(10 * time.Millisecond), Containers: []estimator.Container{
			guaranteed("g", "cpus:2", all[:len(all)-p.lag]),
		}}).CPUs()
		return offered
	}
	idleCPU := func() float64 { return 0.01 + 0.02*rng.Float64() }
	if p.briefDips {
		// The bench's idle task forks a sleep every 20 ms: a quarter of
		// a core on a busy machine.
		idleCPU = func() float64 { return 0.2 + 0.1*rng.Float64() }
	}
	for trial := range p.trials {
		if trial > 0 {
			for range p.idle(rng) {
				sample(idleCPU())
			}
		}
		sample(2 * rng.Float64()) // the burst starts within this sample
		dip := p.dipEvery > 0 && trial%p.dipEvery == p.dipEvery-1
		sag := p.sagEvery > 0 && trial%p.sagEvery == p.sagEvery-1
		for i := range 34 {
			if p.briefDips {
				level := max(p.burnLevel, 1.2) - 0.1 + 0.1*rng.Float64()
				switch {
				case i >= 32:
					level = 1.05 + 0.1*rng.Float64()
				case i%10 >= 3 && i%10 < 8:
					level = 0.9 + 0.2*rng.Float64()
				}
				sample(level)
				continue
			}
			if sag && i >= 34-p.sagFor {
				sample(p.sagLevel + 0.15*rng.Float64())
				continue
			}
			if dip && i >= 20 && i < 24 {
				sample(0.9 + 0.2*rng.Float64())
				continue
			}
			sample(1.9 + 0.1*rng.Float64())
		}
		if ex, ok := est.(estimator.Explainer); ok && ex.Explain().Expert == 1 {
			res.longPublished++
		}
		if p.briefDips {
			sample(0.5 + 0.1*rng.Float64()) // stops within this one
		} else {
			sample(2 * rng.Float64()) // and stops within this one
		}
		waited := 0
		for sample(idleCPU()) < 1 {
			if waited++; waited > 3000 {
				ex := est.(estimator.Explainer).Explain()
				t.Fatalf("%s: trial %d: no offer within 300 s: %+v", name, trial, ex)
			}
		}
		res.waits = append(res.waits, time.Duration(waited+1)*step)
		res.dipped = append(res.dipped, dip || sag)
	}
	return res
}

func (r benchResult) rate() float64 { return float64(r.violations) / float64(r.estimates) }

func (r benchResult) quantile(q float64) time.Duration {
	w := slices.Sorted(slices.Values(r.waits))
	return w[int(q*float64(len(w)-1))]
}

// TestCalibratedBenchPattern is why scripts/bench/slack keeps the node idle
// after each offer (#29). When each burst restarts as soon as its slack
// is offered, every offer is followed by an unforeseeable onset, i.e. a
// violation, every few seconds: fast, offering after its second every
// time, violates well above 1%, and calibrated keeps its 1% bound only by
// holding offers back for seconds. That is the estimator doing what it
// promises on a load whose slack does not last, not slowness. When the
// slack lasts (10-20 s idle, random), the onsets are rare enough and
// calibrated offers every trial after the first few within its
// confirmation plus a sample, with one or two violations per onset as long
// as estimates follow samples; one sample of lag (the agent's loops
// ticking independently, as they did) adds one more, enough to make the
// calibration hold offers back for seconds again.
func TestCalibratedBenchPattern(t *testing.T) {
	t.Parallel()
	const trials = 60
	cal := estimator.DefaultConfig().Calibration
	atOnce := func(*rand.Rand) int { return 0 }
	lasting := func(rng *rand.Rand) int { return 100 + rng.IntN(101) }

	fastAtOnce := benchPattern{trials: trials, idle: atOnce}.replay(t, "fast")
	calAtOnce := benchPattern{trials: trials, idle: atOnce}.replay(t, "calibrated")
	calLasting := benchPattern{trials: trials, idle: lasting}.replay(t, "calibrated")
	calLastingLag := benchPattern{trials: trials, idle: lasting, lag: 1}.replay(t, "calibrated")
	for _, r := range []struct {
		name string
		res  benchResult
	}{{"fast, reclaimed at once", fastAtOnce}, {"calibrated, reclaimed at once", calAtOnce},
		{"calibrated, lasting", calLasting}, {"calibrated, lasting, one sample of lag", calLastingLag}} {
		t.Logf("%-40s wait p50 %v p99 %v; %d violations in %d estimates (%.2f%%)",
			r.name, r.res.quantile(0.5), r.res.quantile(0.99), r.res.violations, r.res.estimates, 100*r.res.rate())
	}
	if fastAtOnce.rate() <= cal.TargetViolation {
		t.Errorf("fast violates %.2f%% when slack is reclaimed at once: want above the %.0f%% target (the pattern must be one the target forbids)",
			100*fastAtOnce.rate(), 100*cal.TargetViolation)
	}
	if bound := estimator.ViolationBound(cal.TargetViolation, cal.Gamma, calAtOnce.estimates, 2); calAtOnce.rate() > bound {
		t.Errorf("calibrated violates %.2f%% when slack is reclaimed at once, above its bound %.2f%%", 100*calAtOnce.rate(), 100*bound)
	}
	if calAtOnce.quantile(0.5) < 2*time.Second {
		t.Errorf("calibrated offers slack that is reclaimed at once after %v (median): it cannot, and keep its bound", calAtOnce.quantile(0.5))
	}
	// Lasting slack: after a warm-up of five trials, every offer within the
	// confirmation and a sample.
	limit := cal.Confirm + 100*time.Millisecond
	for i, w := range calLasting.waits[5:] {
		if w > limit {
			t.Errorf("lasting slack, trial %d: offered after %v, want at most %v", i+5, w, limit)
		}
	}
	// One violation per onset (the estimate before it), two when its first
	// sample saw less than half of it (fast's onset rule predicts it rises
	// as much again): about 1.5 on average.
	if calLasting.violations > 3*trials/2 {
		t.Errorf("lasting slack: %d violations in %d onsets, want at most 1.5 per onset", calLasting.violations, trials)
	}
	if calLastingLag.violations < 3*calLasting.violations/2 {
		t.Errorf("with a sample of lag %d violations, without %d: the lag should cost a violation more per onset",
			calLastingLag.violations, calLasting.violations)
	}
}

// TestCalibratedBenchPatternChangeBefore: slack that lasts, coming
// shortly after another change of the estimate (a dip in the burn a
// second before it ends, every third trial), is offered within the
// confirmation and a sample like the rest (#29): the pacer sends a
// lasting rise at once. With the pacer before, which sent a
// second step at once only after two seconds without any change, those
// trials waited up to RiseInterval more (p99 0.7 s where the others took
// 0.3 s), the slack bench's tail.
func TestCalibratedBenchPatternChangeBefore(t *testing.T) {
	t.Parallel()
	const trials = 60
	cal := estimator.DefaultConfig().Calibration
	lasting := func(rng *rand.Rand) int { return 150 + rng.IntN(101) }
	res := benchPattern{trials: trials, idle: lasting, dipEvery: 3}.replay(t, "calibrated")
	var dipped []time.Duration
	for i, w := range res.waits {
		if res.dipped[i] {
			dipped = append(dipped, w)
		}
	}
	slices.Sort(dipped)
	t.Logf("wait p50 %v p99 %v, after a dip %v-%v; %d violations in %d estimates (%.2f%%)",
		res.quantile(0.5), res.quantile(0.99), dipped[0], dipped[len(dipped)-1], res.violations, res.estimates, 100*res.rate())
	if bound := estimator.ViolationBound(cal.TargetViolation, cal.Gamma, res.estimates, 2); res.rate() > bound {
		t.Errorf("violations %.2f%%, above the bound %.2f%%", 100*res.rate(), 100*bound)
	}
	limit := cal.Confirm + 100*time.Millisecond
	for i, w := range res.waits[5:] {
		if w > limit {
			t.Errorf("trial %d (dipped %v): offered after %v, want at most %v", i+5, res.dipped[i+5], w, limit)
		}
	}
}

// TestCalibratedBenchPatternSagBefore: slack that lasts, coming a few
// hundred milliseconds after a small rise (the burn sagging by a quarter
// of a core in its last 200-300 ms, every other trial), is offered within
// the confirmation and a sample like the rest (#29). This was the slack
// bench's slow quarter of trials on a quiet machine (0.5-0.87 s, 0.26-0.37
// s of it pacing): the sag's rise was sent, the first step of the slack's
// rise came within RiseInterval of it and was held, and the pacer sent a
// lasting rise at once only when the estimate before it had sent a rise,
// so the second step waited for the interval too (and when the first step
// was within hysteresis, the lasting rise was held for a sample). Here, on
// the pacer before: sagged trials 300-800 ms (sagging for 2 samples) and
// 400 ms (for 3), the others 200-300 ms.
func TestCalibratedBenchPatternSagBefore(t *testing.T) {
	t.Parallel()
	const trials = 40
	cal := estimator.DefaultConfig().Calibration
	lasting := func(rng *rand.Rand) int { return 150 + rng.IntN(101) }
	limit := cal.Confirm + 100*time.Millisecond
	for _, sagFor := range []int{2, 3} {
		res := benchPattern{trials: trials, idle: lasting, sagEvery: 2, sagFor: sagFor, sagLevel: 1.6}.replay(t, "calibrated")
		var sagged []time.Duration
		for i, w := range res.waits {
			if res.dipped[i] {
				sagged = append(sagged, w)
			}
		}
		slices.Sort(sagged)
		t.Logf("sag for %d samples: wait p50 %v p99 %v, sagged %v-%v; %d violations in %d estimates (%.2f%%)",
			sagFor, res.quantile(0.5), res.quantile(0.99), sagged[0], sagged[len(sagged)-1], res.violations, res.estimates, 100*res.rate())
		if bound := estimator.ViolationBound(cal.TargetViolation, cal.Gamma, res.estimates, 2); res.rate() > bound {
			t.Errorf("sag for %d samples: violations %.2f%%, above the bound %.2f%%", sagFor, 100*res.rate(), 100*bound)
		}
		for i, w := range res.waits[5:] {
			if w > limit {
				t.Errorf("sag for %d samples, trial %d (sagged %v): offered after %v, want at most %v", sagFor, i+5, res.dipped[i+5], w, limit)
			}
		}
	}
}

// TestCalibratedBenchPatternLongExpert: slack that lasts, left by a load
// whose dips are brief (so the expert held to the last second's peak is
// published) and which ends in steps, is offered within the confirmation
// and a sample like the rest (#29). The slack bench's estimate log on main
// showed it: the guaranteed task held 1.1-1.6 cpus, its use fell in steps,
// the long expert's large-fall exemption (a core between the confirmation
// before the last and the last) never held, and it kept the slack back for
// its whole second (0.77-1.04 s in 10 of 20 trials). After a large fall that has held
// for the short confirmation, no long expert is published. Before that,
// this replay's trials waited 0.9-1.2 s (p50 1.1 s). With the burn at 2
// cpus instead, the old exemption holds, and the change costs one trial
// (the sixth, 1.2 s where it took 200 ms): not asserted here, reported in
// doc.go.
func TestCalibratedBenchPatternLongExpert(t *testing.T) {
	t.Parallel()
	const trials = 40
	cal := estimator.DefaultConfig().Calibration
	lasting := func(rng *rand.Rand) int { return 100 + rng.IntN(101) }
	limit := cal.Confirm + 100*time.Millisecond
	res := benchPattern{trials: trials, idle: lasting, briefDips: true, burnLevel: 1.5}.replay(t, "calibrated")
	t.Logf("wait p50 %v p99 %v; long expert published at %d of %d burns' ends; %d violations in %d estimates (%.2f%%)",
		res.quantile(0.5), res.quantile(0.99), res.longPublished, trials, res.violations, res.estimates, 100*res.rate())
	if res.longPublished < trials/2 {
		t.Errorf("the long expert was published at the end of %d of %d burns: the pattern must make it the published one", res.longPublished, trials)
	}
	if bound := estimator.ViolationBound(cal.TargetViolation, cal.Gamma, res.estimates, 2); res.rate() > bound {
		t.Errorf("violations %.2f%%, above the bound %.2f%%", 100*res.rate(), 100*bound)
	}
	for i, w := range res.waits[5:] {
		if w > limit {
			t.Errorf("trial %d: offered after %v, want at most %v", i+5, w, limit)
		}
	}
}
