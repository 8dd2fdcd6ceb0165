package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// newGetEstimateCommand is "get estimate": one agent's oversubscription
// estimate and how it was made, reached through the coordinator's node
// proxy like "get containers".
func newGetEstimateCommand(g *globals) *cobra.Command {
	var agent agentFlags
	cmd := &cobra.Command{
		Use:     "estimate (--agent ID | --hostname H)",
		Aliases: []string{"estimates"},
		Short:   "Show one agent's revocable estimate: what each guaranteed container is taken to need, what limits it, the calibration",
		Long: `get estimate shows the agent's latest oversubscription estimate (the
revocable cpus it offers) and, with the calibrated estimator, why it is what
it is: each guaranteed container's allocation, predicted peak, safety margin
and the share of what the calibration added, their sum (the cpus held back
for it) and the rest (its slack); the container that holds back the most;
and the calibration's account: the share of past estimates that exceeded
the slack really there, against the target and its guaranteed bound. For
memory it shows which bound set the revocable mem: the guaranteed
allocations less their working sets' need, the agent's mem less that need,
or the node's memory less what the QoS controllers keep free and what the
node holds beyond the containers' working sets (other use).`,
		Args: exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			agentID, err := agent.agent(cmd.Context(), g)
			if err != nil {
				return fmt.Errorf("get estimate: %w", err)
			}
			resp, err := g.node(agentID).GetEstimate(cmd.Context(), connect.NewRequest(&slacklinev1.GetEstimateRequest{}))
			if err != nil {
				return fmt.Errorf("get estimate: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			return writeEstimate(g.out, resp.Msg)
		},
	}
	agent.register(cmd)
	return cmd
}

// writeEstimate prints the estimate, the sentence on what limits it, the
// calibration and the per-container table.
func writeEstimate(out io.Writer, e *slacklinev1.GetEstimateResponse) error {
	_, revocable, err := resources.FromProto(e.GetRevocable())
	estimate := revocable.String()
	if err != nil {
		estimate = "unreadable: " + err.Error()
	} else if revocable.IsEmpty() {
		estimate = "nothing"
	}
	when := none
	if ts := e.GetTimestamp(); ts != nil {
		when = ts.AsTime().UTC().Format("2006-01-02T15:04:05.000Z")
	}
	lines := [][]string{{"ESTIMATE:", estimate + " (estimator " + orNone(e.GetEstimator()) + ", at " + when + ")"}}
	if m := e.GetMemory(); m != nil {
		lines = append(lines, []string{"MEMORY:", memoryText(m)})
	}
	if c := e.GetCalibration(); c != nil {
		lines = append(lines,
			[]string{"CPUS:", fmt.Sprintf("%.3f uncalibrated, %.3f calibrated, published after hysteresis and pacing", e.GetUncalibratedCpus(), e.GetCalibratedCpus())},
			[]string{"LIMITED BY:", orNone(e.GetReason())},
			[]string{"CALIBRATION:", calibrationLine(c)},
		)
	}
	if err := (table{header: lines[0], rows: lines[1:]}).write(out); err != nil {
		return err
	}
	if len(e.GetContainers()) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	t := table{header: []string{"CONTAINER", "ALLOCATED", "PREDICTED PEAK", "MARGIN", "CALIBRATION", "HELD BACK", "SLACK", "NOTE"}}
	for _, c := range e.GetContainers() {
		note := ""
		switch {
		case c.GetId() == e.GetLimitingContainer():
			note = "limiting"
		case c.GetWarmingUp():
			note = "warming up"
		}
		if c.GetProtected() {
			note = joinNote(note, "protected")
		}
		t.rows = append(t.rows, []string{
			c.GetId(), cpus(c.GetAllocatedCpus()), cpus(c.GetPredictedPeakCpus()), cpus(c.GetMarginCpus()),
			strconv.FormatFloat(c.GetCalibrationCpus(), 'f', 3, 64), cpus(c.GetNeedCpus()),
			cpus(max(0, c.GetAllocatedCpus()-c.GetNeedCpus())), note,
		})
	}
	return t.write(out)
}

// memoryText says how the revocable mem estimate was made: the bound that
// set it with its terms, then the other bounds (the node's with its terms,
// so that what is kept free and the node's other use are always shown
// when the node's memory is known). MiB throughout.
func memoryText(m *slacklinev1.EstimateMemory) string {
	need := m.GetNeedMib()
	nodeTerms := fmt.Sprintf("%s MiB - %s kept free - %s other use - %s need",
		mibs(float64(m.GetNodeTotalBytes())/(1<<20)), mibs(float64(m.GetKeepFreeBytes())/(1<<20)), mibs(float64(m.GetOtherBytes())/(1<<20)), mibs(need))
	bounds := []struct {
		bound   slacklinev1.EstimateMemoryBound
		name    string
		present bool
		mib     float64
		terms   string
	}{
		{slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_ALLOCATIONS, "the guaranteed allocations", true, m.GetAllocationsBoundMib(),
			fmt.Sprintf("%s MiB allocated - %s need", mibs(m.GetAllocatedMib()), mibs(need))},
		{slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_TOTAL, "the agent's mem", m.TotalBoundMib != nil, m.GetTotalBoundMib(),
			fmt.Sprintf("%s MiB - %s need", mibs(m.GetTotalBoundMib()+need), mibs(need))},
		{slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_NODE, "the node", m.NodeBoundMib != nil, m.GetNodeBoundMib(), nodeTerms},
	}
	s := mibs(m.GetEstimateMib()) + " MiB"
	for _, b := range bounds {
		if b.bound == m.GetLimitedBy() {
			s += fmt.Sprintf(", limited by %s: %s", b.name, b.terms)
		}
	}
	var others []string
	for _, b := range bounds {
		switch {
		case b.bound == m.GetLimitedBy() || !b.present:
		case b.bound == slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_NODE:
			others = append(others, fmt.Sprintf("node %s MiB (%s)", mibs(b.mib), b.terms))
		default:
			others = append(others, fmt.Sprintf("%s %s MiB", strings.TrimPrefix(strings.TrimPrefix(b.name, "the guaranteed "), "the "), mibs(b.mib)))
		}
	}
	if len(others) > 0 {
		s += "; other bounds: " + strings.Join(others, ", ")
	}
	return s
}

// mibs formats an amount of MiB to the MiB.
func mibs(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func calibrationLine(c *slacklinev1.EstimateCalibration) string {
	rate := 0.0
	if c.GetResolved() > 0 {
		rate = c.GetViolations() / float64(c.GetResolved())
	}
	s := fmt.Sprintf("%.2f%% of %d estimates exceeded the real slack (target %.2f%%, bound %.2f%%); level %.4f, adds %+.3f cpus",
		100*rate, c.GetResolved(), 100*c.GetTargetViolation(), 100*c.GetViolationBound(), c.GetLevel(), c.GetMarginCpus())
	if c.GetPaused() {
		s += "; PAUSED: nothing offered"
	}
	if c.GetUnresolved() > 0 {
		s += fmt.Sprintf("; %d never measured", c.GetUnresolved())
	}
	return s
}

func cpus(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + ", " + b
}
