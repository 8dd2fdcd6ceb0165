package estimator_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/resources"
)

// TestMemoryBacktest replays the recorded memory traces (working sets that
// move; testdata/memory, see testdata/README.md), each alone and all
// together, through the default estimator with the default configuration
// (revocable memory on) and holds it to #28's goal: at least 70% of the
// real memory slack offered, at most 1% of samples over it.
func TestMemoryBacktest(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "memory", "*.csv"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least two memory traces in testdata/memory: %v %v", files, err)
	}
	slices.Sort(files)
	var traces []backtest.Trace
	var scenarios []backtest.Scenario
	for _, name := range files {
		tr, err := backtest.ReadTraceFile(name)
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, tr)
		scenarios = append(scenarios, backtest.Scenario{Name: tr.Name, Traces: []backtest.Trace{tr}})
	}
	scenarios = append(scenarios, backtest.Mix(traces))
	for _, sc := range scenarios {
		est, err := estimator.New(estimator.DefaultName, estimator.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		res, err := backtest.ReplayMemory(estimator.DefaultName, est, sc, backtest.DefaultOptions(), backtest.DefaultMemoryTolerance)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-12s ideal %4.0f MiB offered %4.0f MiB harvest %.1f%% over %.2f%% max excess %.0f MiB",
			sc.Name, res.MeanIdeal, res.MeanOffered, 100*res.Harvest, 100*res.OverRate, res.MaxExcess)
		if res.Harvest < 0.70 || res.OverRate > 0.01 {
			t.Errorf("%s: harvest %.1f%%, over %.2f%%; want >= 70%% and <= 1%%", sc.Name, 100*res.Harvest, 100*res.OverRate)
		}
	}
}

// TestMemoryWindow: the working-set peak counts over MemoryWindow only, so
// memory a batch freed 20 s ago is offered again.
func TestMemoryWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var history []estimator.Sample
	for i := range 300 { // 30 s: 400 MiB for the first 10 s, then 100 MiB
		mem := uint64(100 << 20)
		if i < 100 {
			mem = 400 << 20
		}
		history = append(history, estimator.Sample{Time: t0.Add(time.Duration(i-299) * 100 * time.Millisecond), CPU: 0.5, MemBytes: mem})
	}
	in := estimator.Input{Now: t0, Containers: []estimator.Container{{ID: "a", Allocated: resources.MustParse("cpus:1;mem:1000"), History: history}}}
	for _, tt := range []struct {
		name   string
		window time.Duration
		want   float64
	}{
		{"15 s: the old peak is gone", 15 * time.Second, 1000 - 100 - 30},
		{"0: the whole usage window", 0, 1000 - 400 - 30},
		{"longer than the usage window: the usage window", 5 * time.Minute, 1000 - 400 - 30},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := estimator.DefaultConfig()
			cfg.Hysteresis.Off = true
			cfg.MemoryWindow = tt.window
			est, err := estimator.New("usage", cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := est.Estimate(in).Mem(); got < tt.want-0.01 || got > tt.want+0.01 {
				t.Errorf("mem = %v MiB, want %v", got, tt.want)
			}
		})
	}
}
