// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Shared by every Slackline eBPF program: the classes, the per-cgroup
// statistics layout and the two maps user space fills (see bpf/doc.go).
#pragma once

#include "headers/vmlinux.h"
#include "headers/bpf_helpers.h"
#include "headers/bpf_tracing.h"

// Classes user space stores in `tracked`; must match bpf.Class.
#define CLASS_GUARANTEED 1
#define CLASS_REVOCABLE 2
#define CLASS_PROTECTED 3

// Run-queue latency histogram (sched.c): bucket i counts waits in [2^i, 2^(i+1)) ns,
// bucket 0 also counts 0 ns, the last bucket everything from 2^31 ns (~2.1 s).
#define RUNQ_BUCKETS 32

// Sizes are defaults: user space sets max_entries before loading.
#define MAX_CGROUPS 4096

// sched_counters is one CPU's share of a tracked cgroup's scheduler counters
// (sched.c), in cgroup_stats or in that CPU's state (sched.c: resident).
struct sched_counters {
	__u64 oncpu_ns;       // time on a CPU
	__u64 sleeps;         // times a task went to sleep (each ends with a wakeup)
	__u64 runq_count;     // runnable-to-running samples (after a wakeup or a preemption)
	__u64 runq_sum_ns;    // their sum
	__u64 delayed_ns;     // runnable while a revocable task held the CPU
	__u64 runq_hist[RUNQ_BUCKETS];
};

// cgroup_counters is one CPU's share of a tracked cgroup's counters; user
// space sums the CPUs. Only the program that owns a field writes it.
struct cgroup_counters {
	struct sched_counters sched;
	__u64 rx_bytes;       // net: IP-layer bytes (skb->len at the cgroup hook)
	__u64 rx_packets;
	__u64 tx_bytes;
	__u64 tx_packets;
	__u64 reclaim_ns;     // mem: direct + memcg reclaim stall
	__u64 reclaim_count;
	__u64 oom_kills;      // mem: tasks of the cgroup chosen as OOM victims
	__u64 sync_ns;        // io: time in fsync/fdatasync/O_SYNC writes (vfs_fsync_range)
	__u64 sync_count;     // io: their number
	__u64 sync_hist[RUNQ_BUCKETS]; // io: their latencies, buckets as runq_hist
};

// tracked_cgroup is what user space stores for a tracked cgroup.
struct tracked_cgroup {
	__u32 class;
	__u32 epoch; // identifies this tracking of the cgroup (never 0; see sched.c)
};

// tracked: v2 cgroup id -> class. Filled by user space (Monitor.Track).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct tracked_cgroup);
} tracked SEC(".maps");

// cgroup_stats: v2 cgroup id -> per-CPU counters. User space creates the
// entry when it tracks a cgroup and deletes it when it stops, so programs
// only look up (never allocate) and untracked cgroups have no entry.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct cgroup_counters);
} cgroup_stats SEC(".maps");

// Changed marks (#29): every program that adds to a cgroup's counters in
// cgroup_stats or blk_stats then sets the cgroup's flag in `changed`, so
// that user space reads only the cgroups whose counters moved (an idle
// one costs no lookup) and clears each flag it reads. A flag is a byte
// (plain stores: no atomic OR, which the programs built for the base ISA
// do not have, and no lost update between CPUs); the flag is picked by a
// multiplicative hash of the cgroup id, so two cgroups may share one: a
// false "changed" costs one lookup, never a missed change. User space
// maps the array (BPF_F_MMAPABLE) and must hash alike (bpf.changedFlag).
#define CHANGED_FLAGS 4096 // a power of two
#define CHANGED_SHIFT 52   // 64 - log2(CHANGED_FLAGS)

struct changed_flags {
	__u8 flag[CHANGED_FLAGS];
};

// changed: one entry, the flags; user space reads and clears them
// through a memory mapping.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct changed_flags);
} changed SEC(".maps");

// mark_changed sets the cgroup's changed flag, after its counters were
// written. The load first keeps the hot paths from writing a cache line
// that is already marked.
static __always_inline void mark_changed(__u64 cgroup)
{
	__u32 zero = 0;
	struct changed_flags *f = bpf_map_lookup_elem(&changed, &zero);
	if (!f)
		return;
	__u32 i = (__u32)((cgroup * 0x9E3779B97F4A7C15ULL) >> CHANGED_SHIFT) & (CHANGED_FLAGS - 1);
	if (!f->flag[i])
		f->flag[i] = 1;
}

// task_cgroup_id returns the id of p's cgroup in the default (v2) hierarchy,
// the same number as bpf_get_current_cgroup_id() for the current task and
// as the inode of the cgroup's directory in cgroupfs.
static __always_inline __u64 task_cgroup_id(struct task_struct *p)
{
	return p->cgroups->dfl_cgrp->kn->id;
}
