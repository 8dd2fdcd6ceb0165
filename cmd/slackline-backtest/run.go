package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/resources"
)

// runOptions are the flags of "run".
type runOptions struct {
	estimators []string
	mix        bool
	fixed      string
	output     string
	replay     backtest.Options
	config     estimator.Config
}

func newRunCommand() *cobra.Command {
	o := runOptions{replay: backtest.DefaultOptions(), config: estimator.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "run [trace.csv ...]",
		Short: "Replay traces through each estimator and print slack harvested and violations",
		Long: `run replays each trace (and, with --mix, all of them together) through
each estimator as guaranteed containers with the traces' allocations, one
estimate per --interval, and scores every sample after the first estimate:

  ideal      real slack: max(0, allocation - guaranteed usage) at that sample
  offered    the estimate in force (made from earlier samples only)
  harvest    mean offered / mean ideal
  safe       mean min(offered, ideal) / mean ideal
  violation  share of samples where offered - ideal > --tolerance cores
  excess     mean and max of offered - ideal over violations, in cores
  changes    estimate changes per minute (what reaches the coordinator)
  shrinks    of those, shrinks per minute (the ones that may rescind offers)
  to offer   mean time from slack appearing (0.25 cores more free for at
             least 5 s) to half of it being offered; ">" when some was
             never offered before it went (then a lower bound)

Besides Slackline's estimators it replays the anchors, reference
implementations of Koordinator's batch formula ("koordinator") and
Katalyst's smoothed headroom ("katalyst"), with their defaults.
With no arguments it replays the recorded traces (estimator/testdata/*.csv,
the ones the settings were chosen on) and, in a table of their own, the
held-out traces (estimator/testdata/heldout/*.csv.gz, never tuned on).
changes/min and shrinks/min count what reaches the coordinator (the agent
sends every change of the estimate; the calibrated estimator paces its
rises, --rise-interval).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			groups := []traceGroup{{patterns: args, mix: "mix"}}
			if len(args) == 0 {
				groups = defaultGroups()
			}
			fixed, err := resources.Parse(o.fixed)
			if err != nil {
				return fmt.Errorf("--fixed: %w", err)
			}
			o.config.Fixed = fixed
			var all []backtest.Result
			for i, g := range groups {
				traces, err := loadTraces(g.patterns)
				if err != nil {
					return err
				}
				results, err := runAll(traces, g.mix, o)
				if err != nil {
					return err
				}
				if o.output == "json" {
					all = append(all, results...)
					continue
				}
				if g.title != "" {
					if i > 0 {
						fmt.Fprintln(cmd.OutOrStdout())
					}
					fmt.Fprintln(cmd.OutOrStdout(), g.title)
				}
				if err := printResults(cmd.OutOrStdout(), results, o.output); err != nil {
					return err
				}
			}
			if o.output == "json" {
				return printResults(cmd.OutOrStdout(), all, o.output)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.estimators, "estimators", append(estimator.Names(), anchorNames()...), "estimators (and anchors) to replay")
	f.BoolVar(&o.mix, "mix", true, "also replay all traces together")
	f.StringVar(&o.fixed, "fixed", "cpus:0.5", "amount the fixed estimator offers")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, markdown or json")
	f.DurationVar(&o.replay.EstimateInterval, "interval", o.replay.EstimateInterval, "estimate interval")
	f.DurationVar(&o.replay.History, "history", o.replay.History, "history each container carries")
	f.DurationVar(&o.config.RiseInterval, "rise-interval", o.config.RiseInterval, "calibrated: least time between two rises of the estimate (the second step of a lasting rise goes at once; 0: publish every rise)")
	f.Float64Var(&o.replay.Tolerance, "tolerance", o.replay.Tolerance, "over-offer in cores not counted as a violation")
	f.DurationVar(&o.config.Window, "window", o.config.Window, "usage window")
	f.Float64Var(&o.config.Percentile, "percentile", o.config.Percentile, "usage percentile")
	f.DurationVar(&o.config.PeakHalfLife, "peak-half-life", o.config.PeakHalfLife, "half-life of the decaying peak hold")
	f.Float64Var(&o.config.Margin, "margin", o.config.Margin, "fraction of each cpu allocation never offered")
	f.BoolVar(&o.config.Hysteresis.Off, "no-hysteresis", false, "publish every raw estimate")
	f.DurationVar(&o.config.Fast.Confirm, "confirm", o.config.Fast.Confirm, "fast: how long slack must last before it is offered")
	f.Float64Var(&o.config.Fast.Margin, "safety-margin", o.config.Fast.Margin, "fast: fraction of each cpu allocation never offered")
	f.Float64Var(&o.config.Fast.Band, "band", o.config.Fast.Band, "fast, calibrated: hysteresis band in cores")
	f.DurationVar(&o.config.Fast.ReclaimTime, "reclaim-time", o.config.Fast.ReclaimTime, "fast: recurring bursts due within this are held back")
	f.Float64Var(&o.config.Calibration.TargetViolation, "target-violation", o.config.Calibration.TargetViolation, "calibrated: long-run share of estimates allowed to exceed the real slack")
	f.Float64Var(&o.config.Calibration.Gamma, "gamma", o.config.Calibration.Gamma, "calibrated: step of the calibration's level update")
	f.DurationVar(&o.config.Calibration.Confirm, "calibrated-confirm", o.config.Calibration.Confirm, "calibrated: how long slack must last before it is offered")
	f.IntVar(&o.config.Calibration.Window, "calibration-window", o.config.Calibration.Window, "calibrated: scores (estimates) the margin is a quantile of")
	return cmd
}

// anchorNames returns the anchors' names, sorted.
func anchorNames() []string {
	names := make([]string, 0, len(backtest.Anchors))
	for name := range backtest.Anchors {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// newEstimator builds a registered estimator or an anchor.
func newEstimator(name string, cfg estimator.Config) (estimator.Estimator, error) {
	if anchor, ok := backtest.Anchors[name]; ok {
		return anchor(cfg)
	}
	return estimator.New(name, cfg)
}

func loadTraces(patterns []string) ([]backtest.Trace, error) {
	var files []string
	for _, p := range patterns {
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("trace pattern %q: %w", p, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("no trace matches %q", p)
		}
		files = append(files, matches...)
	}
	slices.Sort(files)
	traces := make([]backtest.Trace, 0, len(files))
	for _, name := range files {
		t, err := backtest.ReadTraceFile(name)
		if err != nil {
			return nil, err
		}
		traces = append(traces, t)
	}
	return traces, nil
}

// traceGroup is a set of traces reported in a table of its own.
type traceGroup struct {
	title    string
	patterns []string
	// mix names the scenario of all the group's traces together.
	mix string
}

// defaultGroups are the recorded traces and the held-out ones, apart.
func defaultGroups() []traceGroup {
	return []traceGroup{
		{title: "recorded traces (settings chosen on these):", patterns: []string{filepath.Join("estimator", "testdata", "*.csv")}, mix: "mix"},
		{title: "held-out traces (never tuned on):", patterns: []string{filepath.Join("estimator", "testdata", "heldout", "*.csv.gz")}, mix: "heldout-mix"},
	}
}

// scenariosOf returns one scenario per trace and, with mix, all of them
// together, named mixName.
func scenariosOf(traces []backtest.Trace, mix bool, mixName string) []backtest.Scenario {
	scenarios := make([]backtest.Scenario, 0, len(traces)+1)
	for _, t := range traces {
		scenarios = append(scenarios, backtest.Scenario{Name: t.Name, Traces: []backtest.Trace{t}})
	}
	if mix && len(traces) > 1 {
		all := backtest.Mix(traces)
		all.Name = mixName
		scenarios = append(scenarios, all)
	}
	return scenarios
}

func runAll(traces []backtest.Trace, mixName string, o runOptions) ([]backtest.Result, error) {
	var results []backtest.Result
	for _, sc := range scenariosOf(traces, o.mix, mixName) {
		for _, name := range o.estimators {
			est, err := newEstimator(name, o.config)
			if err != nil {
				return nil, err
			}
			res, err := backtest.Replay(name, est, sc, o.replay)
			if err != nil {
				return nil, err
			}
			results = append(results, res)
		}
	}
	return results, nil
}

func printResults(w io.Writer, results []backtest.Result, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	case "table", "markdown":
	default:
		return fmt.Errorf("unknown output format %q: want table, markdown or json", format)
	}
	header := []string{"SCENARIO", "ESTIMATOR", "IDEAL", "OFFERED", "HARVEST", "SAFE", "VIOLATION", "EXCESS", "MAX", "CHANGES/MIN", "SHRINKS/MIN", "TO OFFER"}
	rows := [][]string{header}
	for _, r := range results {
		rows = append(rows, []string{
			r.Scenario, r.Estimator,
			fmt.Sprintf("%.3f", r.MeanIdeal), fmt.Sprintf("%.3f", r.MeanOffered),
			fmt.Sprintf("%.1f%%", 100*r.Harvest), fmt.Sprintf("%.1f%%", 100*r.SafeHarvest),
			fmt.Sprintf("%.2f%%", 100*r.ViolationRate),
			fmt.Sprintf("%.3f", r.MeanExcess), fmt.Sprintf("%.3f", r.MaxExcess),
			fmt.Sprintf("%.1f", r.ChangesPerMinute), fmt.Sprintf("%.1f", r.ShrinksPerMinute), timeToOffer(r),
		})
	}
	if format == "markdown" {
		for i, row := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			if i == 0 {
				fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(row)))
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

// timeToOffer renders Result.MeanTimeToOffer: "-" without appearances of
// slack, ">" before a lower bound (some slack was never offered).
func timeToOffer(r backtest.Result) string {
	switch {
	case r.Appearances == 0:
		return "-"
	case r.Missed > 0:
		return fmt.Sprintf(">%.1fs", r.MeanTimeToOffer)
	}
	return fmt.Sprintf("%.1fs", r.MeanTimeToOffer)
}
