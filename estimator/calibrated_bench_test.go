package estimator_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
)

// BenchmarkEstimateSliding measures one estimate of an agent with n guaranteed
// containers, each with two minutes of 100 ms history, as the agent calls
// it: every call with the window slid by one sample. calibrated includes
// scoring the previous estimate, the quantile of 3000 scores and the
// explanation; fast is the same prediction without them. cpu-ns/op is the
// process's CPU time per estimate, which a shared machine does not inflate.
func BenchmarkEstimateSliding(b *testing.B) {
	for _, name := range []string{"fast", "calibrated"} {
		for _, n := range []int{10, 100} {
			b.Run(fmt.Sprintf("%s/containers=%d", name, n), func(b *testing.B) {
				est, err := estimator.New(name, estimator.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
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
					containers[c] = guaranteed(fmt.Sprintf("c-%d", c), "cpus:2", nil)
				}
				step := func(i int) {
					j := history + i%(total-history)
					for c := range containers {
						containers[c].History = series[c][j-history : j]
					}
					est.Estimate(estimator.Input{Now: series[0][j-1].Time, Containers: containers})
					if ex, ok := est.(estimator.Explainer); ok {
						_ = ex.Explain()
					}
				}
				for i := range 3000 { // fill the calibration's window
					step(i)
				}
				i := 3000
				b.ResetTimer()
				before := processCPU()
				for b.Loop() {
					step(i)
					i++
				}
				// CPU time, unlike wall time, does not grow when the machine
				// is shared.
				b.ReportMetric(float64(processCPU()-before)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkEstimateIdle is BenchmarkEstimateSliding as the agent calls
// the default estimator with 100 idle tasks (#29: scripts/bench/agent
// --running 100): every container's CPU is a constant trickle, its
// history checked (HistoryChecked, as the agent's), and the explanation
// asked for at every estimate.
func BenchmarkEstimateIdle(b *testing.B) {
	const n, history, total = 100, 1200, 1200 + 4000
	est, err := estimator.New("calibrated", estimator.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	series := make([]estimator.Sample, total)
	for i := range series {
		series[i] = estimator.Sample{Time: t0.Add(time.Duration(i+1) * 100 * time.Millisecond), CPU: 0.001, MemBytes: 1 << 20}
	}
	containers := make([]estimator.Container, n)
	for c := range containers {
		containers[c] = guaranteed(fmt.Sprintf("c-%d", c), "cpus:0.1;mem:32", nil)
		containers[c].HistoryChecked = true
	}
	step := func(i int) {
		j := history + i%(total-history)
		for c := range containers {
			containers[c].History = series[j-history : j]
		}
		est.Estimate(estimator.Input{Now: series[j-1].Time, Containers: containers})
		_ = est.(estimator.Explainer).Explain()
	}
	for i := range 3000 {
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
}

// processCPU returns the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
