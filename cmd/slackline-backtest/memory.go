package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
)

// memoryOptions are the flags of "memory".
type memoryOptions struct {
	estimators []string
	mix        bool
	output     string
	tolerance  float64
	replay     backtest.Options
	config     estimator.Config
}

func newMemoryCommand() *cobra.Command {
	o := memoryOptions{replay: backtest.DefaultOptions(), config: estimator.DefaultConfig(), tolerance: backtest.DefaultMemoryTolerance}
	cmd := &cobra.Command{
		Use:   "memory [trace.csv ...]",
		Short: "Replay traces through each estimator and score its revocable mem",
		Long: `memory replays each trace (and, with --mix, all of them together) like
run, and scores the mem of each estimate against the guaranteed containers'
working sets (a trace's mem_bytes: anonymous plus active file pages):

  ideal      real slack: max(0, mem allocation - working set), MiB
  offered    the mem estimate in force (made from earlier samples only)
  harvest    mean offered / mean ideal
  safe       mean min(offered, ideal) / mean ideal
  over       share of samples where offered - ideal > --tolerance MiB
  max        the largest offered - ideal, MiB

With no arguments it replays estimator/testdata/memory/*.csv.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{filepath.Join("estimator", "testdata", "memory", "*.csv")}
			}
			if !(o.tolerance >= 0) {
				return fmt.Errorf("--tolerance %v must not be negative", o.tolerance)
			}
			o.config.Memory = true
			traces, err := loadTraces(args)
			if err != nil {
				return err
			}
			var results []backtest.MemoryResult
			for _, sc := range scenariosOf(traces, o.mix, "mix") {
				for _, name := range o.estimators {
					est, err := newEstimator(name, o.config)
					if err != nil {
						return err
					}
					res, err := backtest.ReplayMemory(name, est, sc, o.replay, o.tolerance)
					if err != nil {
						return err
					}
					results = append(results, res)
				}
			}
			return printMemoryResults(cmd.OutOrStdout(), results, o.output)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.estimators, "estimators", []string{"usage", "predictive", "fast"}, "estimators to replay")
	f.BoolVar(&o.mix, "mix", true, "also replay all traces together")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, markdown or json")
	f.Float64Var(&o.tolerance, "tolerance", o.tolerance, "over-offer in MiB not counted as over")
	f.DurationVar(&o.replay.EstimateInterval, "interval", o.replay.EstimateInterval, "estimate interval")
	f.DurationVar(&o.replay.History, "history", o.replay.History, "history each container carries")
	f.DurationVar(&o.config.Window, "window", o.config.Window, "usage window (the working-set peak is taken over it)")
	f.DurationVar(&o.config.MemoryWindow, "memory-window", o.config.MemoryWindow, "how far back the working-set peak is taken")
	f.Float64Var(&o.config.MemoryMargin, "memory-margin", o.config.MemoryMargin, "fraction of each mem allocation never offered")
	f.BoolVar(&o.config.Hysteresis.Off, "no-hysteresis", false, "publish every raw estimate")
	return cmd
}

func printMemoryResults(w io.Writer, results []backtest.MemoryResult, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	case "table", "markdown":
	default:
		return fmt.Errorf("unknown output format %q: want table, markdown or json", format)
	}
	rows := [][]string{{"SCENARIO", "ESTIMATOR", "IDEAL MIB", "OFFERED MIB", "HARVEST", "SAFE", "OVER", "MAX MIB"}}
	for _, r := range results {
		rows = append(rows, []string{r.Scenario, r.Estimator,
			fmt.Sprintf("%.0f", r.MeanIdeal), fmt.Sprintf("%.0f", r.MeanOffered),
			fmt.Sprintf("%.1f%%", 100*r.Harvest), fmt.Sprintf("%.1f%%", 100*r.SafeHarvest),
			fmt.Sprintf("%.2f%%", 100*r.OverRate), fmt.Sprintf("%.0f", r.MaxExcess)})
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
