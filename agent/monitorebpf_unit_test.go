package agent

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
)

// fakeCounters serves the same counters one cgroup at a time (Stats,
// TCPStats) and all at once (ReadAll, ReadAllTCP), counting the calls.
type fakeCounters struct {
	stats                map[uint64]bpf.CgroupStats
	tcp                  map[uint64]netqos.TCPStats
	readAllErr           error
	lookups, batchReads  int
	tcpLookups, tcpBatch int
}

func (f *fakeCounters) Stats(id uint64) (bpf.CgroupStats, error) {
	f.lookups++
	s, ok := f.stats[id]
	if !ok {
		return s, bpf.ErrNotTracked
	}
	return s, nil
}

func (f *fakeCounters) ReadAll(into map[uint64]bpf.CgroupStats) error {
	f.batchReads++
	clear(into)
	if f.readAllErr != nil {
		return f.readAllErr
	}
	maps.Copy(into, f.stats)
	return nil
}

func (f *fakeCounters) TCPStats(id uint64) (netqos.TCPStats, error) {
	f.tcpLookups++
	s, ok := f.tcp[id]
	if !ok {
		return s, bpf.ErrNotTracked
	}
	return s, nil
}

func (f *fakeCounters) ReadAllTCP(into map[uint64]netqos.TCPStats) error {
	f.tcpBatch++
	clear(into)
	maps.Copy(into, f.tcp)
	return nil
}

// perCgroup hides a fakeCounters' batch reads.
type perCgroup struct{ f *fakeCounters }

func (p perCgroup) Stats(id uint64) (bpf.CgroupStats, error)    { return p.f.Stats(id) }
func (p perCgroup) TCPStats(id uint64) (netqos.TCPStats, error) { return p.f.TCPStats(id) }
func (perCgroup) Watch(uint64) error                            { return nil }
func (perCgroup) Unwatch(uint64) error                          { return nil }

func (*fakeCounters) Watch(uint64) error   { return nil }
func (*fakeCounters) Unwatch(uint64) error { return nil }

// TestMonitorEBPFBatched: the monitor's adapter answers the same figures
// from one batch read per pass as from a lookup per cgroup, looks nothing
// up one by one when the batch read works, and falls back to lookups when
// it fails.
func TestMonitorEBPFBatched(t *testing.T) {
	t.Parallel()
	var hist [bpf.RunqBuckets]uint64
	hist[3] = 7
	counters := func() *fakeCounters {
		return &fakeCounters{
			stats: map[uint64]bpf.CgroupStats{
				1: {OnCPU: time.Second, Wakeups: 3, RunqLatency: hist, RunqTotal: time.Millisecond, Running: true, Sched: true, NetTxBytes: 9, OOMKills: 1},
				2: {OnCPU: 2 * time.Second, SyncCount: 4, SyncLatency: hist},
			},
			tcp: map[uint64]netqos.TCPStats{1: {RTTCount: 5, Retransmits: 2}},
		}
	}
	read := func(e monitor.EBPF, ids ...uint64) (map[uint64]monitor.EBPFStats, map[uint64]error) {
		if p, ok := e.(monitor.EBPFPass); ok {
			if err := p.BeginPass(); err != nil {
				t.Fatal(err)
			}
		}
		got, errs := map[uint64]monitor.EBPFStats{}, map[uint64]error{}
		for _, id := range ids {
			got[id], errs[id] = e.Stats(id)
		}
		return got, errs
	}

	one := counters()
	want, wantErrs := read(&monitorEBPF{e: perCgroupEBPF{one}, tcp: perCgroup{one}}, 1, 2, 3)
	if one.batchReads != 0 || one.lookups != 3 {
		t.Fatalf("per-cgroup adapter: %d batch reads, %d lookups", one.batchReads, one.lookups)
	}
	if !errors.Is(wantErrs[3], bpf.ErrNotTracked) || wantErrs[1] != nil || want[1].TCPRTTCount != 5 || !want[1].Running ||
		!want[1].Sched || want[2].Sched {
		t.Fatalf("per-cgroup adapter: %+v, %v", want, wantErrs)
	}

	all := counters()
	got, errs := read(&monitorEBPF{e: batchEBPF{perCgroupEBPF{all}}, tcp: all}, 1, 2, 3)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("batched figures (-per cgroup +batched):\n%s", diff)
	}
	if !errors.Is(errs[3], bpf.ErrNotTracked) || errs[1] != nil || errs[2] != nil {
		t.Errorf("batched errors: %v", errs)
	}
	if all.batchReads != 1 || all.lookups != 0 || all.tcpBatch != 1 || all.tcpLookups != 0 {
		t.Errorf("batched adapter: %d batch reads, %d lookups, %d TCP batch reads, %d TCP lookups; want 1, 0, 1, 0",
			all.batchReads, all.lookups, all.tcpBatch, all.tcpLookups)
	}

	failing := counters()
	failing.readAllErr = errors.New("batch lookup failed")
	got, _ = read(&monitorEBPF{e: batchEBPF{perCgroupEBPF{failing}}}, 1, 2)
	if failing.batchReads != 1 || failing.lookups != 2 || got[2].OnCPU != 2*time.Second {
		t.Errorf("after a failed batch read: %d batch reads, %d lookups, %+v", failing.batchReads, failing.lookups, got)
	}
}

// perCgroupEBPF and batchEBPF are EBPF over a fakeCounters, without and
// with ReadAll.
type perCgroupEBPF struct{ f *fakeCounters }

func (p perCgroupEBPF) Stats(id uint64) (bpf.CgroupStats, error)         { return p.f.Stats(id) }
func (perCgroupEBPF) Track(uint64, bpf.Class) error                      { return nil }
func (perCgroupEBPF) Untrack(uint64) error                               { return nil }
func (perCgroupEBPF) DelayedBy(uint64) (map[uint64]time.Duration, error) { return nil, nil }
func (perCgroupEBPF) Events() <-chan bpf.ThresholdEvent                  { return nil }
func (perCgroupEBPF) Run(context.Context) error                          { return nil }

type batchEBPF struct{ perCgroupEBPF }

func (b batchEBPF) ReadAll(into map[uint64]bpf.CgroupStats) error { return b.f.ReadAll(into) }

// changedCounters is a fakeCounters whose batch reads say what moved, as
// bpf.Monitor.ReadChanged and netqos.Programs.ReadChangedTCP do: an entry
// that differs from into's is stored and named.
type changedCounters struct{ *fakeCounters }

func (c changedCounters) ReadChanged(into map[uint64]bpf.CgroupStats) ([]uint64, error) {
	c.batchReads++
	if c.readAllErr != nil {
		clear(into)
		return nil, c.readAllErr
	}
	var moved []uint64
	for id, s := range c.stats {
		if old, ok := into[id]; !ok || old != s {
			into[id] = s
			moved = append(moved, id)
		}
	}
	return moved, nil
}

func (c changedCounters) ReadChangedTCP(into map[uint64]netqos.TCPStats) ([]uint64, error) {
	c.tcpBatch++
	var moved []uint64
	for id, s := range c.tcp {
		if old, ok := into[id]; !ok || old != s {
			into[id] = s
			moved = append(moved, id)
		}
	}
	return moved, nil
}

// changedEBPF is an EBPF over a changedCounters.
type changedEBPF struct {
	perCgroupEBPF
	c changedCounters
}

func (e changedEBPF) ReadChanged(into map[uint64]bpf.CgroupStats) ([]uint64, error) {
	return e.c.ReadChanged(into)
}

// TestMonitorEBPFUnchanged (#29): the adapter says a cgroup is unchanged
// only from its second changed read on, when neither its counters nor its
// TCP signals moved, and never after a failed read or for a cgroup it
// does not have.
func TestMonitorEBPFUnchanged(t *testing.T) {
	t.Parallel()
	f := &fakeCounters{
		stats: map[uint64]bpf.CgroupStats{1: {OnCPU: time.Second}, 2: {OnCPU: time.Second}, 3: {OnCPU: time.Second}},
		tcp:   map[uint64]netqos.TCPStats{2: {RTTCount: 1}},
	}
	c := changedCounters{f}
	a := &monitorEBPF{e: changedEBPF{perCgroupEBPF{f}, c}, tcp: c}
	pass := func(want map[uint64]bool) {
		t.Helper()
		if err := a.BeginPass(); err != nil {
			t.Fatal(err)
		}
		for id, w := range want {
			if got := a.Unchanged(id); got != w {
				t.Errorf("pass %d, cgroup %d: Unchanged %v, want %v", f.batchReads, id, got, w)
			}
		}
	}
	pass(map[uint64]bool{1: false, 2: false, 3: false, 4: false}) // the first read: nothing known
	pass(map[uint64]bool{1: true, 2: true, 3: true, 4: false})
	f.stats[1] = bpf.CgroupStats{OnCPU: 2 * time.Second}
	f.tcp[2] = netqos.TCPStats{RTTCount: 2}
	pass(map[uint64]bool{1: false, 2: false, 3: true})
	pass(map[uint64]bool{1: true, 2: true, 3: true})
	f.readAllErr = errors.New("batch lookup failed")
	pass(map[uint64]bool{1: false, 2: false, 3: false})
	f.readAllErr = nil
	pass(map[uint64]bool{1: false, 2: false, 3: false}) // read afresh: nothing known
	pass(map[uint64]bool{1: true, 2: true, 3: true})
}
