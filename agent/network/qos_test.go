package network_test

import (
	"context"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/netbench"
	"github.com/slackline/slackline/internal/privileged"
)

// TestNetworkQoS runs the network QoS scenario (internal/netbench) end to
// end on real binaries: a request/response server as a guaranteed task
// beside a bulk TCP sender as a revocable task, through a rate-limited far
// end, with pacing and the "network" controller on. It checks what cannot
// depend on how busy the host is: the server answers, the revocable sender
// moves data and never more than the link. The latency goal (p99 with QoS
// within 1.5x of alone, the sender at least half of what the server leaves)
// is a measurement, made by scripts/bench/network side by side with the
// no-QoS baseline; this test logs the same figures. (As an assertion it
// failed on a CI-like run whose "alone" p99 ranged 8-214 ms across trials on
// a loaded 2-vCPU host.)
func TestNetworkQoS(t *testing.T) {
	privileged.Require(t)
	bin := t.TempDir()
	if err := netbench.Build(bin); err != nil {
		t.Fatal(err)
	}
	o := netbench.Options{BinDir: bin, LinkMbps: 300, QueueBytes: 300 << 10, Rate: 75,
		Warmup: 2 * time.Second, Settle: 5 * time.Second, Measure: 6 * time.Second,
		// Each second's usage, estimate, QoS limit and pace: a failure
		// shows what held the sender (a CI run's sender moved nothing,
		// with no correction made, and nothing said why).
		Logf: t.Logf,
		// What is tested is the network controller: CI's CPU hogs must
		// not starve the revocable sender, as they may, by design.
		RevocableCPU: true}
	ctx := context.Background()
	run := func(mode netbench.Mode) netbench.Result {
		r, err := netbench.Run(ctx, o, mode)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		t.Logf("%s: p99 %v, revocable %.0f Mbit/s (%.0f%% of the %.0f left), %d corrections",
			mode, r.P99, r.RevocableMbps, 100*r.Share(), r.LeftMbps, len(r.Corrections))
		if r.P99 <= 0 {
			t.Errorf("%s: the guaranteed server answered nothing", mode)
		}
		return r
	}
	alone := run(netbench.Alone)
	withQoS := run(netbench.QoS)
	t.Logf("network-qos: lc_p99_ratio=%.2f be_share=%.2f (p99 alone %v, with QoS %v)",
		float64(withQoS.P99)/float64(alone.P99), withQoS.Share(), alone.P99, withQoS.P99)
	if withQoS.RevocableMbps <= 0 {
		t.Errorf("the revocable sender moved nothing beside the server")
	}
	if withQoS.RevocableMbps > 1.1*o.LinkMbps {
		t.Errorf("the revocable sender measured %.0f Mbit/s through a %.0f Mbit/s link", withQoS.RevocableMbps, o.LinkMbps)
	}
}
