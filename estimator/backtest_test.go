package estimator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
)

// recordedScenarios returns one scenario per committed trace (recorded from
// real tasks on a development machine, see testdata/README.md) and "mix",
// all of them together.
func recordedScenarios(tb testing.TB) []backtest.Scenario {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.csv"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no traces in testdata: %v", err)
	}
	slices.Sort(files)
	var traces []backtest.Trace
	var scenarios []backtest.Scenario
	for _, name := range files {
		tr, err := backtest.ReadTraceFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		traces = append(traces, tr)
		scenarios = append(scenarios, backtest.Scenario{Name: tr.Name, Traces: []backtest.Trace{tr}})
	}
	return append(scenarios, backtest.Mix(traces))
}

func replayScenario(tb testing.TB, name string, factory estimator.Factory, sc backtest.Scenario) backtest.Result {
	tb.Helper()
	est, err := factory(estimator.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	res, err := backtest.Replay(name, est, sc, backtest.DefaultOptions())
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// TestRecordedTraces pins what the backtests showed when predictive was
// chosen: on every recorded trace it violates no more often than usage and
// harvests at least as much, and on the periodic trace it harvests clearly
// more. Replays are deterministic, so these are exact regressions checks.
func TestRecordedTraces(t *testing.T) {
	for _, sc := range recordedScenarios(t) {
		t.Run(sc.Name, func(t *testing.T) {
			usage := replayScenario(t, "usage", estimator.Registry["usage"], sc)
			predictive := replayScenario(t, "predictive", estimator.Registry["predictive"], sc)
			t.Logf("usage      harvest %5.1f%% violations %.2f%%", 100*usage.SafeHarvest, 100*usage.ViolationRate)
			t.Logf("predictive harvest %5.1f%% violations %.2f%%", 100*predictive.SafeHarvest, 100*predictive.ViolationRate)
			if predictive.ViolationRate > usage.ViolationRate {
				t.Errorf("predictive violates %.2f%% of samples, usage %.2f%%", 100*predictive.ViolationRate, 100*usage.ViolationRate)
			}
			if predictive.SafeHarvest < usage.SafeHarvest {
				t.Errorf("predictive harvests %.1f%%, usage %.1f%%", 100*predictive.SafeHarvest, 100*usage.SafeHarvest)
			}
			for _, r := range []backtest.Result{usage, predictive} {
				if r.ViolationRate > maxViolationRate {
					t.Errorf("%s violates %.2f%% of samples, want at most %.2f%%", r.Estimator, 100*r.ViolationRate, 100*maxViolationRate)
				}
			}
			if want := minPeriodicGain; sc.Name == "periodic" && predictive.SafeHarvest < usage.SafeHarvest+want {
				t.Errorf("periodic: predictive harvests %.1f%%, usage %.1f%%: want %.0f points more",
					100*predictive.SafeHarvest, 100*usage.SafeHarvest, 100*want)
			}
		})
	}
}

// Bounds pinned by TestRecordedTraces.
const (
	maxViolationRate = 0.02
	minPeriodicGain  = 0.10
)

// TestCandidateTable prints the backtest table of every registered estimator
// and every rejected candidate (export_test.go) on the recorded traces; with
// -v it is the table in doc.go. It fails only if a replay fails.
func TestCandidateTable(t *testing.T) {
	factories := map[string]estimator.Factory{}
	for name, f := range estimator.Registry {
		if name != "fixed" && name != "noop" {
			factories[name] = f
		}
	}
	for name, f := range estimator.Candidates {
		factories[name] = f
	}
	names := make([]string, 0, len(factories))
	for name := range factories {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\testimator\tharvest\tsafe\tviolations\tmean excess\tchanges/min\t")
	for _, sc := range recordedScenarios(t) {
		for _, name := range names {
			r := replayScenario(t, name, factories[name], sc)
			fmt.Fprintf(tw, "%s\t%s\t%.1f%%\t%.1f%%\t%.2f%%\t%.3f\t%.1f\t\n", sc.Name, name,
				100*r.Harvest, 100*r.SafeHarvest, 100*r.ViolationRate, r.MeanExcess, r.ChangesPerMinute)
		}
	}
	tw.Flush()
	t.Log("\n" + b.String())
}

// BenchmarkReplay replays each recorded scenario through each registered
// estimator; besides the time per replay it reports the harvest and
// violation rate (which do not vary between runs).
func BenchmarkReplay(b *testing.B) {
	if _, err := os.Stat("testdata"); err != nil {
		b.Skip("no testdata")
	}
	for _, sc := range recordedScenarios(b) {
		for _, name := range estimator.Names() {
			b.Run(sc.Name+"/"+name, func(b *testing.B) {
				var r backtest.Result
				for b.Loop() {
					r = replayScenario(b, name, estimator.Registry[name], sc)
				}
				b.ReportMetric(100*r.SafeHarvest, "harvest-%")
				b.ReportMetric(100*r.ViolationRate, "violation-%")
			})
		}
	}
}
