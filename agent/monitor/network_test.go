package monitor

import (
	"path/filepath"
	"testing"
	"time"
)

// TestNetworkFigures: egress and ingress rates, packets, TCP round-trip
// percentiles and retransmissions are computed over the interval between
// two eBPF samples, kept in the history (egress), and restart after the
// counters go backwards.
func TestNetworkFigures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ebpf := &fakeEBPF{}
	m := newTestMonitor(t, "v2", dir, ebpf, 10)
	rel := "slackline/guaranteed/web"
	v2Container(t, filepath.Join(dir, "cgroup"), rel, 1_000_000)
	const id = 77
	m.SetTargets([]Target{{ID: "web", CgroupPath: rel, CgroupID: id}})

	rtt := make([]uint64, 32)
	rtt[7] = 10
	first := EBPFStats{RunqBuckets: make([]uint64, 32), NetTxBytes: 1_000_000, NetRxBytes: 500_000, NetTxPackets: 1000,
		TCPRTTBuckets: rtt, TCPRTTCount: 10, TCPRetransmits: 1}
	ebpf.set(id, first)
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	u, _ := m.Latest("web")
	if u.NetTxMbps != 0 || u.TCPRTTP99 != 0 || u.Stats.GetTcp().GetRttSamples() != 10 || u.Stats.GetTcp().GetRetransmits() != 1 {
		t.Fatalf("first sample: tx %v Mbit/s, p99 %v, tcp %v; want no interval figures and the cumulative counters", u.NetTxMbps, u.TCPRTTP99, u.Stats.GetTcp())
	}

	// 500 ms later: 6.25 MB sent (100 Mbit/s), 1.25 MB received, 500
	// packets, 5 retransmissions; 98 round trips in [128, 256) µs and 2 in
	// [8192, 16384) µs.
	second := first
	second.NetTxBytes, second.NetRxBytes, second.NetTxPackets = 7_250_000, 1_750_000, 1500
	second.TCPRTTBuckets = make([]uint64, 32)
	second.TCPRTTBuckets[7], second.TCPRTTBuckets[13] = 108, 2
	second.TCPRTTCount, second.TCPRetransmits = 110, 6
	ebpf.set(id, second)
	t1 := t0.Add(500 * time.Millisecond)
	if err := m.Sample(t1); err != nil {
		t.Fatal(err)
	}
	u, _ = m.Latest("web")
	if !closeTo(u.NetTxMbps, 100) || !closeTo(u.NetRxMbps, 20) || u.NetTxPackets != 500 || u.TCPRetransmits != 5 {
		t.Errorf("rates: tx %v rx %v Mbit/s, %d packets, %d retransmits; want 100, 20, 500, 5", u.NetTxMbps, u.NetRxMbps, u.NetTxPackets, u.TCPRetransmits)
	}
	if u.Stats.NetTxMbps != u.NetTxMbps || u.Stats.NetRxMbps != u.NetRxMbps {
		t.Errorf("Stats rates %v/%v differ from Usage's", u.Stats.NetTxMbps, u.Stats.NetRxMbps)
	}
	// Interpolated within the log2 buckets, like the run-queue percentiles.
	if want := 128*time.Microsecond + 128*time.Microsecond*49/98; absDuration(u.TCPRTTP50-want) > time.Microsecond {
		t.Errorf("RTT p50 %v, want %v", u.TCPRTTP50, want)
	}
	if want := 12288 * time.Microsecond; absDuration(u.TCPRTTP99-want) > time.Microsecond {
		t.Errorf("RTT p99 %v, want %v", u.TCPRTTP99, want)
	}
	if got := u.Stats.GetTcp().GetRttP99Seconds(); !closeTo(got, 0.012288) {
		t.Errorf("Stats RTT p99 %v s", got)
	}
	if h := m.History(nil, "web"); len(h) != 2 || !closeTo(h[1].NetTxMbps, 100) {
		t.Errorf("history %+v: want the egress rate in the second point", h)
	}

	// The cgroup's counters were recreated: no interval figures this time.
	ebpf.set(id, EBPFStats{RunqBuckets: make([]uint64, 32), NetTxBytes: 10})
	if err := m.Sample(t1.Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if u, _ = m.Latest("web"); u.NetTxMbps != 0 || u.TCPRTTP99 != 0 || u.Stats.GetTcp() != nil {
		t.Errorf("after a reset: tx %v, p99 %v, tcp %v", u.NetTxMbps, u.TCPRTTP99, u.Stats.GetTcp())
	}
}

func closeTo(a, b float64) bool { return a-b < 1e-6*max(1, b) && b-a < 1e-6*max(1, b) }

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
