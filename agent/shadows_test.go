package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/shadow"
	"github.com/slackline/slackline/estimator/backtest"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// shadowCandidates are the two candidates of the shadow tests: the
// calibrated estimator held to a looser target with fast's confirmation,
// and fast.
var shadowCandidates = []struct{ name, settings string }{
	{"loose", "estimator-target-violation: 0.05\nestimator-calibrated-confirm: 1s\n"},
	{"fast", `{"estimator": "fast", "estimator-safety-margin": 0.1}`},
}

func shadowOptions(t testing.TB) Options {
	t.Helper()
	o := DefaultOptions()
	o.Insecure = true // the test listens nowhere
	for _, c := range shadowCandidates {
		o.Shadows = append(o.Shadows, ShadowSpec{Name: c.name, File: c.name + ".yaml", Data: []byte(c.settings)})
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestShadowEqualsReplay: two recorded traces (bursty and cron) run as
// the guaranteed containers of the agent's estimate loop, through the
// monitor (fake cgroup files) on logical time, with two shadows. Each
// shadow's report, and the active settings', equals what
// slackline-backtest's Replay reports for a fresh estimator of the same
// settings on the usage the monitor recorded, exactly; and the estimates
// the loop published equal, one by one, those of a loop without shadows.
func TestShadowEqualsReplay(t *testing.T) {
	t.Parallel()
	var traces []backtest.Trace
	for _, name := range []string{"bursty", "cron"} {
		tr, err := backtest.ReadTraceFile("../estimator/testdata/" + name + ".csv")
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, tr)
	}
	o := shadowOptions(t)
	opt := backtest.DefaultOptions()
	m, write := fakeMonitorNode(t, int(opt.History/opt.EstimateInterval))
	cz := newFakeContainerizer()
	var targets []monitor.Target
	for i, tr := range traces {
		id := fmt.Sprintf("%s-%d", tr.Name, i)
		_, _ = cz.Launch(context.Background(), containerizer.Spec{ContainerID: id, Resources: tr.Allocation})
		targets = append(targets, monitor.Target{ID: id, CgroupPath: "r/" + id})
	}
	m.SetTargets(targets)

	newLoop := func(withShadows bool) *estimateLoop {
		ctl, err := o.NewControllers()
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Logger: quietLog(), Monitor: m, Containerizer: cz, Estimator: ctl.Estimator,
			EstimatorName: ctl.EstimatorName, QoSControllerNames: ctl.QoSNames}
		if withShadows {
			if cfg.Shadows, err = o.NewShadows(); err != nil {
				t.Fatal(err)
			}
		}
		l := newEstimateLoop(cfg, resources.Resources{}, nil, nil)
		l.shadows = newShadowSet(cfg)
		return l
	}
	shadowed, plain := newLoop(true), newLoop(false)

	// The usage the monitor recorded, as traces to replay.
	recorded := make([]backtest.Trace, len(traces))
	for i, tr := range traces {
		recorded[i] = backtest.Trace{Name: tr.Name, Interval: opt.EstimateInterval, Allocation: tr.Allocation}
	}
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // backtest's
	usec := make([]float64, len(traces))
	var points, plainPoints []monitor.Point
	n := len(traces[0].Points)
	for j := range n {
		now := epoch.Add(time.Duration(j+1) * opt.EstimateInterval)
		for i, tr := range traces {
			usec[i] += tr.Points[j].CPU * float64(opt.EstimateInterval.Microseconds())
			id := targets[i].ID
			write("cgroup/r/"+id+"/cpu.stat", fmt.Sprintf("usage_usec %d\n", int64(usec[i])))
			write("cgroup/r/"+id+"/memory.current", fmt.Sprint(tr.Points[j].MemBytes))
		}
		if err := m.Sample(now); err != nil {
			t.Fatal(err)
		}
		for i := range traces {
			p := m.HistorySince(nil, targets[i].ID, now.Add(-time.Nanosecond))
			if len(p) != 1 || !p[0].Time.Equal(now) {
				t.Fatalf("sample %d of %s: monitor points %v", j, targets[i].ID, p)
			}
			recorded[i].Points = append(recorded[i].Points, backtest.Point{Offset: time.Duration(j) * opt.EstimateInterval,
				CPU: p[0].CPURate, MemBytes: p[0].MemWorkingSet})
		}
		var e, ep *estimate
		e, points = shadowed.estimate(now, points)
		ep, plainPoints = plain.estimate(now, plainPoints)
		if !e.revocable.Equal(ep.revocable) {
			t.Fatalf("at %v the loop with shadows published %v, without %v", now.Sub(epoch), e.revocable, ep.revocable)
		}
	}

	reports := shadowed.shadows.reports()
	if len(reports) != 1+len(shadowCandidates) {
		t.Fatalf("%d reports, want %d", len(reports), 1+len(shadowCandidates))
	}
	scenario := backtest.Scenario{Name: "recorded", Traces: recorded}
	for i, r := range reports {
		settings := o
		if i > 0 {
			c := shadowCandidates[i-1]
			var err error
			if settings, _, err = o.WithSettings(c.name, []byte(c.settings)); err != nil {
				t.Fatal(err)
			}
		}
		ctl, err := settings.NewControllers()
		if err != nil {
			t.Fatal(err)
		}
		want, err := backtest.Replay(r.Name, ctl.Estimator, scenario, opt)
		if err != nil {
			t.Fatal(err)
		}
		got := backtest.Result{Estimator: r.Name, Scenario: "recorded", Samples: r.Samples, MeanIdeal: r.MeanIdeal,
			MeanOffered: r.MeanOffered, Harvest: r.Harvest, SafeHarvest: r.SafeHarvest, ViolationRate: r.ViolationRate,
			MaxExcess: r.MaxExcess}
		want.MeanExcess, want.ExcessCoreSeconds, want.ChangesPerMinute, want.ShrinksPerMinute = 0, 0, 0, 0
		want.MeanTimeToOffer, want.Appearances, want.Missed = 0, 0, 0
		if got != want {
			t.Errorf("%s (%s): shadow report\n%+v\nreplay\n%+v", r.Name, r.Estimator, got, want)
		}
		if r.Samples != n-1 || r.Estimates != n || r.Unscored != 0 {
			t.Errorf("%s: %d samples scored, %d estimates, %d unscored; want %d, %d, 0", r.Name, r.Samples, r.Estimates, r.Unscored, n-1, n)
		}
		t.Logf("%s (%s): harvest %.1f%%, violations %.2f%% of %d samples", r.Name, r.Estimator, 100*r.Harvest, 100*r.ViolationRate, r.Samples)
	}
	// The candidates differ from the active settings: a test where they
	// all scored alike could not tell a shadow from the active estimator.
	if reports[0].MeanOffered == reports[1].MeanOffered || reports[0].MeanOffered == reports[2].MeanOffered {
		t.Errorf("a shadow offered the same as the active settings: %v, %v, %v", reports[0].MeanOffered, reports[1].MeanOffered, reports[2].MeanOffered)
	}
}

// TestGetShadowsAndMetrics: GetShadows and /metrics report the active
// settings and each shadow, with the candidate's settings and its QoS
// corrections, under a bounded shadow label.
func TestGetShadowsAndMetrics(t *testing.T) {
	t.Parallel()
	o := shadowOptions(t)
	shadows, err := o.NewShadows()
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{shadows: newShadowSet(Config{Shadows: shadows, EstimatorName: o.Estimator, QoSControllerNames: o.QoSControllers})}
	resp, err := nodeService{a}.GetShadows(context.Background(), connect.NewRequest(&slacklinev1.GetShadowsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Msg
	if r.GetActive().GetName() != shadow.ActiveName || r.GetActive().GetEstimator() != o.Estimator || len(r.GetShadows()) != 2 {
		t.Fatalf("GetShadows: %v", r)
	}
	loose := r.GetShadows()[0]
	var settings []string
	for _, s := range loose.GetSettings() {
		settings = append(settings, s.GetFlag()+"="+s.GetValue())
	}
	if got, want := strings.Join(settings, " "), "estimator-calibrated-confirm=1s estimator-target-violation=0.05"; loose.GetName() != "loose" || got != want {
		t.Errorf("shadow %q settings %q, want loose with %q", loose.GetName(), got, want)
	}
	if fast := r.GetShadows()[1]; fast.GetEstimator() != "fast" {
		t.Errorf("second shadow runs %q, want fast", fast.GetEstimator())
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(shadowCollector{a.shadows})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP slackline_agent_shadow_samples_scored_total Samples at which each setting's estimate in force was scored against the real slack.
# TYPE slackline_agent_shadow_samples_scored_total counter
slackline_agent_shadow_samples_scored_total{shadow="active"} 0
slackline_agent_shadow_samples_scored_total{shadow="fast"} 0
slackline_agent_shadow_samples_scored_total{shadow="loose"} 0
`), "slackline_agent_shadow_samples_scored_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "slackline_agent_shadow_corrections_total"); err != nil || n != 3*8 {
		t.Errorf("%d corrections series (%v), want 3 settings x 8 kinds", n, err)
	}
}

// TestShadowsActiveFollowsProfile: when a node profile replaces the active
// estimator, the "active" report names the new one (it kept the startup
// estimator's name) and scores it afresh, through the estimate loop's own
// adoption of the profile; the shadows are left as they are. (A profile
// cannot change --qos-controller, so the QoS names stay.)
func TestShadowsActiveFollowsProfile(t *testing.T) {
	t.Parallel()
	o := shadowOptions(t)
	m, write := fakeMonitorNode(t, 100)
	cz := newFakeContainerizer()
	_, _ = cz.Launch(context.Background(), containerizer.Spec{ContainerID: "g", Resources: resources.MustParse("cpus:2;mem:64")})
	m.SetTargets([]monitor.Target{{ID: "g", CgroupPath: "r/g"}})
	ctl, err := o.NewControllers()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Logger: quietLog(), Monitor: m, Containerizer: cz, Estimator: ctl.Estimator,
		EstimatorName: ctl.EstimatorName, QoSControllerNames: ctl.QoSNames}
	if cfg.Shadows, err = o.NewShadows(); err != nil {
		t.Fatal(err)
	}
	l := newEstimateLoop(cfg, resources.Resources{}, nil, nil)
	l.shadows = newShadowSet(cfg)
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var points []monitor.Point
	step := 0
	run := func(n int) {
		for range n {
			step++
			now := epoch.Add(time.Duration(step) * 100 * time.Millisecond)
			write("cgroup/r/g/cpu.stat", fmt.Sprintf("usage_usec %d\n", step*50_000))
			write("cgroup/r/g/memory.current", "1000")
			if err := m.Sample(now); err != nil {
				t.Fatal(err)
			}
			l.adoptProfile()
			_, points = l.estimate(now, points)
		}
	}
	run(20)
	before := l.shadows.reports()
	if before[0].Estimator != "calibrated" || before[0].Samples == 0 || len(before[0].QoSControllers) == 0 {
		t.Fatalf("active report before the profile: %+v", before[0])
	}

	p, err := ParseProfile(o, "batch", "estimator: fast\n")
	if err != nil {
		t.Fatal(err)
	}
	next, err := p.NewControllers()
	if err != nil {
		t.Fatal(err)
	}
	s := profileSettings{estimator: next.Estimator, estimatorName: next.EstimatorName, qos: next.QoS, profile: "batch", version: 1}
	l.next.Store(&s)
	run(1)
	after := l.shadows.reports()
	if a := after[0]; a.Estimator != "fast" || a.Samples > 1 || strings.Join(a.QoSControllers, ",") != strings.Join(before[0].QoSControllers, ",") {
		t.Errorf("active report after the profile: estimator %q, %d samples, qos %v; want fast, scored afresh, qos %v",
			a.Estimator, a.Samples, a.QoSControllers, before[0].QoSControllers)
	}
	for i := 1; i < len(after); i++ {
		if after[i].Name != before[i].Name || after[i].Estimator != before[i].Estimator || after[i].Samples <= before[i].Samples {
			t.Errorf("shadow %q changed with the profile: %+v, before %+v", after[i].Name, after[i], before[i])
		}
	}
	run(5)
	if a := l.shadows.reports()[0]; a.Samples < 4 {
		t.Errorf("active settings scored %d samples after the profile, want the new estimator scored", a.Samples)
	}
}
