package qos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/qos"
)

// netInput is one evaluation's input: a guaranteed container "web" with
// TCP round trips, a revocable "bulk" sending revocableTx, the link's
// egress, and the pace state.
type netInput struct {
	at                     time.Duration // since t0; samples and link are fresh at this time
	rttP50, rttP99         time.Duration
	retransmits, packets   uint64
	revocableTx, linkTx    float64
	estimate, appliedLimit float64
}

func (n netInput) input() qos.Input {
	now := t0.Add(n.at)
	return qos.Input{
		Now:  now,
		Node: qos.Node{LinkCapacity: 1000, LinkTx: n.linkTx, LinkSampledAt: now},
		Containers: []qos.Container{
			{ID: "web", SampledAt: now, TCPRTTP50: n.rttP50, TCPRTTP99: n.rttP99, TCPRetransmits: n.retransmits, NetTxPackets: n.packets, NetTx: 100},
			{ID: "bulk", TaskID: "bulk-task", Revocable: true, SampledAt: now, NetTx: n.revocableTx},
		},
		RevocableBandwidth: n.estimate, RevocableBandwidthLimit: n.appliedLimit,
	}
}

// TestNetworkController drives the controller through sequences of
// evaluations; each step lists the bandwidth limit it must ask for (-1:
// nothing; 0: Unthrottle to the estimate) and words its reason contains.
func TestNetworkController(t *testing.T) {
	calm := netInput{rttP50: 200 * time.Microsecond, rttP99: 300 * time.Microsecond, revocableTx: 500, linkTx: 600, estimate: 800}
	at := func(in netInput, d time.Duration) netInput { in.at = d; return in }
	with := func(in netInput, f func(*netInput)) netInput { f(&in); return in }
	type step struct {
		in     netInput
		want   float64
		reason string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "a saturated link with revocable traffic: cut from what revocable work sends, step by step",
			steps: []step{
				{in: at(with(calm, func(n *netInput) { n.linkTx = 980 }), 0), want: 350, reason: "link egress 980 Mbit/s is 98% of 1000"},
				// Too soon for another step: the cut has not shown yet.
				{in: at(with(calm, func(n *netInput) { n.linkTx = 980; n.appliedLimit = 350 }), 100*time.Millisecond), want: -1},
				{in: at(with(calm, func(n *netInput) { n.linkTx = 970; n.revocableTx = 350; n.appliedLimit = 350 }), 250*time.Millisecond), want: 245},
				// Between the thresholds the pace holds.
				{in: at(with(calm, func(n *netInput) { n.linkTx = 900; n.revocableTx = 245; n.appliedLimit = 245 }), 500*time.Millisecond), want: -1},
				{in: at(with(calm, func(n *netInput) { n.linkTx = 900; n.revocableTx = 245; n.appliedLimit = 245 }), 5*time.Second), want: -1},
			},
		},
		{
			name: "a saturated link without revocable traffic: nothing to slow down",
			steps: []step{
				{in: at(with(calm, func(n *netInput) { n.linkTx = 990; n.revocableTx = 0 }), 0), want: -1},
			},
		},
		{
			name: "round trips of guaranteed traffic rise above their baseline",
			steps: []step{
				{in: at(calm, 0), want: -1},
				// 1.2 ms is below baseline (its calm p99) + 1 ms: queueing a
				// guaranteed service shrugs off.
				{in: at(with(calm, func(n *netInput) { n.rttP99 = 1200 * time.Microsecond }), time.Second), want: -1},
				// With the link at 60% of its capacity the queue is not the
				// node's: the host is slow.
				{in: at(with(calm, func(n *netInput) { n.rttP99 = 5 * time.Millisecond }), 1500*time.Millisecond), want: -1},
				{in: at(with(calm, func(n *netInput) { n.rttP99 = 5 * time.Millisecond }), 1600*time.Millisecond), want: -1},
				// Busy (85%, not saturated): one slow sample is not enough
				// (Persistence 2); the second is.
				{in: at(with(calm, func(n *netInput) { n.rttP99 = 5 * time.Millisecond; n.linkTx = 850 }), 2*time.Second), want: -1},
				{in: at(with(calm, func(n *netInput) { n.rttP99 = 5 * time.Millisecond; n.linkTx = 850 }), 2100*time.Millisecond),
					want: 350, reason: "web TCP round-trip p99 5 ms > 1.3 ms (baseline 300 µs)"},
			},
		},
		{
			name: "losses of guaranteed traffic",
			steps: []step{
				{in: at(with(calm, func(n *netInput) { n.retransmits, n.packets = 2, 100 }), 0), want: -1}, // fewer than MinRetransmits
				{in: at(with(calm, func(n *netInput) { n.retransmits, n.packets, n.linkTx = 30, 1000, 850 }), time.Second), want: -1},
				{in: at(with(calm, func(n *netInput) { n.retransmits, n.packets, n.linkTx = 30, 1000, 850 }), 1100*time.Millisecond),
					want: 350, reason: "web retransmitted 30 segments, 3.0% of its packets"},
			},
		},
		{
			name: "calm: the pace rises by 5% of the capacity to the plateau, holds there, then to the estimate",
			steps: []step{
				// Cut from 500: the plateau is 425 (0.85 of 500) for 30 s.
				{in: at(with(calm, func(n *netInput) { n.linkTx = 990 }), 0), want: 350},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 350; n.revocableTx = 350 }), 100*time.Millisecond), want: -1},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 350; n.revocableTx = 350 }), 2*time.Second), want: -1}, // calm for 1.9 s
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 350; n.revocableTx = 350 }), 2100*time.Millisecond),
					want: 400, reason: "calm for 2s: revocable egress pace 350 Mbit/s -> 400 Mbit/s"},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 400; n.revocableTx = 400 }), 2300*time.Millisecond), want: -1}, // IncreaseInterval
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 400; n.revocableTx = 400 }), 2700*time.Millisecond),
					want: 425, reason: "-> 425 Mbit/s (the plateau)"},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 425; n.revocableTx = 425 }), 3300*time.Millisecond), want: -1},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 425; n.revocableTx = 425 }), 29*time.Second), want: -1},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 425; n.revocableTx = 425 }), 30100*time.Millisecond), want: 475},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 775; n.revocableTx = 775 }), 30700*time.Millisecond), want: 0, reason: "-> the estimate"},
			},
		},
		{
			name: "delayed again at the plateau: a lower plateau",
			steps: []step{
				{in: at(with(calm, func(n *netInput) { n.linkTx = 990 }), 0), want: 350},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 350; n.revocableTx = 350 }), 100*time.Millisecond), want: -1},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 350; n.revocableTx = 350 }), 2100*time.Millisecond), want: 400},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 400; n.revocableTx = 400; n.linkTx = 990 }), 2700*time.Millisecond), want: 280},
				// The plateau is now 340 (0.85 of 400).
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 280; n.revocableTx = 280 }), 2800*time.Millisecond), want: -1},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 280; n.revocableTx = 280 }), 4800*time.Millisecond), want: 330},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 330; n.revocableTx = 330 }), 5400*time.Millisecond), want: 340},
				{in: at(with(calm, func(n *netInput) { n.appliedLimit = 340; n.revocableTx = 340 }), 6000*time.Millisecond), want: -1},
			},
		},
		{
			name: "never below the floor (1% of the capacity)",
			steps: []step{
				{in: at(with(calm, func(n *netInput) { n.linkTx = 990; n.revocableTx = 12; n.appliedLimit = 12 }), 0), want: 10},
				{in: at(with(calm, func(n *netInput) { n.linkTx = 990; n.revocableTx = 10; n.appliedLimit = 10 }), time.Second), want: -1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := qos.NewNetwork(qos.DefaultConfig().Network)
			for i, s := range tt.steps {
				got := c.Evaluate(s.in.input())
				if s.want < 0 {
					if len(got) != 0 {
						t.Fatalf("step %d: %v, want nothing", i, got)
					}
					continue
				}
				if len(got) != 1 {
					t.Fatalf("step %d: %v, want one correction to %v Mbit/s", i, got, s.want)
				}
				g := got[0]
				wantKind := qos.Throttle
				if s.want == 0 || (s.in.appliedLimit > 0 && s.want > s.in.appliedLimit) {
					wantKind = qos.Unthrottle
				}
				if g.Kind != wantKind || g.Resource != qos.Bandwidth || g.ContainerID != "" || !near(g.BandwidthLimit, s.want) || g.Controller != "network" {
					t.Fatalf("step %d: %v (%+v), want %v to %v Mbit/s", i, g, g, wantKind, s.want)
				}
				if !strings.Contains(g.Reason, s.reason) {
					t.Fatalf("step %d: reason %q does not say %q", i, g.Reason, s.reason)
				}
			}
		})
	}
}

// TestNetworkStaleLinkSample: a link sample taken before the last change
// cannot show it and does not justify another cut.
func TestNetworkStaleLinkSample(t *testing.T) {
	c := qos.NewNetwork(qos.DefaultConfig().Network)
	in := netInput{rttP50: 200 * time.Microsecond, rttP99: 300 * time.Microsecond, revocableTx: 500, linkTx: 990, estimate: 800}.input()
	if got := c.Evaluate(in); len(got) != 1 {
		t.Fatalf("first evaluation: %v", got)
	}
	in.Now = in.Now.Add(time.Second)
	in.RevocableBandwidthLimit = 350
	for i := range in.Containers {
		in.Containers[i].SampledAt = in.Now
	}
	// in.Node.LinkSampledAt is still the first evaluation's time.
	if got := c.Evaluate(in); len(got) != 0 {
		t.Fatalf("cut again on a link sample older than the cut: %v", got)
	}
}

// TestNetworkClosedLoop runs the controller against a model of a 1 Gbit/s
// link shared by a guaranteed sender (300 Mbit/s) and a revocable bulk
// sender that takes whatever its pace allows: beyond the link's capacity a
// queue builds and the guaranteed round trips grow with it. After it
// settles, the link must stay below saturation (no standing queue) while
// the revocable sender gets most of what the guaranteed one leaves.
func TestNetworkClosedLoop(t *testing.T) {
	const capacity, guaranteed, estimate = 1000.0, 300.0, 700.0
	c := qos.NewNetwork(qos.DefaultConfig().Network)
	limit, queue := 0.0, 0.0 // applied limit (Mbit/s), queue (Mbit)
	step := 100 * time.Millisecond
	var revocableSum, linkMax float64
	var samples int
	for i := 0; i < 600; i++ {
		now := t0.Add(time.Duration(i) * step)
		pace := estimate
		if limit > 0 {
			pace = min(pace, limit)
		}
		offered := guaranteed + pace
		queue = max(0, queue+(offered-capacity)*step.Seconds())
		linkTx := min(offered, capacity)
		revocable := linkTx - guaranteed*linkTx/offered
		rtt := 200*time.Microsecond + time.Duration(queue/capacity*float64(time.Second))
		in := qos.Input{
			Now:  now,
			Node: qos.Node{LinkCapacity: capacity, LinkTx: linkTx, LinkSampledAt: now},
			Containers: []qos.Container{
				{ID: "web", SampledAt: now, TCPRTTP50: rtt, TCPRTTP99: rtt + 100*time.Microsecond, NetTx: guaranteed},
				{ID: "bulk", Revocable: true, SampledAt: now, NetTx: revocable},
			},
			RevocableBandwidth: estimate, RevocableBandwidthLimit: limit,
		}
		for _, corr := range c.Evaluate(in) {
			limit = corr.BandwidthLimit
		}
		if i >= 300 { // the last 30 s
			revocableSum += revocable
			linkMax = max(linkMax, linkTx)
			samples++
		}
	}
	share := revocableSum / float64(samples) / (capacity - guaranteed)
	t.Logf("settled: revocable gets %.0f%% of what the guaranteed sender leaves, link peak %.0f Mbit/s, queue %.1f Mbit", 100*share, linkMax, queue)
	if linkMax >= 0.95*capacity || queue > 1 {
		t.Errorf("the link stays saturated: peak %.0f Mbit/s, queue %.1f Mbit", linkMax, queue)
	}
	if share < 0.7 {
		t.Errorf("revocable sender gets %.0f%% of the capacity left, want >= 70%%", 100*share)
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
