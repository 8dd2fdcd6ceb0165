package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// newProfilesCommand is "profiles ...": the fleet's node profiles (#29).
func newProfilesCommand(g *globals) *cobra.Command {
	p := &cobra.Command{
		Use:   "profiles",
		Short: "Node profiles: estimator and QoS settings for the agents of chosen attributes, rolled out in waves",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("profiles: want get, apply, rollout, status, abort or delete")
			}
			return fmt.Errorf("profiles: unknown command %q: want get, apply, rollout, status, abort or delete", args[0])
		},
	}
	client := func() slacklinev1connect.ProfileServiceClient {
		c, base := g.coordinatorClient()
		return slacklinev1connect.NewProfileServiceClient(c, base)
	}

	get := &cobra.Command{
		Use:   "get [NAME]",
		Short: "List the profiles, or show one",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &slacklinev1.GetProfilesRequest{}
			if len(args) == 1 {
				req.Name = args[0]
			}
			resp, err := client().GetProfiles(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return fmt.Errorf("profiles get: %w", err)
			}
			return g.print(resp.Msg, profilesTable(resp.Msg.GetProfiles()))
		},
	}

	var file, selector string
	apply := &cobra.Command{
		Use:   "apply NAME -f FILE [--selector k=v,...]",
		Short: "Create or change a profile: its settings go to every matching agent at once",
		Long: `Create or change profile NAME: FILE (- reads stdin) holds its settings, a YAML
or JSON mapping of agent flag names to values, as an agent's --config file:

  estimator-target-violation: 0.005
  qos-runqueue-p99: 3ms

Only the estimator and QoS flags an agent applies without restarting may be
set (docs/operators.md lists them; the coordinator names any other). The settings become
the profile's new version on every agent whose attributes match --selector
(all of them, with these values; empty: every agent), at once; a rollout
under way is aborted. Use "profiles rollout" to move a version in waves.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			settings, err := readSettings(file, cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("profiles apply: %w", err)
			}
			sel, err := parseSelector(selector)
			if err != nil {
				return usageErrorf("profiles apply: --selector: %v", err)
			}
			resp, err := client().ApplyProfile(cmd.Context(), connect.NewRequest(&slacklinev1.ApplyProfileRequest{
				Name: args[0], Selector: sel, Settings: settings}))
			if err != nil {
				return fmt.Errorf("profiles apply: %w", err)
			}
			return g.print(resp.Msg, profilesTable([]*slacklinev1.Profile{resp.Msg.GetProfile()}))
		},
	}
	apply.Flags().StringVarP(&file, "filename", "f", "", "file of settings (YAML or JSON; - reads stdin)")
	apply.Flags().StringVar(&selector, "selector", "", `agent attributes the profile is for, e.g. "tier=web,zone=eu" (empty: every agent)`)

	var rolloutFile, waves string
	var soak, p99Floor, shadowSoak time.Duration
	var minScored uint64
	var violationTolerance, p99Tolerance float64
	rollout := &cobra.Command{
		Use:   "rollout NAME -f FILE [--waves 0.1,0.5,1] [--soak 10m]",
		Short: "Move new settings of a profile to its agents in waves, rolled back on its own when they do worse",
		Long: `Start moving new settings of profile NAME to its agents in waves: each wave
covers a larger share of the matching agents (--waves, cumulative) and soaks
for --soak. The coordinator compares the updated agents with the others over
each wave and rolls back at once when their calibrated estimator's violation
rate is higher by more than --violation-tolerance (each group with at least
--min-estimates-scored estimates scored), when their guaranteed run-queue p99
is higher by more than --runqueue-p99-tolerance plus --runqueue-p99-floor, or
when an agent refuses the settings.

First, for --shadow-soak (0: none), the first wave's agents run the new
settings in shadow only, beside the stable version on the same inputs: the
rollout is rolled back before any agent applies them when their shadow's
violation rate is higher than the stable version's on those agents by more
than --violation-tolerance. In the waves that follow, the updated agents run
the previous version in shadow, and the rollout is rolled back when their
live violation rate is higher than their own shadow's. Agents that cannot
run shadows (older agents, or two --shadow candidates already) are judged
on live signals only, and "profiles status" names them. Follow it with
"profiles status NAME".`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			settings, err := readSettings(rolloutFile, cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("profiles rollout: %w", err)
			}
			policy := &slacklinev1.ProfileRolloutPolicy{Soak: durationpb.New(soak), MinEstimatesScored: minScored,
				ViolationTolerance: violationTolerance, RunqueueP99Tolerance: p99Tolerance, RunqueueP99Floor: durationpb.New(p99Floor),
				ShadowSoak: durationpb.New(shadowSoak)}
			for w := range strings.SplitSeq(waves, ",") {
				share, err := strconv.ParseFloat(strings.TrimSpace(w), 64)
				if err != nil {
					return usageErrorf("profiles rollout: --waves: %q is not a number", w)
				}
				policy.Waves = append(policy.Waves, share)
			}
			resp, err := client().RolloutProfile(cmd.Context(), connect.NewRequest(&slacklinev1.RolloutProfileRequest{
				Name: args[0], Settings: settings, Policy: policy}))
			if err != nil {
				return fmt.Errorf("profiles rollout: %w", err)
			}
			return g.print(resp.Msg, profilesTable([]*slacklinev1.Profile{resp.Msg.GetProfile()}))
		},
	}
	rf := rollout.Flags()
	rf.StringVarP(&rolloutFile, "filename", "f", "", "file of settings (YAML or JSON; - reads stdin)")
	rf.StringVar(&waves, "waves", "0.1,0.5,1", "cumulative shares of the matching agents after each wave, increasing, the last 1")
	rf.DurationVar(&soak, "soak", 10*time.Minute, "how long each wave runs before the next")
	rf.Uint64Var(&minScored, "min-estimates-scored", 1000, "estimates each group needs scored in a wave before violation rates are compared")
	rf.Float64Var(&violationTolerance, "violation-tolerance", 0.005, "how much higher (absolute) the updated agents' violation rate may be")
	rf.Float64Var(&p99Tolerance, "runqueue-p99-tolerance", 0.2, "how much higher (relative) the updated agents' guaranteed run-queue p99 may be")
	rf.DurationVar(&p99Floor, "runqueue-p99-floor", time.Millisecond, "absolute slack added to the run-queue p99 limit")
	rf.DurationVar(&shadowSoak, "shadow-soak", 10*time.Minute, "how long the first wave's agents run the new settings in shadow only before any applies them (0: no shadow stage)")

	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a profile's rollout and, per matching agent, the version it should run, runs, and its signals",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := client().GetProfileStatus(cmd.Context(), connect.NewRequest(&slacklinev1.GetProfileStatusRequest{Name: args[0]}))
			if err != nil {
				return fmt.Errorf("profiles status: %w", err)
			}
			if g.output == outputTable || g.output == outputWide {
				if _, err := io.WriteString(g.out, escapeText(rolloutSummary(resp.Msg.GetProfile()))); err != nil {
					return err
				}
			}
			return g.print(resp.Msg, profileAgentsTable(resp.Msg.GetAgents()))
		},
	}
	p.AddCommand(get, apply, rollout, status)
	p.AddCommand(newProfilesDeleteCommands(g, client)...)
	return p
}

// readSettings reads a settings file (- is stdin).
func readSettings(file string, stdin io.Reader) (string, error) {
	if file == "" {
		return "", usageErrorf("-f FILE is required")
	}
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
	} else {
		data, err = os.ReadFile(file)
	}
	return string(data), err
}

func profilesTable(ps []*slacklinev1.Profile) table {
	t := table{header: []string{"NAME", "SELECTOR", "VERSION", "BY", "ROLLOUT", "WAVE", "REASON"}}
	for _, p := range ps {
		var sel []string
		for k, v := range p.GetSelector() {
			sel = append(sel, k+"="+v)
		}
		slices.SortFunc(sel, naturalCompare)
		rollout, wave := "", ""
		if r := p.GetRollout(); r != nil {
			rollout = fmt.Sprintf("v%d %s", r.GetCandidate().GetNumber(), rolloutState(r.GetState()))
			wave = fmt.Sprintf("%d/%d", r.GetWave()+1, len(r.GetPolicy().GetWaves()))
		}
		t.rows = append(t.rows, []string{p.GetName(), strings.Join(sel, ","), strconv.FormatUint(p.GetStable().GetNumber(), 10),
			p.GetStable().GetBy(), rollout, wave, p.GetRollout().GetReason()})
	}
	return t
}

func rolloutState(s slacklinev1.ProfileRolloutState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "PROFILE_ROLLOUT_STATE_")), "_", "-")
}

// rolloutSummary is the lines above the agents' table of "profiles
// status".
func rolloutSummary(p *slacklinev1.Profile) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Profile %s: stable version %d (by %s)\n", p.GetName(), p.GetStable().GetNumber(), p.GetStable().GetBy())
	if r := p.GetRollout(); r != nil {
		rate := func(g *slacklinev1.ProfileGroup) float64 {
			if g.GetEstimatesScored() == 0 {
				return 0
			}
			return g.GetViolations() / float64(g.GetEstimatesScored())
		}
		group := func(name string, g *slacklinev1.ProfileGroup) {
			fmt.Fprintf(&b, "  %-8s %d agents, %d estimates scored, violation rate %.2f%%, run-queue p99 %v\n", name, g.GetAgents(),
				g.GetEstimatesScored(), 100*rate(g), g.GetRunqueueP99().AsDuration())
		}
		pr := r.GetPaired()
		paired := func(shadowVersion, liveVersion uint64) {
			fmt.Fprintf(&b, "  %-8s %d agents, same inputs: version %d in shadow %.2f%% of %d estimates, version %d live %.2f%% of %d\n", "paired",
				pr.GetAgents(), shadowVersion, 100*rate(pr.GetShadow()), pr.GetShadow().GetEstimatesScored(),
				liveVersion, 100*rate(pr.GetLive()), pr.GetLive().GetEstimatesScored())
		}
		if r.GetStage() == slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW {
			fmt.Fprintf(&b, "Rollout of version %d by %s: %s, shadow stage (not applied) on %d agents, soak %v\n", r.GetCandidate().GetNumber(), r.GetBy(),
				rolloutState(r.GetState()), len(r.GetShadowHostnames()), r.GetPolicy().GetShadowSoak().AsDuration())
			paired(r.GetCandidate().GetNumber(), r.GetPrevious().GetNumber())
		} else {
			fmt.Fprintf(&b, "Rollout of version %d by %s: %s, wave %d of %d on %d agents\n", r.GetCandidate().GetNumber(), r.GetBy(),
				rolloutState(r.GetState()), r.GetWave()+1, len(r.GetPolicy().GetWaves()), len(r.GetHostnames()))
			group("updated", r.GetUpdated())
			group("others", r.GetOthers())
			if pr.GetAgents() > 0 {
				paired(r.GetPrevious().GetNumber(), r.GetCandidate().GetNumber())
			}
		}
		if w := pr.GetWithoutShadows(); len(w) > 0 {
			fmt.Fprintf(&b, "  cannot shadow (judged live only): %s\n", strings.Join(w, ", "))
		}
		if r.GetReason() != "" {
			fmt.Fprintf(&b, "  %s\n", r.GetReason())
		}
	}
	b.WriteString("\n")
	return b.String()
}

func profileAgentsTable(agents []*slacklinev1.ProfileAgentStatus) table {
	t := table{header: []string{"HOSTNAME", "ASSIGNED", "RUNS", "SCORED", "VIOLATION", "RUNQ-P99", "SHADOW", "REFUSAL", "ID"}, narrow: 8}
	for _, a := range agents {
		s := a.GetSignals()
		runs := ""
		if s.GetProfile() != "" {
			runs = fmt.Sprintf("%s/%d", s.GetProfile(), s.GetVersion())
		}
		rate := ""
		if s.GetEstimatesScored() > 0 {
			rate = fmt.Sprintf("%.2f%%", 100*s.GetViolations()/float64(s.GetEstimatesScored()))
		}
		refusal := a.GetRefusal()
		if r := a.GetShadowRefusal(); r != "" && refusal == "" {
			refusal = "shadow: " + r
		}
		t.rows = append(t.rows, []string{a.GetHostname(), strconv.FormatUint(a.GetAssignedVersion(), 10), runs,
			strconv.FormatUint(s.GetEstimatesScored(), 10), rate, s.GetRunqueueP99().AsDuration().String(), shadowCell(a), refusal, a.GetAgentId()})
	}
	return t
}

// shadowCell is an agent's rollout shadow in "profiles status": the
// version it runs in shadow and the violation rates of the shadow and of
// its active settings over the same inputs, "-" for none, "cannot" for an
// agent that cannot shadow.
func shadowCell(a *slacklinev1.ProfileAgentStatus) string {
	s := a.GetSignals()
	switch {
	case s.GetReported() && !s.GetShadowCapable():
		return "cannot"
	case s.GetShadowProfile() == "":
		if a.GetShadowAssigned() {
			return fmt.Sprintf("(v%d pending)", a.GetAssignedShadowVersion())
		}
		return "-"
	}
	cell := fmt.Sprintf("v%d", s.GetShadowVersion())
	if s.GetShadowEstimatesScored() > 0 && s.GetActiveEstimatesScored() > 0 {
		cell += fmt.Sprintf(" %.2f%%/live %.2f%%", 100*s.GetShadowViolations()/float64(s.GetShadowEstimatesScored()),
			100*s.GetActiveViolations()/float64(s.GetActiveEstimatesScored()))
	}
	return cell
}

// parseSelector parses "k=v,k2=v2".
func parseSelector(text string) (map[string]string, error) {
	sel := map[string]string{}
	for pair := range strings.SplitSeq(text, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("%q: want name=value", pair)
		}
		sel[k] = strings.TrimSpace(v)
	}
	return sel, nil
}
