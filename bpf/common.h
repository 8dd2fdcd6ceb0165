// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Shared by every Slackline eBPF program: the classes, the per-cgroup
// statistics layout and the two maps user space fills (see bpf/doc.go).
#pragma once

#include "headers/vmlinux.h"
#include "headers/bpf_helpers.h"
#include "headers/bpf_tracing.h"
#include "changed.h"

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

// changed: package bpf's changed marks (changed.h), set by every program
// that adds to a cgroup's counters in cgroup_stats or blk_stats.
CHANGED_MAP(changed);

// mark_changed sets the cgroup's flag in `changed`, after its counters
// were written.
static __always_inline void mark_changed(__u64 cgroup)
{
	changed_mark(&changed, cgroup);
}

// task_cgroup_id returns the id of p's cgroup in the default (v2) hierarchy,
// the same number as bpf_get_current_cgroup_id() for the current task and
// as the inode of the cgroup's directory in cgroupfs.
static __always_inline __u64 task_cgroup_id(struct task_struct *p)
{
	return p->cgroups->dfl_cgrp->kn->id;
}
