package agent

import (
	"testing"
	"time"

	"github.com/slackline/slackline/bpf"
)

// TestQoSRunqTotalFromMonitor checks where the QoS loop takes a victim's
// run-queue total from (#29): the monitor's sample when it has eBPF
// figures, without reading the counters again; otherwise one batched read
// per evaluation for every such victim, or a lookup per victim when the
// programs cannot batch.
func TestQoSRunqTotalFromMonitor(t *testing.T) {
	t.Parallel()
	counters := func() *fakeCounters {
		return &fakeCounters{stats: map[uint64]bpf.CgroupStats{1: {RunqTotal: 5 * time.Millisecond}, 2: {RunqTotal: 7 * time.Millisecond}}}
	}

	f := counters()
	l := &qosLoop{ebpf: batchEBPF{perCgroupEBPF{f}}}
	sum := 3 * time.Millisecond
	if got, ok := l.runqTotal(1, &sum); !ok || got != sum {
		t.Errorf("with the monitor's figure: %v %v, want %v", got, ok, sum)
	}
	if f.batchReads != 0 || f.lookups != 0 {
		t.Errorf("with the monitor's figure: %d batch reads, %d lookups; want none", f.batchReads, f.lookups)
	}
	// Two victims without it in one evaluation: one batched read.
	for id, want := range map[uint64]time.Duration{1: 5 * time.Millisecond, 2: 7 * time.Millisecond} {
		if got, ok := l.runqTotal(id, nil); !ok || got != want {
			t.Errorf("cgroup %d from the counters: %v %v, want %v", id, got, ok, want)
		}
	}
	if _, ok := l.runqTotal(9, nil); ok {
		t.Error("an untracked cgroup has a run-queue total")
	}
	if f.batchReads != 1 || f.lookups != 0 {
		t.Errorf("%d batch reads, %d lookups in one evaluation; want 1, 0", f.batchReads, f.lookups)
	}
	// The next evaluation reads again.
	l.statsRead = false
	l.runqTotal(1, nil)
	if f.batchReads != 2 {
		t.Errorf("%d batch reads after two evaluations, want 2", f.batchReads)
	}

	// Programs without ReadAll: one lookup per victim.
	f = counters()
	l = &qosLoop{ebpf: perCgroupEBPF{f}}
	if got, ok := l.runqTotal(2, nil); !ok || got != 7*time.Millisecond || f.lookups != 1 {
		t.Errorf("per-cgroup lookup: %v %v after %d lookups", got, ok, f.lookups)
	}
}
