package netqos_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
	"github.com/slackline/slackline/internal/nettest"
	"github.com/slackline/slackline/internal/privileged"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if nettest.RunHelper(nil) {
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// setup makes a cgroup root with one task cgroup, loads the programs there
// and builds a veth pair whose far end takes mbps with a queue of
// queueBytes.
func setup(t *testing.T, mbps float64, queueBytes int) (progs *netqos.Programs, taskDir string, taskID uint64, pair *nettest.Pair) {
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
	if pair, err = nettest.NewPair(nettest.Options{PeerIngressMbps: mbps, PeerQueueBytes: queueBytes}); err != nil {
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

// mean is the mean of latencies (0 for none).
func mean(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	return sum / time.Duration(len(lat))
}

// overflowTimeout bounds the wait for a bulk transfer to overflow the
// test's queue: well under a second on any machine seen (a sender at 20
// Mbit/s fills 40 KB in 16 ms), generous for a loaded or emulated one.
const overflowTimeout = time.Minute

// waitTCPStats polls a watched cgroup's counters until cond holds, and
// returns them; after timeout it returns an error with the last reading.
func waitTCPStats(progs *netqos.Programs, id uint64, timeout time.Duration, cond func(netqos.TCPStats) bool) (netqos.TCPStats, error) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := progs.TCPStats(id)
		if err != nil {
			return st, err
		}
		if cond(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("not within %v: %d RTT samples (mean %v), %d retransmissions", timeout, st.RTTCount, meanRTT(netqos.TCPStats{}, st), st.Retransmits)
		}
		<-tick.C
	}
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
//
// The queue drains at 8 Mbit/s, slower than any sender here, so that it
// fills; its 40 KB then add 41 ms, several times the scheduling delay of
// an emulated guest (16 ms idle under TCG on Linux 6.1), which at 100
// Mbit/s (8 ms) hid it. An emulated guest sends about 60 Mbit/s alone,
// but a 6.12 guest beside another guest's tests sent 19 Mbit/s for a
// minute (its sink got 143 MB) into the 20 Mbit/s this test used to
// drain at, without loss: most likely its process could not refill the
// socket buffer faster than the queue drained. The busy
// samples are taken once a retransmission shows the queue full, so the
// queue is in their path on any machine, loaded or not (the test used to
// wait 500 ms and skip when the application's round trips had not risen).
func TestTCPSignals(t *testing.T) {
	const mbps, queueBytes = 8, 40 << 10
	queueDelay := time.Duration(float64(queueBytes*8) / (mbps * 1e6) * float64(time.Second))
	progs, dir, id, pair := setup(t, mbps, queueBytes)
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
	// No full read after the first: whatever ReadAllTCP finds later the
	// programs' changed marks asked for.
	netqos.SetFullReadInterval(progs, time.Hour)
	all := map[uint64]netqos.TCPStats{7: {}} // replaced
	if err := progs.ReadAllTCP(all); err != nil || len(all) != 1 || all[id] != idle0 {
		t.Fatalf("ReadAllTCP = %v, %v; want only cgroup %d's %+v", all, err, id, idle0)
	}
	// ReadChangedTCP (#29) stores and names the cgroup at its first read,
	// drops what is not watched, and names nothing while nothing moved.
	changed := map[uint64]netqos.TCPStats{7: {}}
	if moved, err := progs.ReadChangedTCP(changed); err != nil || len(moved) != 1 || moved[0] != id || len(changed) != 1 || changed[id] != idle0 {
		t.Fatalf("first ReadChangedTCP = %v, %v (entries %v); want cgroup %d moved, its %+v only", moved, err, changed, id, idle0)
	}
	if moved, err := progs.ReadChangedTCP(changed); err != nil || len(moved) != 0 {
		t.Fatalf("ReadChangedTCP with no traffic = %v, %v; want nothing moved", moved, err)
	}
	// A full read that finds the same counters moves nothing either.
	netqos.SetFullReadInterval(progs, 0)
	if moved, err := progs.ReadChangedTCP(changed); err != nil || len(moved) != 0 || changed[id] != idle0 {
		t.Fatalf("ReadChangedTCP after a full read with no traffic = %v, %v (entry %+v); want nothing moved", moved, err, changed[id])
	}
	netqos.SetFullReadInterval(progs, time.Hour)
	// At least 10 exchanges, a second at a time: a 6.12 guest beside
	// host CPU hogs completed none in its first second.
	var idleApp []time.Duration
	for deadline := time.Now().Add(overflowTimeout); len(idleApp) < 10 && time.Now().Before(deadline); {
		idleApp = append(idleApp, rr(t, pair, dir, 9100, time.Second)...)
	}
	exchanges := len(idleApp)
	idle1, _ := progs.TCPStats(id)
	idle := meanRTT(idle0, idle1)
	t.Logf("idle: %d RTT samples from %d exchanges, mean %v (the application measured %v)", idle1.RTTCount-idle0.RTTCount, exchanges, idle, mean(idleApp))
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
	// The receiver's window must not be what holds the sender back: with
	// an autotuned buffer it grows only as fast as the sink's goroutine
	// reads, and a 6.12 guest beside another guest's tests moved a bulk
	// transfer for a minute at half the queue (mean RTT 18 ms of 39) with
	// no loss. A fixed 1 MiB buffer advertises a window far beyond the
	// queue however slowly the sink reads.
	setReceiveBuffer(t, ln, 1<<20)
	sink := nettest.ServeSink(ln)
	bulk, err := nettest.StartHelper(dir, pair.NodeNetns, nil, "send", fmt.Sprintf("%s:9101", pair.PeerIP), "cubic", "10m")
	if err != nil {
		t.Fatal(err)
	}
	defer bulk.Kill()
	if err := bulk.Go(); err != nil {
		t.Fatal(err)
	}
	// Measure once the queue is full, not after a guessed ramp: the first
	// retransmission says the far end's queue overflowed. From then on the
	// sender keeps it at least half full (cubic halves its window on a
	// loss, and the path holds nothing but the queue) from its socket
	// buffer, in softirq, however little CPU the machine leaves its process.
	full, err := waitTCPStats(progs, id, overflowTimeout, func(st netqos.TCPStats) bool { return st.Retransmits > 0 })
	if err != nil {
		t.Fatalf("the bulk transfer into a %v queue at %d Mbit/s never overflowed it: %v (the sink received %d bytes)", queueDelay, mbps, err, sink.Bytes())
	}
	busy0, _ := progs.TCPStats(id)
	busyApp := rr(t, pair, dir, 9102, time.Second)
	busy1, _ := progs.TCPStats(id)
	// It sends until killed: however long a slow machine takes to start
	// the exchanges, they run beside it.
	bulk.Kill()
	busy := meanRTT(busy0, busy1)
	t.Logf("beside a bulk transfer into a %v queue (full at %d retransmissions): %d RTT samples, mean %v (the application measured %v over %d exchanges); %d retransmissions in all",
		queueDelay, full.Retransmits, busy1.RTTCount-busy0.RTTCount, busy, mean(busyApp), len(busyApp), busy1.Retransmits)
	t.Run("RTT grows with the queue", func(t *testing.T) {
		// The queue was full when the samples began (a retransmission said
		// so) and the sender kept it so: every sample of the cgroup, the
		// bulk transfer's and the exchanges', waited in it. The queue adds
		// delay in absolute terms: at least a quarter of it (a ratio to the
		// idle RTT does not hold where the idle RTT is itself
		// milliseconds, as in an emulated guest). The application's own
		// figure is no bound: it counts the wait for its schedule too.
		if busy1.RTTCount == busy0.RTTCount {
			t.Fatalf("no RTT sample beside a bulk transfer into a full %v queue", queueDelay)
		}
		if busy-idle < queueDelay/4 {
			t.Errorf("mean RTT %v beside a bulk transfer into a full %v queue, %v idle: want at least %v more (the application's own round trips went %v -> %v)",
				busy, queueDelay, idle, queueDelay/4, mean(idleApp), mean(busyApp))
		}
	})
	if busy1.Retransmits == 0 {
		t.Error("no retransmission counted while the far end's queue overflowed")
	}
	// The marks: a read after the traffic finds it (not the idle counters
	// it read first), without a full read.
	counts := progs.ReadCounts()
	if err := progs.ReadAllTCP(all); err != nil || all[id].RTTCount < busy1.RTTCount || all[id].Retransmits < busy1.Retransmits {
		t.Errorf("ReadAllTCP after the traffic = %+v, %v; want at least %d RTT samples and %d retransmissions (the changed marks missed them)",
			all[id], err, busy1.RTTCount, busy1.Retransmits)
	}
	if after := progs.ReadCounts(); after.Full != counts.Full || after.LookedUp != counts.LookedUp+1 {
		t.Errorf("read counts %+v -> %+v: want one lookup, no full read", counts, after)
	}
	// (At least ReadAllTCP's figures: a closing connection may still add.)
	if moved, err := progs.ReadChangedTCP(changed); err != nil || len(moved) != 1 || changed[id].RTTCount < all[id].RTTCount || changed[id].Retransmits < all[id].Retransmits {
		t.Errorf("ReadChangedTCP after the traffic = %v, %v, entry %+v; want cgroup %d moved, at least ReadAllTCP's %+v", moved, err, changed[id], id, all[id])
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

// TestReadAllTCPMissingEntry: a watched cgroup whose tcp_stats entry is
// gone is reported by ReadAllTCP's full pass (an error naming it), not
// served from the counters read before; the other watched cgroup's
// counters are read again once it is unwatched.
func TestReadAllTCPMissingEntry(t *testing.T) {
	privileged.Require(t)
	root, err := nettest.NewCgroupRoot("slackline-netqosmiss", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nettest.RemoveCgroups(root) })
	progs, err := netqos.Load(netqos.Config{CgroupRoot: root, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { progs.Close() })
	ids := make([]uint64, 2)
	for i, dir := range []string{"a", "b"} {
		if ids[i], err = bpf.CgroupID(filepath.Join(root, dir)); err != nil {
			t.Fatal(err)
		}
		if err := progs.Watch(ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	netqos.SetFullReadInterval(progs, 0) // every pass reads every watched cgroup
	all := map[uint64]netqos.TCPStats{}
	if err := progs.ReadAllTCP(all); err != nil {
		t.Fatalf("first read: %v", err)
	}
	if len(all) != 2 {
		t.Fatalf("first read: %d cgroups, want 2", len(all))
	}
	if err := netqos.DeleteTCPCounters(progs, ids[0]); err != nil {
		t.Fatal(err)
	}
	err = progs.ReadAllTCP(all)
	if !errors.Is(err, ebpf.ErrKeyNotExist) || !strings.Contains(err.Error(), fmt.Sprint(ids[0])) {
		t.Fatalf("read with cgroup %d's entry gone: err %v, want ErrKeyNotExist naming it (%d cgroups returned)", ids[0], err, len(all))
	}
	if len(all) != 0 {
		t.Errorf("read with an error returned %d cgroups, want none", len(all))
	}
	if err := progs.Unwatch(ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := progs.ReadAllTCP(all); err != nil {
		t.Fatalf("read after unwatching cgroup %d: %v", ids[0], err)
	}
	if _, ok := all[ids[1]]; len(all) != 1 || !ok {
		t.Errorf("read after unwatching: %v, want cgroup %d only", all, ids[1])
	}
}

// setReceiveBuffer sets the receive buffer of the connections ln accepts
// (they inherit the listening socket's) to bytes, which turns the
// kernel's autotuning off for them.
func setReceiveBuffer(t *testing.T, ln net.Listener, bytes int) {
	t.Helper()
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, bytes)
	}); err != nil || serr != nil {
		t.Fatalf("SO_RCVBUF: %v", errors.Join(err, serr))
	}
}
