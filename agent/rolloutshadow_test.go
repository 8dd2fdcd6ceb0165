package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/estimator/backtest"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// rolloutShadowRig drives an estimate loop with a rollout shadow on a
// recorded trace, through the monitor (fake cgroup files), on logical
// time, beside a loop without one.
type rolloutShadowRig struct {
	t              *testing.T
	trace          backtest.Trace
	m              *monitor.Monitor
	write          func(rel, content string)
	target         monitor.Target
	shadowed       *estimateLoop
	plain          *estimateLoop
	rollout        *rolloutShadow
	usec           float64
	j              int
	interval       time.Duration
	points, plain2 []monitor.Point
}

func newRolloutShadowRig(t *testing.T) *rolloutShadowRig {
	t.Helper()
	tr, err := backtest.ReadTraceFile("../estimator/testdata/bursty.csv")
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Insecure = true
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	opt := backtest.DefaultOptions()
	m, write := fakeMonitorNode(t, int(opt.History/opt.EstimateInterval))
	cz := newFakeContainerizer()
	_, _ = cz.Launch(context.Background(), containerizer.Spec{ContainerID: "bursty", Resources: tr.Allocation})
	target := monitor.Target{ID: "bursty", CgroupPath: "r/bursty"}
	m.SetTargets([]monitor.Target{target})
	r := &rolloutShadowRig{t: t, trace: tr, m: m, write: write, target: target, interval: opt.EstimateInterval}
	newLoop := func() (*estimateLoop, Config) {
		ctl, err := o.NewControllers()
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Logger: quietLog(), Monitor: m, Containerizer: cz, Estimator: ctl.Estimator, QoS: ctl.QoS,
			EstimatorName: ctl.EstimatorName, QoSControllerNames: ctl.QoSNames, profiles: o.profileBuilder()}
		return newEstimateLoop(cfg, resources.Resources{}, nil, nil), cfg
	}
	var cfg Config
	r.shadowed, cfg = newLoop()
	r.plain, _ = newLoop()
	r.rollout = newRolloutShadow(cfg)
	r.shadowed.rollout = r.rollout
	return r
}

// run feeds n more samples of the trace to both loops, estimating after
// each, and checks that the shadow never changes what is published.
func (r *rolloutShadowRig) run(n int) {
	r.t.Helper()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range n {
		p := r.trace.Points[r.j%len(r.trace.Points)]
		r.j++
		now := epoch.Add(time.Duration(r.j) * r.interval)
		r.usec += p.CPU * float64(r.interval.Microseconds())
		r.write("cgroup/r/bursty/cpu.stat", fmt.Sprintf("usage_usec %d\n", int64(r.usec)))
		r.write("cgroup/r/bursty/memory.current", fmt.Sprint(p.MemBytes))
		if err := r.m.Sample(now); err != nil {
			r.t.Fatal(err)
		}
		r.shadowed.adoptProfile()
		r.plain.adoptProfile()
		var e, ep *estimate
		e, r.points = r.shadowed.estimate(now, r.points)
		ep, r.plain2 = r.plain.estimate(now, r.plain2)
		if !e.revocable.Equal(ep.revocable) {
			r.t.Fatalf("sample %d: the loop with a rollout shadow published %v, without %v", r.j, e.revocable, ep.revocable)
		}
	}
}

// report is a heartbeat's profile report part for what the loop runs.
func (r *rolloutShadowRig) report(profile string, version uint64) *slacklinev1.ProfileReport {
	rep := &slacklinev1.ProfileReport{Profile: profile, Version: version}
	r.rollout.fill(rep)
	return rep
}

// TestRolloutShadowScoresCandidateBesideActive: a rollout's shadow of a
// candidate that offers far more than the node has scores every sample
// the active estimator is scored on, violating where the active one does
// not, and never changes what is published; the comparison restarts when
// the active settings change (and is not reported for settings the loop
// has not adopted yet), and stops on command.
func TestRolloutShadowScoresCandidateBesideActive(t *testing.T) {
	t.Parallel()
	r := newRolloutShadowRig(t)
	if rep := r.report("", 0); !rep.GetShadowCapable() || rep.GetShadowProfile() != "" {
		t.Fatalf("before any shadow: %v, want capable and none running", rep)
	}
	// A 5 s window: a 5 s warm-up, 50 inputs of the rig's 100 ms.
	greedy := &slacklinev1.ProfileShadowCommand{Profile: "web", Version: 2, Settings: "estimator: fixed\nfixed-revocable: cpus:64\nestimator-window: 5s"}
	if err := r.rollout.apply(greedy); err != nil {
		t.Fatal(err)
	}
	r.run(50)
	if rep := r.report("", 0); rep.GetShadowVersion() != 2 || rep.GetShadowEstimatesScored() != 0 || rep.GetShadowActiveEstimatesScored() != 0 {
		t.Errorf("warming up: shadow version %d, scored %d in shadow and %d active; want version 2 and no counters yet",
			rep.GetShadowVersion(), rep.GetShadowEstimatesScored(), rep.GetShadowActiveEstimatesScored())
	}
	r.run(250)
	rep := r.report("", 0)
	if rep.GetShadowProfile() != "web" || rep.GetShadowVersion() != 2 {
		t.Fatalf("shadow %s/%d, want web/2", rep.GetShadowProfile(), rep.GetShadowVersion())
	}
	// Both restart at input 51, 5 s after the first; the estimate made
	// then is in force at the next sample: 249 samples scored, the same
	// ones for both.
	if rep.GetShadowEstimatesScored() != 249 || rep.GetShadowActiveEstimatesScored() != 249 {
		t.Errorf("scored %d in shadow, %d active; want 249 each, the same samples past the warm-up", rep.GetShadowEstimatesScored(), rep.GetShadowActiveEstimatesScored())
	}
	if rep.GetShadowViolations() != 249 || rep.GetShadowActiveViolations() > 0.05*249 {
		t.Errorf("violations %v in shadow, %v active; want every sample in shadow (64 cores offered), few active",
			rep.GetShadowViolations(), rep.GetShadowActiveViolations())
	}

	// The same command again changes nothing.
	if err := r.rollout.apply(greedy); err != nil || r.report("", 0).GetShadowEstimatesScored() != 249 {
		t.Errorf("the same shadow again: %v, scores restarted", err)
	}

	// A profile is applied: until the loop adopts it the heartbeat (which
	// names the new version) carries no active counters; then both
	// restart on the new active settings, after the longer warm-up of the
	// two estimators (the new active one's 8 s: 80 inputs).
	if err := r.applyProfile("web", 1, "estimator-target-violation: 0.02\nestimator-window: 8s"); err != nil {
		t.Fatal(err)
	}
	if rep := r.report("web", 1); rep.GetShadowActiveEstimatesScored() != 0 || rep.GetShadowEstimatesScored() != 0 || rep.GetShadowVersion() != 2 {
		t.Errorf("before adoption: %d active, %d in shadow of version %d; want no counters for web/1 yet", rep.GetShadowActiveEstimatesScored(), rep.GetShadowEstimatesScored(), rep.GetShadowVersion())
	}
	r.run(80)
	if rep := r.report("web", 1); rep.GetShadowActiveEstimatesScored() != 0 || rep.GetShadowEstimatesScored() != 0 {
		t.Errorf("warming up after adoption: %d active, %d in shadow; want no counters yet", rep.GetShadowActiveEstimatesScored(), rep.GetShadowEstimatesScored())
	}
	r.run(50)
	if rep := r.report("web", 1); rep.GetShadowActiveEstimatesScored() != 49 || rep.GetShadowEstimatesScored() != 49 {
		t.Errorf("after adoption: %d active, %d in shadow; want both restarted past the warm-up: 49", rep.GetShadowActiveEstimatesScored(), rep.GetShadowEstimatesScored())
	}

	// Stop.
	if err := r.rollout.apply(&slacklinev1.ProfileShadowCommand{}); err != nil {
		t.Fatal(err)
	}
	if rep := r.report("web", 1); rep.GetShadowProfile() != "" || rep.GetShadowEstimatesScored() != 0 {
		t.Errorf("after stop: %v, want no shadow", rep)
	}
	r.run(5)

	// Settings the agent cannot build are refused, saying why.
	if err := r.rollout.apply(&slacklinev1.ProfileShadowCommand{Profile: "web", Version: 3, Settings: "estimator-window: -1s"}); err == nil {
		t.Fatal("bad settings were run in shadow")
	}
	if rep := r.report("web", 1); rep.GetShadowRefusedProfile() != "web" || rep.GetShadowRefusedVersion() != 3 ||
		!strings.Contains(rep.GetShadowRefusal(), "window") || rep.GetShadowProfile() != "" {
		t.Errorf("after a refusal: %v, want web/3 refused naming the window", rep)
	}
}

// applyProfile applies a profile to both loops, as the agent's
// applyProfile does (a loop adopts it at its next pass).
func (r *rolloutShadowRig) applyProfile(name string, version uint64, settings string) error {
	for _, l := range []*estimateLoop{r.shadowed, r.plain} {
		built, err := r.rollout.build(name, settings)
		if err != nil {
			return err
		}
		built.profile, built.version = name, version
		l.next.Store(&built)
	}
	return nil
}

// TestRolloutShadowCapability: an agent without an estimator, or whose
// --shadow candidates fill every slot, cannot run a rollout's shadow: it
// says so on its heartbeats and refuses one, saying why.
func TestRolloutShadowCapability(t *testing.T) {
	t.Parallel()
	full := shadowOptions(t) // two --shadow candidates
	shadows, err := full.NewShadows()
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := full.NewControllers()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"no estimator": {Config{profiles: full.profileBuilder()}, "no estimator"},
		"slots full":   {Config{Estimator: ctl.Estimator, QoS: ctl.QoS, profiles: full.profileBuilder(), Shadows: shadows}, "runs 2 shadows (--shadow), at most 2"},
	} {
		s := newRolloutShadow(tc.cfg)
		rep := &slacklinev1.ProfileReport{}
		s.fill(rep)
		if rep.GetShadowCapable() {
			t.Errorf("%s: reports it can shadow", name)
		}
		err := s.apply(&slacklinev1.ProfileShadowCommand{Profile: "web", Version: 2, Settings: "estimator: fast"})
		s.fill(rep)
		if err == nil || !strings.Contains(rep.GetShadowRefusal(), tc.want) || rep.GetShadowProfile() != "" {
			t.Errorf("%s: apply: %v, report %v; want a refusal containing %q", name, err, rep, tc.want)
		}
	}
}
