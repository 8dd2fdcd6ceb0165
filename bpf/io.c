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
	mark_changed(cgroup);
	return 0;
}

// Block I/O: per-cgroup latency of block requests, from the request's
// start to its completion. block_io_start (Linux 6.5+) fires in
// blk_account_io_start, in the submitting task's context, so the request
// is attributed to the submitter's v2 cgroup, on hybrid hosts too, where
// the blkio cgroup is a v1 one. It fires after the bio has passed
// blk-throttle and after the request got its tag, so the time covers the
// wait in the I/O scheduler and the device's, NOT the wait in the throttle
// queue or for a request tag; a guaranteed task's requests queued in the
// scheduler behind revocable writes show it. Requests the task did not
// submit (buffered writeback by the flusher, the journal's commit by jbd2)
// are not its own. The agent loads these programs apart from the
// synchronous-write ones, so a kernel without block_io_start loses only
// this signal.

// blk_counters is one CPU's share of a cgroup's block-request counters.
struct blk_counters {
	__u64 count;  // completed requests
	__u64 ns;     // their total latency
	__u64 bytes;  // their bytes
	__u64 hist[RUNQ_BUCKETS]; // their latencies, buckets as runq_hist
};

// blk_stats: v2 cgroup id -> per-CPU block counters, created by the
// completion of a tracked cgroup's first request (an LRU map: an untracked
// cgroup's entry ages out; its size bounds it as the tracked map is).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct blk_counters);
} blk_stats SEC(".maps");

// blk_req is a tracked cgroup's request in flight.
struct blk_req {
	__u64 cgroup;
	__u64 start;
};

#define MAX_BLK_REQUESTS 16384

// blk_inflight: request address -> its cgroup and start. LRU: a request
// whose completion was never seen (a driver error path) ages out instead
// of filling the map.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_BLK_REQUESTS);
	__type(key, __u64);
	__type(value, struct blk_req);
} blk_inflight SEC(".maps");

SEC("tp_btf/block_io_start")
int BPF_PROG(blk_start, struct request *rq)
{
	__u64 cgroup = bpf_get_current_cgroup_id();
	if (!bpf_map_lookup_elem(&tracked, &cgroup))
		return 0;
	struct blk_req r = {.cgroup = cgroup, .start = bpf_ktime_get_ns()};
	__u64 key = (__u64)rq;
	bpf_map_update_elem(&blk_inflight, &key, &r, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(blk_done, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct blk_req *r = bpf_map_lookup_elem(&blk_inflight, &key);
	if (!r)
		return 0;
	__u64 cgroup = r->cgroup;
	__u64 wait = bpf_ktime_get_ns() - r->start;
	bpf_map_delete_elem(&blk_inflight, &key);
	struct blk_counters *c = bpf_map_lookup_elem(&blk_stats, &cgroup);
	if (!c) {
		struct blk_counters zero = {};
		bpf_map_update_elem(&blk_stats, &cgroup, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&blk_stats, &cgroup);
		if (!c)
			return 0;
	}
	__sync_fetch_and_add(&c->count, 1);
	__sync_fetch_and_add(&c->ns, wait);
	__sync_fetch_and_add(&c->bytes, nr_bytes);
	__sync_fetch_and_add(&c->hist[sync_bucket(wait) & (RUNQ_BUCKETS - 1)], 1);
	mark_changed(cgroup);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
