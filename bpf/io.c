//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Disk I/O: per-cgroup latency of synchronous writes on ext4, the time a
// task of the cgroup spent in ext4_sync_file (fsync, fdatasync, msync and the
// sync of O_SYNC/O_DSYNC writes): the data write-out and the journal commit
// it waits for. This is what a database's commit waits for, and it is
// attributed to the waiting task's v2 cgroup on hybrid hosts too, where the
// block layer charges I/O to v1 blkio cgroups (and the journal's writes to
// the journal thread, in no task's cgroup). Tracepoints, not fentry on
// vfs_fsync_range: kernels without ftrace (no trampolines) still have them.

#include "common.h"

// sync_start: when the task entered ext4_sync_file (0 when it is not in it).
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} sync_start SEC(".maps");

// sync_bucket is the histogram bucket of a latency: floor(log2(ns)), 0 for 0,
// the last bucket from 2^31 ns (as sched.c's runq_bucket).
static __always_inline __u32 sync_bucket(__u64 v)
{
	__u32 b = 0;
	if (v >= (1ULL << 31))
		return RUNQ_BUCKETS - 1;
	if (v >> 16) { v >>= 16; b += 16; }
	if (v >> 8) { v >>= 8; b += 8; }
	if (v >> 4) { v >>= 4; b += 4; }
	if (v >> 2) { v >>= 2; b += 2; }
	if (v >> 1) { b += 1; }
	return b;
}

SEC("tp_btf/ext4_sync_file_enter")
int BPF_PROG(fsync_begin, struct file *file, int datasync)
{
	__u64 cgroup = bpf_get_current_cgroup_id();
	if (!bpf_map_lookup_elem(&cgroup_stats, &cgroup))
		return 0;
	__u64 *begin = bpf_task_storage_get(&sync_start, bpf_get_current_task_btf(), 0,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (begin)
		*begin = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/ext4_sync_file_exit")
int BPF_PROG(fsync_end, struct inode *inode, int ret)
{
	__u64 *begin = bpf_task_storage_get(&sync_start, bpf_get_current_task_btf(), 0, 0);
	if (!begin || !*begin)
		return 0;
	__u64 wait = bpf_ktime_get_ns() - *begin;
	*begin = 0;
	__u64 cgroup = bpf_get_current_cgroup_id();
	struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cgroup);
	if (!s)
		return 0;
	// Per-CPU values: no other CPU writes this copy, but a nested program
	// on this CPU could; the adds are atomic like mem.c's.
	__sync_fetch_and_add(&s->sync_ns, wait);
	__sync_fetch_and_add(&s->sync_count, 1);
	__sync_fetch_and_add(&s->sync_hist[sync_bucket(wait) & (RUNQ_BUCKETS - 1)], 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
