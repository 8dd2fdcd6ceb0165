package coordinator

import (
	"context"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, wallConfig(t.TempDir()))
	tc.registerAgent("host-a", "cpus:1;mem:512")
	fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
	fw.nextOffer()

	health := grpchealth.NewClient(tc.client, tc.url, connect.WithGRPC())
	for _, svc := range []string{"", slacklinev1connect.SchedulerServiceName, slacklinev1connect.OperatorServiceName} {
		resp, err := health.Check(context.Background(), &grpchealth.CheckRequest{Service: svc})
		if err != nil || resp.Status != grpchealth.StatusServing {
			t.Fatalf("health of %q = %v, %v", svc, resp, err)
		}
	}
	if _, err := health.Check(context.Background(), &grpchealth.CheckRequest{Service: "nope"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("health of an unknown service: %v, want NotFound", err)
	}

	resp, err := tc.client.Get(tc.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`slackline_coordinator_allocation_pass_duration_seconds_bucket{kind="full"`,
		"slackline_coordinator_offers_sent_total 1",
		`slackline_coordinator_agents{state="active"} 1`,
		`slackline_coordinator_frameworks{state="connected"} 1`,
		"slackline_coordinator_outstanding_offers 1",
		`slackline_coordinator_revocable_resources{kind="offered",resource="bandwidth_bits_per_second"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestOfferTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := fastConfig(t.TempDir())
		cfg.OfferTimeout = 200 * time.Millisecond
		tc := startPipeCluster(t, cfg)
		tc.registerAgent("host-a", "cpus:1;mem:512")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		offer := fw.nextOffer()
		ev := fw.next(func(ev *slacklinev1.Event) bool { return ev.GetRescind() != nil })
		if ev.GetRescind().GetOfferId() != offer.GetId() {
			t.Fatalf("rescinded %v, want %s", ev, offer.GetId())
		}
		// The resources come back in a new offer.
		if again := fw.nextOffer(); again.GetId() == offer.GetId() {
			t.Fatal("the rescinded offer was sent again")
		}
	})
}

// TestPprof: the Go runtime's profiles are served with --pprof only.
func TestPprof(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		cfg := wallConfig(t.TempDir())
		cfg.Pprof = on
		tc := startCluster(t, cfg)
		resp, err := tc.client.Get(tc.url + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case on && (resp.StatusCode != 200 || !strings.Contains(string(body), "coordinator.test")):
			t.Errorf("with --pprof: %d %q, want 200 and this test binary's command line", resp.StatusCode, body)
		case !on && resp.StatusCode != 404:
			t.Errorf("without --pprof: %d, want 404", resp.StatusCode)
		}
	}
}
