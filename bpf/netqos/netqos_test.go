package netqos_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
	"github.com/slackline/slackline/internal/nettest"
	"github.com/slackline/slackline/internal/privileged"
)

func TestMain(m *testing.M) {
	if nettest.RunHelper(nil) {
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// setup makes a cgroup root with one task cgroup, loads the programs there
// and builds a veth pair whose far end takes 100 Mbit/s with a queue of
// queueBytes.
func setup(t *testing.T, queueBytes int) (progs *netqos.Programs, taskDir string, taskID uint64, pair *nettest.Pair) {
	t.Helper()
	privileged.Require(t)
	root, err := nettest.NewCgroupRoot("slackline-netqostest", "task")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nettest.RemoveCgroups(root) })
	taskDir = filepath.Join(root, "task")
	if taskID, err = bpf.CgroupID(taskDir); err != nil {
		t.Fatal(err)
	}
	if progs, err = netqos.Load(netqos.Config{CgroupRoot: root, Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { progs.Close() })
	if pair, err = nettest.NewPair(nettest.Options{PeerIngressMbps: 100, PeerQueueBytes: queueBytes}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	return progs, taskDir, taskID, pair
}

// rr runs a request/response client in the task cgroup for d and returns
// its latencies.
func rr(t *testing.T, pair *nettest.Pair, dir string, port int, d time.Duration) []time.Duration {
	t.Helper()
	ln, err := pair.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nettest.ServeEcho(ln)
	h, err := nettest.StartHelper(dir, pair.NodeNetns, nil, "rr", fmt.Sprintf("%s:%d", pair.PeerIP, port), "200", "1", "1000", "100", d.String())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	if err := h.Go(); err != nil {
		t.Fatal(err)
	}
	out, err := h.Wait()
	if err != nil {
		t.Fatal(err)
	}
	lat, err := nettest.ParseLatencies(out)
	if err != nil {
		t.Fatal(err)
	}
	return lat
}

// meanRTT is the mean of the samples between two readings.
func meanRTT(before, after netqos.TCPStats) time.Duration {
	n := after.RTTCount - before.RTTCount
	if n == 0 {
		return 0
	}
	return (after.RTTTotal - before.RTTTotal) / time.Duration(n)
}

// TestTCPSignals: a watched cgroup's round trips are sampled, and grow
// when its own bulk transfer fills the far end's queue; its
// retransmissions are counted when that queue overflows; an unwatched
// cgroup has no counters.
func TestTCPSignals(t *testing.T) {
	// 96 KB at 100 Mbit/s: up to 8 ms of queue, and losses once full.
	progs, dir, id, pair := setup(t, 96<<10)
	if _, err := progs.TCPStats(id); !errors.Is(err, bpf.ErrNotTracked) {
		t.Fatalf("TCPStats before Watch: %v, want ErrNotTracked", err)
	}
	if err := progs.Watch(id); err != nil {
		t.Fatal(err)
	}
	idle0, err := progs.TCPStats(id)
	if err != nil {
		t.Fatal(err)
	}
	exchanges := len(rr(t, pair, dir, 9100, time.Second))
	idle1, _ := progs.TCPStats(id)
	idle := meanRTT(idle0, idle1)
	t.Logf("idle: %d RTT samples from %d exchanges, mean %v", idle1.RTTCount-idle0.RTTCount, exchanges, idle)
	// About one sample per exchange (the reply acknowledges the request),
	// however many exchanges a slow or emulated machine completes.
	if exchanges < 10 || idle1.RTTCount-idle0.RTTCount < uint64(exchanges/2) {
		t.Fatalf("%d RTT samples from %d exchanges", idle1.RTTCount-idle0.RTTCount, exchanges)
	}
	if idle <= 0 {
		t.Fatalf("RTT samples all zero (mean %v): the kernel passed no RTT and no fallback was read", idle)
	}

	// A bulk transfer of the same cgroup beside the exchanges.
	ln, err := pair.Listen(9101)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nettest.ServeSink(ln)
	bulk, err := nettest.StartHelper(dir, pair.NodeNetns, nil, "send", fmt.Sprintf("%s:9101", pair.PeerIP), "cubic", "2s")
	if err != nil {
		t.Fatal(err)
	}
	defer bulk.Kill()
	if err := bulk.Go(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	busy0, _ := progs.TCPStats(id)
	rr(t, pair, dir, 9102, time.Second)
	busy1, _ := progs.TCPStats(id)
	if _, err := bulk.Wait(); err != nil {
		t.Fatal(err)
	}
	busy := meanRTT(busy0, busy1)
	t.Logf("beside a bulk transfer: %d RTT samples, mean %v; %d retransmissions in all", busy1.RTTCount-busy0.RTTCount, busy, busy1.Retransmits)
	// The queue adds delay in absolute terms: at least a quarter of its
	// 8 ms (a ratio to the idle RTT does not hold where the idle RTT is
	// itself milliseconds, as in an emulated guest: 4.8 ms idle there).
	if busy-idle < 2*time.Millisecond {
		t.Errorf("mean RTT %v beside a bulk transfer into an 8 ms queue, %v idle: want at least 2 ms more", busy, idle)
	}
	if busy1.Retransmits == 0 {
		t.Error("no retransmission counted while the far end's queue overflowed")
	}
	var inHistogram uint64
	for _, n := range busy1.RTT {
		inHistogram += n
	}
	if inHistogram != busy1.RTTCount {
		t.Errorf("histogram holds %d samples, count %d", inHistogram, busy1.RTTCount)
	}
	if err := progs.Unwatch(id); err != nil {
		t.Fatal(err)
	}
	if _, err := progs.TCPStats(id); !errors.Is(err, bpf.ErrNotTracked) {
		t.Fatalf("TCPStats after Unwatch: %v, want ErrNotTracked", err)
	}
}

// TestProbes: every probe gives an answer that follows the contract.
func TestProbes(t *testing.T) {
	privileged.Require(t)
	for _, r := range netqos.Probe() {
		t.Logf("%s: %s %v", r.Name, r.Status(), r.Err)
		if r.Status() == bpf.FeatureUnknown {
			t.Errorf("probe %s could not tell: %v", r.Name, r.Err)
		}
	}
}
