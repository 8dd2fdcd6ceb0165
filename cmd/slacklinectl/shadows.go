package main

import (
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// newGetShadowsCommand is "get shadows" (#29 part 4): what one agent's
// shadow settings would have offered and corrected, beside its active
// settings, reached through the coordinator's node proxy like "get
// estimate".
func newGetShadowsCommand(g *globals) *cobra.Command {
	var agent agentFlags
	cmd := &cobra.Command{
		Use:     "shadows (--agent ID | --hostname H)",
		Aliases: []string{"shadow"},
		Short:   "Show what an agent's shadow settings (--shadow) would have offered and corrected, beside its active settings",
		Long: `get shadows compares the estimator and QoS settings an agent runs in shadow
(slackline-agent --shadow NAME=FILE, at most two) with its active ones, on
the same samples since the agent started: the latest estimate each made
(a shadow's is never offered), the harvest (mean estimate over mean real
slack) and the share of samples at which the estimate in force exceeded the
real slack by more than 0.05 cores, as slackline-backtest scores a replay;
how often the estimate shrank (which makes the coordinator rescind offers);
and the QoS corrections each asked for (a shadow's are never applied) per
hour. The last column lists the settings in which a shadow differs from the
active ones.`,
		Args: exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			agentID, err := agent.agent(cmd.Context(), g)
			if err != nil {
				return fmt.Errorf("get shadows: %w", err)
			}
			resp, err := g.node(agentID).GetShadows(cmd.Context(), connect.NewRequest(&slacklinev1.GetShadowsRequest{}))
			if err != nil {
				return fmt.Errorf("get shadows: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			return writeShadows(g.out, resp.Msg)
		},
	}
	agent.register(cmd)
	return cmd
}

// writeShadows prints one row per setting, the active ones first.
func writeShadows(out io.Writer, s *slacklinev1.GetShadowsResponse) error {
	if s.GetActive() == nil {
		_, err := fmt.Fprintln(out, "No shadow settings: the agent runs none (slackline-agent --shadow NAME=FILE).")
		return err
	}
	t := table{header: []string{"SETTINGS", "ESTIMATOR", "ESTIMATE", "HARVEST", "VIOLATIONS", "SAMPLES", "SHRINKS/H", "CORRECTIONS/H", "CORRECTIONS", "DIFFERS IN"}}
	for _, r := range append([]*slacklinev1.ShadowReport{s.GetActive()}, s.GetShadows()...) {
		shrinks := none
		if span := r.GetLastEstimate().AsTime().Sub(r.GetFirstEstimate().AsTime()); r.GetFirstEstimate() != nil && span > 0 {
			shrinks = fmt.Sprintf("%.0f", float64(r.GetShrinks())/span.Hours())
		}
		var kinds []string
		for _, c := range r.GetCorrections() {
			if c.GetCount() > 0 {
				kinds = append(kinds, fmt.Sprintf("%s %d", c.GetKind(), c.GetCount()))
			}
		}
		var settings []string
		for _, st := range r.GetSettings() {
			settings = append(settings, st.GetFlag()+"="+st.GetValue())
		}
		differs := strings.Join(settings, " ")
		if r.GetName() == "active" {
			differs = "(qos " + strings.Join(r.GetQosControllers(), ",") + ")"
		} else if differs == "" {
			differs = none
		}
		t.rows = append(t.rows, []string{
			r.GetName(), r.GetEstimator(), cpus(r.GetLatestCpus()),
			fmt.Sprintf("%.1f%%", 100*r.GetHarvest()),
			fmt.Sprintf("%.2f%% (%d)", 100*r.GetViolationRate(), r.GetViolations()),
			fmt.Sprint(r.GetSamples()), shrinks, fmt.Sprintf("%.1f", r.GetCorrectionsPerHour()),
			orNone(strings.Join(kinds, ", ")), differs,
		})
	}
	return t.write(out)
}
