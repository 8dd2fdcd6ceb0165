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

// TestRecordedTraces pins what the backtests showed when fast became the
// default (issue 15; the table in doc.go). On every trace but bursty it
// harvests at least goalHarvest of the ideal slack with at most
// goalViolationRate of the samples violated; on every trace it harvests
// more than both anchors (Koordinator's and Katalyst's formulas) at a
// violation rate no higher than theirs, or at most goalViolationRate. It
// also keeps what chose predictive over usage: never more violations, never
// less harvest. Replays are deterministic, so these are exact regression
// checks.
func TestRecordedTraces(t *testing.T) {
	for _, sc := range recordedScenarios(t) {
		t.Run(sc.Name, func(t *testing.T) {
			fast := replayScenario(t, "fast", estimator.Registry["fast"], sc)
			t.Logf("fast        harvest %5.1f%% violations %.2f%%", 100*fast.Harvest, 100*fast.ViolationRate)
			if sc.Name != "bursty" && (fast.Harvest < goalHarvest || fast.ViolationRate > goalViolationRate) {
				t.Errorf("fast harvests %.1f%% at %.2f%% violations, want at least %.0f%% at most %.0f%%",
					100*fast.Harvest, 100*fast.ViolationRate, 100*goalHarvest, 100*goalViolationRate)
			}
			for name, anchor := range backtest.Anchors {
				a := replayScenario(t, name, anchor, sc)
				t.Logf("%-11s harvest %5.1f%% violations %.2f%%", name, 100*a.Harvest, 100*a.ViolationRate)
				if fast.Harvest <= a.Harvest || fast.ViolationRate > max(a.ViolationRate, goalViolationRate) {
					t.Errorf("fast harvests %.1f%% at %.2f%% violations, %s %.1f%% at %.2f%%",
						100*fast.Harvest, 100*fast.ViolationRate, name, 100*a.Harvest, 100*a.ViolationRate)
				}
			}
			usage := replayScenario(t, "usage", estimator.Registry["usage"], sc)
			predictive := replayScenario(t, "predictive", estimator.Registry["predictive"], sc)
			if predictive.ViolationRate > usage.ViolationRate || predictive.SafeHarvest < usage.SafeHarvest {
				t.Errorf("predictive harvests %.1f%% at %.2f%% violations, usage %.1f%% at %.2f%%",
					100*predictive.SafeHarvest, 100*predictive.ViolationRate, 100*usage.SafeHarvest, 100*usage.ViolationRate)
			}
		})
	}
}

// The goal of issue 15, pinned by TestRecordedTraces.
const (
	goalHarvest       = 0.75
	goalViolationRate = 0.01
)

// TestCandidateTable prints the backtest table of every registered estimator,
// every rejected candidate (export_test.go) and both anchors on the
// recorded traces (shown with -v). It fails if a replay fails: every
// candidate and anchor must still replay every trace.
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
	for name, f := range backtest.Anchors {
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
