package agent

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// BenchmarkEstimateWithShadows measures the estimator work of one pass of
// the estimate loop with n guaranteed containers, each with two minutes of
// 100 ms history slid by one sample per call (as in estimator's
// BenchmarkEstimateSliding): the active calibrated estimator and its
// explanation, then, with shadows=2, the active settings' score and the two
// candidates of the shadow tests (calibrated at a looser target, and fast)
// run and scored on the same input. cpu-ns/op is the process's CPU time per
// pass, which a shared machine does not inflate; the difference between
// shadows=0 and shadows=2 is the shadows' cost. shadows=rollout runs a
// profile rollout's shadow (the first candidate's settings) and the active
// settings' score beside it instead (#29 item 5).
func BenchmarkEstimateWithShadows(b *testing.B) {
	o := shadowOptions(b)
	for _, shadows := range []string{"0", "2", "rollout"} {
		for _, n := range []int{10, 100} {
			b.Run(fmt.Sprintf("shadows=%s/containers=%d", shadows, n), func(b *testing.B) {
				ctl, err := o.NewControllers()
				if err != nil {
					b.Fatal(err)
				}
				cfg := Config{Estimator: ctl.Estimator, EstimatorName: ctl.EstimatorName, QoSControllerNames: ctl.QoSNames}
				if shadows == "2" {
					if cfg.Shadows, err = o.NewShadows(); err != nil {
						b.Fatal(err)
					}
				}
				set := newShadowSet(cfg)
				var rollout *rolloutShadow
				if shadows == "rollout" {
					cfg.QoS, cfg.profiles = ctl.QoS, o.profileBuilder()
					rollout = newRolloutShadow(cfg)
					if err := rollout.apply(&slacklinev1.ProfileShadowCommand{Profile: "web", Version: 2, Settings: shadowCandidates[0].settings}); err != nil {
						b.Fatal(err)
					}
				}
				t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				const history = 1200
				const total = history + 4000
				series := make([][]estimator.Sample, n)
				for c := range series {
					series[c] = make([]estimator.Sample, total)
					for i := range total {
						cpu := 0.2 + 0.1*float64((i*7+c*13)%10)/10
						if (i+c*17)%97 < 5 {
							cpu = 1.5
						}
						series[c][i] = estimator.Sample{Time: t0.Add(time.Duration(i+1) * 100 * time.Millisecond), CPU: cpu}
					}
				}
				containers := make([]estimator.Container, n)
				for c := range containers {
					containers[c] = estimator.Container{ID: fmt.Sprintf("c-%d", c), Allocated: resources.New(2, 0, 0)}
				}
				step := func(i int) {
					j := history + i%(total-history)
					for c := range containers {
						containers[c].History = series[c][j-history : j]
					}
					in := estimator.Input{Now: series[0][j-1].Time, Containers: containers}
					offered := ctl.Estimator.Estimate(in)
					if ex, ok := ctl.Estimator.(estimator.Explainer); ok {
						_ = ex.Explain()
					}
					set.estimate(in, offered.CPUs())
					rollout.estimate(in, offered.CPUs())
				}
				for i := range 3000 { // fill the calibrations' windows
					step(i)
				}
				i := 3000
				b.ReportAllocs()
				b.ResetTimer()
				before := processCPU()
				for b.Loop() {
					step(i)
					i++
				}
				b.ReportMetric(float64(processCPU()-before)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU returns the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
