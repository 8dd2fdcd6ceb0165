package monitor

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// EBPF is the monitor's view of the eBPF programs: cumulative figures per
// cgroup. The agent adapts the bpf package to it; a nil EBPF in Config
// means the monitor runs on cgroupfs, PSI and procfs alone.
//
// Stats is called once per container per pass, from the sampling goroutine
// only. It returns an error for a cgroup it does not account (yet); the
// monitor then leaves the container's eBPF fields unset for that pass and
// reports the error from Sample. The monitor copies what it keeps: the
// returned RunqBuckets may be reused by the implementation afterwards.
type EBPF interface {
	Stats(cgroupID uint64) (EBPFStats, error)
}

// EBPFPass is an EBPF that reads every cgroup's figures at once (the bpf
// package's batch lookups: a few system calls per pass instead of one or
// two per container). When Config.EBPF implements it, every pass calls
// BeginPass once before it samples the containers; Stats then answers from
// what BeginPass read until the next call. A BeginPass error is joined
// into Sample's; Stats reports per cgroup what it could not answer.
type EBPFPass interface {
	EBPF
	BeginPass() error
}

// EBPFChanges is an EBPFPass that knows which cgroups' figures did not
// move between two passes (the bpf package's changed marks, #29). When
// Config.EBPF implements it, a container whose previous sample was quiet
// (see Usage.quiet), whose figures eBPF says are unchanged and none of
// whose samplers is due to read a file is not sampled: its previous
// sample is repeated, which is what sampling it would have produced.
type EBPFChanges interface {
	EBPFPass
	// Unchanged reports, after this pass's BeginPass, that Stats would
	// return for the cgroup exactly what it returned in the previous pass
	// (false when unknown).
	Unchanged(cgroupID uint64) bool
}

// EBPFFunc adapts a function to EBPF.
type EBPFFunc func(cgroupID uint64) (EBPFStats, error)

// Stats calls f.
func (f EBPFFunc) Stats(cgroupID uint64) (EBPFStats, error) { return f(cgroupID) }

// EBPFStats are one cgroup's cumulative eBPF figures since it was first
// accounted.
type EBPFStats struct {
	// OnCPU is the time the cgroup's tasks ran (sched_switch).
	OnCPU time.Duration
	// Wakeups counts wakeups whose run-queue latency was measured.
	Wakeups uint64
	// RunqBuckets is the run-queue (wakeup-to-run) latency histogram:
	// RunqBuckets[i] counts latencies in [2^i, 2^(i+1)) nanoseconds since
	// the cgroup was first accounted (each bucket is a counter; buckets
	// are not cumulative over i).
	RunqBuckets []uint64
	// RunqSum is the sum of the measured latencies, if the programs keep
	// it; 0 means unknown and the exported histogram's sum is estimated
	// from the bucket midpoints.
	RunqSum time.Duration
	// DelayedByRevocable is the time the cgroup's tasks were runnable while
	// a revocable task held their CPU.
	DelayedByRevocable time.Duration
	// Network traffic of the cgroup's sockets (cgroup_skb ingress/egress).
	NetRxBytes, NetRxPackets, NetTxBytes, NetTxPackets uint64
	// ReclaimStall is time spent in direct reclaim (vmscan tracepoints).
	ReclaimStall time.Duration
	// OOMKills counts OOM kills in the cgroup.
	OOMKills uint64
	// Running reports that a task of the cgroup held a CPU when the
	// figures were read (OnCPU counts a run when it ends). A cgroup that
	// is not Running and whose OnCPU, Wakeups and RunqSum have not moved
	// since an earlier read has not run meanwhile: the monitor then
	// repeats its CPU files instead of reading them (see activity), if
	// Sched says these figures are measured.
	Running bool
	// Sched reports that the scheduler figures (OnCPU, Wakeups, RunqSum,
	// Running) are measured: the scheduler programs are loaded and
	// sched_switch attached. Without it they are constant zeros, which
	// say nothing of whether the cgroup ran: its CPU files are read at
	// every pass.
	Sched bool
	// TCPRTTBuckets is the histogram of the round trips of the cgroup's
	// TCP connections: TCPRTTBuckets[i] counts round trips in
	// [2^i, 2^(i+1)) µs (nil: not measured). TCPRTTCount is their number.
	TCPRTTBuckets []uint64
	TCPRTTCount   uint64
	// TCPRetransmits counts the cgroup's retransmitted TCP segments.
	TCPRetransmits uint64
	// SyncBuckets is the histogram of the cgroup's synchronous-write waits
	// (fsync, fdatasync, O_SYNC writes on ext4: ext4_sync_file), buckets as
	// RunqBuckets' (nil: not measured); SyncCount is their number.
	SyncBuckets []uint64
	SyncCount   uint64
	SyncWait    time.Duration
	// BlockBuckets is the histogram of the latencies of the block requests
	// the cgroup's tasks submitted (start to completion), buckets as
	// RunqBuckets' (nil: not measured); BlockCount is their number.
	BlockBuckets []uint64
	BlockCount   uint64
}

// ebpfSampler merges a container's eBPF figures (Config.EBPF) into its
// sample: on-CPU time, run queue latency and its percentiles over the
// interval, time delayed by revocable tasks, reclaim stalls, OOM kills,
// network traffic and TCP figures. It runs after the memory sampler: its
// OOM kills raise the cgroup's count, never lower it.
type ebpfSampler struct {
	src     EBPF
	unified string // the v2 directory, whose inode is the cgroup id

	cgroupID  uint64   // found from the inode when Target.CgroupID is 0
	runq      []uint64 // previous run-queue buckets
	runqValid bool     // runq is from the previous sample
	sync      []uint64 // previous synchronous-write buckets
	syncCount uint64
	syncValid bool // sync is from the previous sample
	block     blockBaseline
	net       netBaseline
	// activity is what the last successful sample's figures said of the
	// container's scheduling (the activity a repeat of them says).
	activity activity
}

// netBaseline is what the previous eBPF sample of a container left for the
// network figures over the interval.
type netBaseline struct {
	valid                           bool
	time                            time.Time
	txBytes, rxBytes, txPackets, rt uint64
	rtt                             []uint64
}

func newEBPFSampler(h *host, rel string) sampler {
	return &ebpfSampler{src: h.ebpf, unified: h.layout.PathsOf(rel).Unified}
}

func (e *ebpfSampler) files() []*controlFile { return nil }

// fetch reads the container's eBPF figures into s.ebpf and its activity
// into s.activity, before the other samplers run: the CPU sampler skips
// the files of a container that has not run (see cpuReadDue).
func (e *ebpfSampler) fetch(s *scratch, t *Target) {
	s.ebpf, s.ebpfErr, s.activity, s.fetched = EBPFStats{}, nil, activity{}, true
	id := t.CgroupID
	if id == 0 {
		if e.cgroupID == 0 {
			fi, err := os.Stat(e.unified)
			if err != nil {
				s.ebpfErr = fmt.Errorf("cgroup id of %s: %w", e.unified, err)
				return
			}
			if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
				e.cgroupID = sys.Ino
			}
		}
		id = e.cgroupID
	}
	stats, err := e.src.Stats(id)
	if err != nil {
		s.ebpfErr = fmt.Errorf("ebpf stats of cgroup %d: %w", id, err)
		return
	}
	s.ebpf = stats
	s.activity = activity{known: stats.Sched, running: stats.Running, onCPU: stats.OnCPU, wakeups: stats.Wakeups, runqSum: stats.RunqSum}
}

// sample merges what fetch read (fetching first when the pass did not).
// It sets nothing in u when the lookup failed, and forgets the baselines:
// the next success has no interval figures.
func (e *ebpfSampler) sample(s *scratch, t *Target, u *Usage) error {
	if !s.fetched {
		e.fetch(s, t)
	}
	s.fetched = false
	if s.ebpfErr != nil {
		e.runqValid, e.net.valid, e.syncValid, e.block.valid = false, false, false, false
		return s.ebpfErr
	}
	stats := &s.ebpf
	st := u.Stats
	u.EBPF = true
	e.activity = s.activity
	st.OncpuSecs = stats.OnCPU.Seconds()
	st.DelayedByRevocableSecs = stats.DelayedByRevocable.Seconds()
	st.NetRxBytes, st.NetRxPackets = stats.NetRxBytes, stats.NetRxPackets
	st.NetTxBytes, st.NetTxPackets = stats.NetTxBytes, stats.NetTxPackets
	st.MemReclaimStallSecs = stats.ReclaimStall.Seconds()
	st.OomEvents = max(st.OomEvents, stats.OOMKills)

	buckets := trimZeros(stats.RunqBuckets)
	rq := s.slabs.newRunq()
	rq.BucketsLog2Ns, rq.Wakeups, rq.TotalSecs = s.slabs.clone(buckets), stats.Wakeups, stats.RunqSum.Seconds()
	st.Runqueue = rq
	if e.runqValid {
		s.deltas = bucketDeltas(s.deltas[:0], e.runq, buckets)
		u.RunqP50 = bucketQuantile(s.deltas, 0.50)
		u.RunqP99 = bucketQuantile(s.deltas, 0.99)
		rq.P50Seconds, rq.P99Seconds = u.RunqP50.Seconds(), u.RunqP99.Seconds()
	}
	e.runq, e.runqValid = append(e.runq[:0], buckets...), true
	u.runqSum = stats.RunqSum
	e.sampleSync(s, u, stats)
	e.sampleBlock(s, u, stats)
	e.sampleNet(s, u, stats)
	return nil
}

// repeats implements repeater: every interval figure has a baseline (the
// previous sample succeeded), so unchanged figures give zero intervals.
func (e *ebpfSampler) repeats(time.Time, *Usage, activity) bool {
	return e.runqValid && e.syncValid && e.block.valid && e.net.valid
}

// repeatsUntil implements repeater: what repeats asks does not change
// without a sample.
func (e *ebpfSampler) repeatsUntil(time.Time, *Usage, activity) time.Time { return time.Time{} }

// repeated moves the interval baselines to now, as a sample of unchanged
// figures would.
func (e *ebpfSampler) repeated(now time.Time) { e.net.time = now }

// sampleSync computes the synchronous-write figures over the interval
// since the previous eBPF sample: their number and p99. A count that went
// backwards (the cgroup's entry was recreated) restarts the interval.
func (e *ebpfSampler) sampleSync(s *scratch, u *Usage, stats *EBPFStats) {
	buckets := trimZeros(stats.SyncBuckets)
	if buckets == nil && stats.SyncCount == 0 {
		e.sync, e.syncCount, e.syncValid = e.sync[:0], 0, true
		return // no synchronous write yet (or not measured)
	}
	ds := &slacklinev1.DiskSyncLatency{BucketsLog2Ns: slices.Clone(buckets), Count: stats.SyncCount, TotalSecs: stats.SyncWait.Seconds()}
	u.Stats.DiskSync = ds
	if e.syncValid && stats.SyncCount >= e.syncCount {
		u.Syncs = stats.SyncCount - e.syncCount
		if u.Syncs > 0 {
			s.deltas = bucketDeltas(s.deltas[:0], e.sync, buckets)
			u.SyncP99 = bucketQuantile(s.deltas, 0.99)
			ds.P99Seconds = u.SyncP99.Seconds()
		}
	}
	e.sync, e.syncCount, e.syncValid = append(e.sync[:0], buckets...), stats.SyncCount, true
}

// sampleNet computes the network figures over the interval since the
// previous eBPF sample: rates, packets, and TCP round-trip percentiles
// and retransmissions. Counters that went backwards (the cgroup's entries
// were recreated) restart the interval.
func (e *ebpfSampler) sampleNet(s *scratch, u *Usage, stats *EBPFStats) {
	st, now := u.Stats, u.Time
	rtt := trimZeros(stats.TCPRTTBuckets)
	if rtt != nil || stats.TCPRTTCount > 0 || stats.TCPRetransmits > 0 {
		st.Tcp = &slacklinev1.TcpStatistics{RttBucketsLog2Us: slices.Clone(rtt), RttSamples: stats.TCPRTTCount, Retransmits: stats.TCPRetransmits}
	}
	b := &e.net
	if b.valid && now.After(b.time) && stats.NetTxBytes >= b.txBytes && stats.NetRxBytes >= b.rxBytes &&
		stats.NetTxPackets >= b.txPackets && stats.TCPRetransmits >= b.rt {
		secs := now.Sub(b.time).Seconds()
		u.NetTxMbps = float64(stats.NetTxBytes-b.txBytes) * 8 / 1e6 / secs
		u.NetRxMbps = float64(stats.NetRxBytes-b.rxBytes) * 8 / 1e6 / secs
		u.NetTxPackets, u.TCPRetransmits = stats.NetTxPackets-b.txPackets, stats.TCPRetransmits-b.rt
		st.NetTxMbps, st.NetRxMbps = u.NetTxMbps, u.NetRxMbps
		if st.Tcp != nil {
			// bucketQuantile reads bucket i as [2^i, 2^(i+1)) ns; these are µs.
			s.deltas = bucketDeltas(s.deltas[:0], b.rtt, rtt)
			u.TCPRTTP50 = bucketQuantile(s.deltas, 0.50) * 1000
			u.TCPRTTP99 = bucketQuantile(s.deltas, 0.99) * 1000
			st.Tcp.RttP50Seconds, st.Tcp.RttP99Seconds = u.TCPRTTP50.Seconds(), u.TCPRTTP99.Seconds()
		}
	}
	*b = netBaseline{valid: true, time: now, txBytes: stats.NetTxBytes, rxBytes: stats.NetRxBytes, txPackets: stats.NetTxPackets,
		rt: stats.TCPRetransmits, rtt: append(b.rtt[:0], rtt...)}
}

// trimZeros returns b without its trailing zero buckets.
func trimZeros(b []uint64) []uint64 {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
