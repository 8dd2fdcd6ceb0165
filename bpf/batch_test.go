package bpf_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/internal/privileged"
)

// TestEventBatches: with a batch window, a burst of threshold events (a
// guaranteed task sharing one CPU with revocable hogs, every wait of 2^20 ns
// or more an event) is delivered complete, each wait the histogram counted
// at or above the threshold once (delivered or counted lost), and in
// order.
func TestEventBatches(t *testing.T) {
	privileged.Require(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: one for the test, one shared by victim and hogs")
	}
	forEachVariant(t, testEventBatches)
}

func testEventBatches(t *testing.T, variant int) {
	root := testRoot(t)
	// A window long against the waits, so that batches hold many events.
	m := loadVariant(t, variant, bpf.Config{EventBatchWindow: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- m.Run(ctx) }()
	var mu sync.Mutex
	var events []bpf.ThresholdEvent
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for ev := range m.Events() {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	}()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
		<-collected
	}()

	cpu := runtime.NumCPU() - 1
	hog := newCgroup(t, root, "hog")
	victim := newCgroup(t, root, "victim")
	if err := m.Track(hog.id, bpf.ClassRevocable); err != nil {
		t.Fatal(err)
	}
	if err := m.Track(victim.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	// The histogram's buckets start at powers of two: with the threshold
	// on one, the waits at or above it are the buckets from there up.
	const thresholdBucket = 20
	threshold := time.Duration(1) << thresholdBucket
	if err := m.SetLatencyThreshold(threshold); err != nil {
		t.Fatal(err)
	}
	// The victim starts before the hogs burn (see startHogs).
	p := startHelper(t, victim, cpu, "victim", "1s")
	hogs := startHogs(t, cpu, hog, hog, hog)
	p.start(t)
	p.wait(t)
	for _, h := range hogs {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	}
	// The victim has exited: its waits are all counted and their events
	// all in the ring buffer or already read.
	st := stats(t, m, victim.id)
	var want uint64
	for _, n := range st.RunqLatency[thresholdBucket:] {
		want += n
	}
	if want < 10 {
		t.Fatalf("only %d waits of %v or more: no burst to batch (histogram %v)", want, threshold, st.RunqLatency)
	}
	// Wait for the last batch (a window after its first event), then for
	// the collector: a bounded wait for a count, not a timed assertion.
	var got []bpf.ThresholdEvent
	for deadline := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		got = nil
		for _, ev := range events {
			if ev.Cgroup == victim.id {
				got = append(got, ev)
			}
		}
		mu.Unlock()
		if uint64(len(got))+m.EventsLost() >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	lost := m.EventsLost()
	t.Logf("%d waits of %v or more; %d events delivered, %d lost", want, threshold, len(got), lost)
	if uint64(len(got))+lost != want {
		t.Errorf("%d events delivered and %d lost, want %d in all (the waits the histogram counted at or above %v)", len(got), lost, want, threshold)
	}
	last := map[uint32]int{} // CPU -> index of its last event
	for i, ev := range got {
		if ev.Latency < threshold || ev.Class != bpf.ClassGuaranteed {
			t.Errorf("event %d: %+v, want a guaranteed task's wait of %v or more", i, ev, threshold)
		}
		// One CPU's events: the ring buffer keeps their order, which their
		// times (taken in it, on that CPU) show. (The victim's first waits
		// may be on another CPU, before taskset pinned it.)
		if j, ok := last[ev.CPU]; ok && ev.Time.Before(got[j].Time) {
			t.Errorf("event %d at %v before event %d at %v on CPU %d: out of order", i, ev.Time, j, got[j].Time, ev.CPU)
		}
		last[ev.CPU] = i
	}
}
