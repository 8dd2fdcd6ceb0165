package network_test

import (
	"context"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/netbench"
	"github.com/slackline/slackline/internal/privileged"
)

// TestNetworkQoS runs the network QoS scenario (internal/netbench) on real
// binaries: a request/response server as a guaranteed task beside a bulk
// TCP sender as a revocable task, through a rate-limited far end. With
// network QoS (pacing and the "network" controller) the server's p99 stays
// within 1.5x of its p99 alone while the sender gets at least half of the
// link the server leaves; each side is the best of up to three runs, so
// that a run slowed by the rest of the host does not decide. The link is
// 300 Mbit/s here (1 Gbit/s in scripts/bench/network, which also runs the
// no-QoS baseline): the same queues for a third of the CPU the kernel
// spends moving packets through the namespaces.
func TestNetworkQoS(t *testing.T) {
	privileged.Require(t)
	bin := t.TempDir()
	if err := netbench.Build(bin); err != nil {
		t.Fatal(err)
	}
	o := netbench.Options{BinDir: bin, LinkMbps: 300, QueueBytes: 300 << 10, Rate: 75,
		Warmup: 2 * time.Second, Settle: 5 * time.Second, Measure: 6 * time.Second}
	ctx := context.Background()
	best := func(mode netbench.Mode, good func(netbench.Result) bool) netbench.Result {
		var b netbench.Result
		for trial := 0; trial < 3; trial++ {
			r, err := netbench.Run(ctx, o, mode)
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			t.Logf("%s, trial %d: p99 %v, revocable %.0f Mbit/s (%.0f%% of the %.0f left), %d corrections",
				mode, trial, r.P99, r.RevocableMbps, 100*r.Share(), r.LeftMbps, len(r.Corrections))
			if trial == 0 || r.P99 < b.P99 {
				b = r
			}
			if good(b) {
				break
			}
		}
		return b
	}
	alone := best(netbench.Alone, func(netbench.Result) bool { return false })
	withQoS := best(netbench.QoS, func(r netbench.Result) bool {
		return float64(r.P99) <= 1.5*float64(alone.P99) && r.Share() >= 0.5
	})
	ratio := float64(withQoS.P99) / float64(alone.P99)
	t.Logf("network-qos: lc_p99_ratio=%.2f be_share=%.2f (p99 alone %v, with QoS %v)", ratio, withQoS.Share(), alone.P99, withQoS.P99)
	if ratio > 1.5 {
		t.Errorf("the server's p99 with network QoS is %.2fx its p99 alone, want <= 1.5x", ratio)
	}
	if withQoS.Share() < 0.5 {
		t.Errorf("the revocable sender got %.0f%% of what the server leaves, want >= 50%%", 100*withQoS.Share())
	}
}
