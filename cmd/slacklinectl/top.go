package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// agentFlags are the --agent/--hostname pair naming one agent.
type agentFlags struct{ id, hostname string }

func (f *agentFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.id, "agent", "", "the agent, by hostname or id (see get agents), reached through the coordinator (default: the only agent)")
	cmd.Flags().StringVar(&f.hostname, "hostname", "", "the agent, by hostname (or id): the same as --agent")
}

// agent resolves the agent's id: the one named by --agent or --hostname,
// or the cluster's only agent.
func (f *agentFlags) agent(ctx context.Context, g *globals) (string, error) {
	name := f.id + f.hostname
	switch {
	case f.id != "" && f.hostname != "":
		return "", usageErrorf("--agent and --hostname exclude each other")
	case strings.Contains(name, "/"):
		return "", usageErrorf("--agent %q: want an agent's hostname or id (see get agents): slacklinectl reaches agents only through the coordinator, never at a URL", name)
	case name == "":
		return g.onlyAgent(ctx)
	}
	return g.resolveAgent(ctx, name)
}

// newTopCommand shows each container's live usage on one agent.
func newTopCommand(g *globals) *cobra.Command {
	var agent agentFlags
	var watch time.Duration
	cmd := &cobra.Command{
		Use:   "top [--agent HOST]",
		Short: "Show each container's CPU, memory (RSS and working set), network (egress rate, TCP round-trip p99, retransmissions), run-queue p99 and pressure (CPU, memory, I/O) on one agent, and what bounds its memory slack",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agentID, err := agent.agent(cmd.Context(), g)
			if err != nil {
				return fmt.Errorf("top: %w", err)
			}
			redraw := watch > 0 && !g.structured() && isTerminal(g.out)
			for {
				resp, err := g.node(agentID).GetUsage(cmd.Context(), connect.NewRequest(&slacklinev1.GetUsageRequest{}))
				if err != nil {
					return fmt.Errorf("top: %w", err)
				}
				if redraw {
					// Home and clear: each frame replaces the last, as top(1) does.
					if _, err := io.WriteString(g.out, clearScreen); err != nil {
						return err
					}
				}
				slices.SortStableFunc(resp.Msg.Usage, func(x, y *slacklinev1.ContainerUsage) int { return naturalCompare(x.GetTaskId(), y.GetTaskId()) })
				if err := g.print(resp.Msg, usageTable(resp.Msg)); err != nil {
					return err
				}
				if m := resp.Msg.GetMemory(); m != nil && !g.structured() {
					// Below the table: what bounds the memory slack (#28).
					if _, err := fmt.Fprintf(g.out, "\nrevocable mem: %s\n", escape(memoryText(m))); err != nil {
						return err
					}
				}
				if watch <= 0 {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(watch):
				}
				if !redraw {
					fmt.Fprintln(g.out) // frames one after the other, for a file or a pipe
				}
			}
		},
	}
	agent.register(cmd)
	cmd.Flags().DurationVarP(&watch, "watch", "w", 0, "refresh at this interval until interrupted (0: once)")
	return cmd
}

// clearScreen moves the cursor home and clears the screen (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// isTerminal reports whether out is a terminal (a character device).
func isTerminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// usageTable renders GetUsage: the node first, then one row per container,
// then the pace of revocable egress when the agent runs network QoS.
func usageTable(u *slacklinev1.GetUsageResponse) table {
	t := table{header: []string{"TASK", "CPU", "MEM", "WORKING SET", "NET RX", "NET TX", "TX MBIT/S", "RTT P99", "RETRANS", "RUNQ P99", "CPU PSI", "MEM PSI", "IO PSI", "THROTTLED"}}
	row := func(name string, s *slacklinev1.ResourceStatistics) []string {
		retransmits := ""
		if tcp := s.GetTcp(); tcp != nil {
			retransmits = strconv.FormatUint(tcp.GetRetransmits(), 10)
		}
		return []string{
			name, fmt.Sprintf("%.2f", s.GetCpusRate()), bytesText(s.GetMemRssBytes()), bytesText(s.GetMemWorkingSetBytes()),
			bytesText(s.GetNetRxBytes()), bytesText(s.GetNetTxBytes()), fmt.Sprintf("%.1f", s.GetNetTxMbps()),
			durationText(s.GetTcp().GetRttP99Seconds()), retransmits,
			durationText(s.GetRunqueue().GetP99Seconds()),
			fmt.Sprintf("%.1f%%", s.GetCpuPressure().GetSomeAvg10()), fmt.Sprintf("%.1f%%", s.GetMemoryPressure().GetSomeAvg10()),
			fmt.Sprintf("%.1f%%", s.GetIoPressure().GetSomeAvg10()), fmt.Sprintf("%.1fs", s.GetCpusThrottledTimeSecs()),
		}
	}
	if n := u.GetNode(); n != nil {
		node := row("(node)", n)
		node[2], node[3] = bytesText(n.GetMemAvailableBytes())+" free", "-"
		t.rows = append(t.rows, node)
	}
	for _, c := range u.GetUsage() {
		t.rows = append(t.rows, row(c.GetTaskId(), c.GetStatistics()))
	}
	if n := u.GetNetwork(); n != nil {
		pace := "unpaced"
		if p := n.GetRevocablePaceMbps(); p > 0 {
			pace = fmt.Sprintf("%.0f of %.0f", p, n.GetRevocableEstimateMbps())
		}
		paced := make([]string, len(t.header))
		paced[0], paced[6] = "(revocable pace)", pace
		t.rows = append(t.rows, paced)
	}
	return t
}

func bytesText(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGi", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMi", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fKi", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}

func durationText(seconds float64) string {
	if seconds == 0 {
		return "-"
	}
	return time.Duration(seconds * float64(time.Second)).Round(time.Microsecond).String()
}

// newFeaturesCommand lists an agent's eBPF feature probes.
func newFeaturesCommand(g *globals) *cobra.Command {
	var agent agentFlags
	cmd := &cobra.Command{
		Use:   "features [--agent HOST]",
		Short: "List the eBPF feature probes of one agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agentID, err := agent.agent(cmd.Context(), g)
			if err != nil {
				return fmt.Errorf("get features: %w", err)
			}
			resp, err := g.node(agentID).GetFeatures(cmd.Context(), connect.NewRequest(&slacklinev1.GetFeaturesRequest{}))
			if err != nil {
				return fmt.Errorf("get features: %w", err)
			}
			t := table{header: []string{"FEATURE", "STATUS", "DETAIL"}}
			for _, f := range resp.Msg.GetFeatures() {
				t.rows = append(t.rows, []string{f.GetName(), enumName(f.GetStatus().String(), "FEATURE_STATUS_"), f.GetDetail()})
			}
			return g.print(resp.Msg, t)
		},
	}
	agent.register(cmd)
	return cmd
}
