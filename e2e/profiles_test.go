package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slackline/slackline/coordinator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

// TestProfileChangesARealAgentsEstimator (#29): a real coordinator, a real
// agent labelled tier=web and simulated agents labelled tier=db; a profile
// for tier=web changes the real agent's estimator in place (its NodeService
// reports the new estimator, the agent keeps running) and no db agent's;
// a rollout's shadow stage runs the candidate in shadow on the real agent
// without applying it.
func TestProfileChangesARealAgentsEstimator(t *testing.T) {
	privileged.Require(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	coord, err := coordinator.New(coordinator.Config{WorkDir: t.TempDir(), Logger: quiet, AgentHeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	coordLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	coordURL := "http://" + coordLn.Addr().String()
	wg.Go(func() { coord.Run(ctx) })
	wg.Go(func() { server.Serve(ctx, server.Config{Listener: coordLn, Logger: quiet}, coord.Handler()) })

	root := fmt.Sprintf("slackline-profiletest-%d", os.Getpid())
	opts := testAgentOptions(t, root, coordURL, quiet)
	opts.Hostname, opts.Resources = "web-real", "cpus:2;mem:1024"
	opts.Attributes = map[string]string{"tier": "web"}
	opts.Estimator, opts.QoSControllers = "calibrated", []string{"interference"}
	a, err := opts.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(ctx) }()
	defer func() { cancel(); <-agentDone }()

	fleet, err := sim.NewFleet(sim.Config{Coordinator: coordURL, Count: 2, Resources: resources.MustParse("cpus:2;mem:1024"),
		HostnamePrefix: "db-", Attributes: map[string]string{"tier": "db"}, Logger: quiet,
		Profile: func(int, *slacklinev1.ProfileApplyCommand) (sim.ProfileSignals, error) {
			return sim.ProfileSignals{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { fleet.Run(ctx) })

	node := slacklinev1connect.NewNodeServiceClient(server.NewClient(), "http://"+opts.Listen)
	estimatorName := func() string {
		resp, err := node.GetEstimate(ctx, connect.NewRequest(&slacklinev1.GetEstimateRequest{}))
		if err != nil {
			return "error: " + err.Error()
		}
		return resp.Msg.GetEstimator()
	}
	profiles := slacklinev1connect.NewProfileServiceClient(server.NewClient(), coordURL)
	eventually(t, time.Minute, func() string {
		if fleet.Registered() != 2 {
			return fmt.Sprintf("%d db agents registered", fleet.Registered())
		}
		if got := estimatorName(); got != "calibrated" {
			return "the real agent's estimator is " + got
		}
		return ""
	})

	applied := time.Now()
	if _, err := profiles.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
		Name: "web", Selector: map[string]string{"tier": "web"}, Settings: "estimator: fast\nestimator-window: 30s\n"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() string {
		if got := estimatorName(); got != "fast" {
			return "the real agent's estimator is " + got
		}
		return ""
	})
	t.Logf("the real agent ran the profile's estimator %v after ApplyProfile (loaded machine)", time.Since(applied).Round(time.Millisecond))
	eventually(t, time.Minute, func() string {
		resp, err := profiles.GetProfileStatus(ctx, connect.NewRequest(&slacklinev1.GetProfileStatusRequest{Name: "web"}))
		if err != nil {
			return err.Error()
		}
		if n := len(resp.Msg.GetAgents()); n != 1 {
			return fmt.Sprintf("%d agents in the profile's status, want the real agent alone", n)
		}
		if s := resp.Msg.GetAgents()[0].GetSignals(); s.GetHostname() != "web-real" || s.GetProfile() != "web" || s.GetVersion() != 1 {
			return fmt.Sprintf("status signals %v, want web-real running web/1", s)
		}
		return ""
	})
	for _, sa := range fleet.Agents() {
		if p, v := sa.Profile(); p != "" || v != 0 {
			t.Errorf("db agent %s runs %s/%d, want no profile", sa.Hostname(), p, v)
		}
	}

	// Settings the agent cannot apply in place are refused before any agent
	// sees them.
	_, err = profiles.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
		Name: "web", Selector: map[string]string{"tier": "web"}, Settings: "monitor-interval: 1s"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a profile setting --monitor-interval: %v, want InvalidArgument", err)
	}

	// A rollout's shadow stage runs the candidate in shadow on the real
	// agent (the stage's one agent), beside its active settings, without
	// applying it; aborting the rollout stops the shadow (#29 item 5).
	if _, err := profiles.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator: fixed\nfixed-revocable: cpus:1\n",
		Policy: &slacklinev1.ProfileRolloutPolicy{Soak: durationpb.New(time.Hour), ShadowSoak: durationpb.New(time.Hour)}})); err != nil {
		t.Fatal(err)
	}
	shadowOf := func() (*slacklinev1.ProfileAgentSignals, string) {
		resp, err := profiles.GetProfileStatus(ctx, connect.NewRequest(&slacklinev1.GetProfileStatusRequest{Name: "web"}))
		if err != nil {
			return nil, err.Error()
		}
		if r := resp.Msg.GetProfile().GetRollout(); r.GetStage() != slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW {
			return nil, fmt.Sprintf("rollout stage %v (%s), want the shadow stage", r.GetStage(), r.GetReason())
		}
		return resp.Msg.GetAgents()[0].GetSignals(), ""
	}
	eventually(t, time.Minute, func() string {
		s, failed := shadowOf()
		if failed != "" {
			return failed
		}
		if !s.GetShadowCapable() || s.GetShadowProfile() != "web" || s.GetShadowVersion() != 2 {
			return fmt.Sprintf("status signals %v, want web-real able to shadow and running web/2 in shadow", s)
		}
		shadows, err := node.GetShadows(ctx, connect.NewRequest(&slacklinev1.GetShadowsRequest{}))
		if err != nil {
			return err.Error()
		}
		for _, sh := range shadows.Msg.GetShadows() {
			if sh.GetName() == "rollout" && sh.GetEstimator() == "fixed" {
				return ""
			}
		}
		return fmt.Sprintf("the agent's shadows %v, want the rollout's running the fixed estimator", shadows.Msg.GetShadows())
	})
	if got := estimatorName(); got != "fast" {
		t.Errorf("the real agent's estimator is %s during the shadow stage, want fast: the candidate applied", got)
	}
	if _, err := profiles.AbortRollout(ctx, connect.NewRequest(&slacklinev1.AbortRolloutRequest{Name: "web"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() string {
		resp, err := profiles.GetProfileStatus(ctx, connect.NewRequest(&slacklinev1.GetProfileStatusRequest{Name: "web"}))
		if err != nil {
			return err.Error()
		}
		if s := resp.Msg.GetAgents()[0].GetSignals(); s.GetShadowProfile() != "" {
			return fmt.Sprintf("status signals %v, want the shadow stopped after the abort", s)
		}
		return ""
	})
	if got := estimatorName(); got != "fast" {
		t.Errorf("the real agent's estimator is %s after the abort, want fast", got)
	}

	select {
	case err := <-agentDone:
		t.Fatalf("the agent stopped: %v", err)
	default:
	}
}
