// Command network is the network QoS benchmark (root): the scenario of
// internal/netbench — a request/response server as a guaranteed task and a
// bulk TCP sender as a revocable task sharing a 1 Gbit/s link — run three
// ways: the server alone, with the sender and no network QoS, with the
// sender and network QoS (pacing and the "network" controller). Each way
// runs --trials times on a fresh cluster; ratios are taken on the best
// trial of each way (the lowest p99), so a trial slowed by the rest of the
// host cannot make QoS look better or worse than it is. The last line is
//
//	network-qos: lc_p99_ratio=R be_share=S
//
// R is the server's p99 with QoS over its p99 alone (goal <= 1.5), S the
// bulk sender's goodput over what the server leaves of the link (goal
// >= 0.5). The line before gives the ratio without network QoS.
//
//	sudo go run ./scripts/bench/network --trials 3
//
// To tell the host's cost of moving the traffic from queueing at the link,
// --pace X paces revocable egress to a fixed X Mbit/s with no QoS
// controller (compare R for a few X), and --far-burst 65500 brings back
// the far end's old 64 KB bucket, which segmented every GSO packet in
// software (see internal/netbench).
//
// Measured on the 2-vCPU development VM, quiet host, 3 trials: alone p99
// 2.3 ms; no network QoS R=37 S=1.00 (the far end's 1 MB queue full);
// network QoS R=0.94 S=0.74 (p99 2.16-2.25 ms in all three trials, the
// pace held at 539 Mbit/s; without the controller's plateau R=1.27
// S=0.62, a sawtooth of 9-13 corrections). A fixed pace with no controller: 400 Mbit/s
// R=1.22 S=0.55, 700 Mbit/s R=1.31 S=0.96 — once the far end no longer
// segments, moving 1 Gbit/s costs these 2 vCPUs about 1-5% softirq time,
// not a floor. On a loaded host (load average 10) alone p99 ranged 2-240
// ms and every ratio with it: compare ways only on a quiet host.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/slackline/slackline/internal/netbench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "network:", err)
		os.Exit(1)
	}
}

func run() error {
	var o netbench.Options
	trials := flag.Int("trials", 3, "runs of each way; the best of each is compared")
	flag.Float64Var(&o.LinkMbps, "link", 1000, "the link's rate, Mbit/s (the agent's bandwidth)")
	flag.Float64Var(&o.Rate, "rate", 250, "requests per second to the server")
	flag.IntVar(&o.ResponseBytes, "response", 128<<10, "bytes of each response")
	flag.DurationVar(&o.Measure, "measure", 10*time.Second, "measured window of each run")
	flag.IntVar(&o.BurstBytes, "far-burst", 0, "the far end's token bucket, bytes (default 80 KB; under 64 KB it segments every GSO packet)")
	flag.Float64Var(&o.PaceMbps, "pace", 0, "with QoS: pace revocable egress to this fixed rate (Mbit/s) with no QoS controller")
	skipNoQoS := flag.Bool("skip-noqos", false, "do not run the way without network QoS (its ratio is then not printed)")
	verbose := flag.Bool("v", false, "print progress")
	binDir := flag.String("bin", "", "directory of prebuilt slackline-coordinator, slackline-agent, slackline-supervisor and netload (default: build them)")
	flag.Parse()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (namespaces, qdiscs, cgroups)")
	}
	if *verbose {
		o.Logf = func(format string, args ...any) { fmt.Printf("  "+format+"\n", args...) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.BinDir = *binDir
	if o.BinDir == "" {
		dir, err := os.MkdirTemp("", "slackline-netbench-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := netbench.Build(dir); err != nil {
			return err
		}
		o.BinDir = dir
	}

	best := map[netbench.Mode]netbench.Result{}
	modes := []netbench.Mode{netbench.Alone, netbench.NoQoS, netbench.QoS}
	if *skipNoQoS {
		modes = slices.Delete(modes, 1, 2)
	}
	for _, mode := range modes {
		fmt.Printf("== %s\n", mode)
		for trial := 0; trial < *trials; trial++ {
			r, err := netbench.Run(ctx, o, mode)
			if err != nil {
				return fmt.Errorf("%s, trial %d: %w", mode, trial, err)
			}
			fmt.Printf("  trial %d: p50 %v p99 %v (%d exchanges), server %.0f Mbit/s, revocable %.0f Mbit/s (%.0f%% of the %.0f left), %d corrections\n",
				trial, r.P50, r.P99, len(r.Latencies), r.GuaranteedMbps, r.RevocableMbps, 100*r.Share(), r.LeftMbps, len(r.Corrections))
			if b, ok := best[mode]; !ok || r.P99 < b.P99 {
				best[mode] = r
			}
		}
	}
	alone, noQoS, withQoS := best[netbench.Alone], best[netbench.NoQoS], best[netbench.QoS]
	fmt.Printf("\n%-40s %10s %10s %12s %8s\n", "way (best trial)", "p50", "p99", "revocable", "share")
	for _, mode := range modes {
		r := best[mode]
		fmt.Printf("%-40s %10v %10v %7.0f Mbit/s %7.0f%%\n", r.Mode, r.P50, r.P99, r.RevocableMbps, 100*r.Share())
	}
	var steps []string
	for _, c := range withQoS.Corrections {
		steps = append(steps, fmt.Sprintf("%s %.0f", c.GetKind().String()[16:], c.GetBandwidthLimitMbps()))
	}
	slices.Reverse(steps)
	if len(steps) > 8 {
		steps = steps[:8]
	}
	fmt.Printf("\nlast network corrections (newest first): %v\n", steps)
	if !*skipNoQoS {
		fmt.Printf("without network QoS: lc_p99_ratio=%.2f be_share=%.2f\n",
			ratio(noQoS.P99, alone.P99), noQoS.Share())
	}
	if o.PaceMbps > 0 {
		fmt.Printf("(revocable egress paced to a fixed %g Mbit/s, no QoS controller)\n", o.PaceMbps)
	}
	fmt.Printf("network-qos: lc_p99_ratio=%.2f be_share=%.2f\n", ratio(withQoS.P99, alone.P99), withQoS.Share())
	return nil
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
