//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Memory: per-cgroup reclaim stall time (the time a task of the cgroup spent
// in direct reclaim, global or because its memory cgroup hit its limit) and
// OOM kills (tasks of the cgroup the OOM killer chose as victims).

#include "common.h"

// reclaim_start: when the task entered reclaim (0 when it is not in it).
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} reclaim_start SEC(".maps");

static __always_inline int reclaim_begin(void)
{
	__u64 cgroup = bpf_get_current_cgroup_id();
	if (!bpf_map_lookup_elem(&cgroup_stats, &cgroup))
		return 0;
	__u64 *start = bpf_task_storage_get(&reclaim_start, bpf_get_current_task_btf(), 0,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (start)
		*start = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int reclaim_end(void)
{
	__u64 *start = bpf_task_storage_get(&reclaim_start, bpf_get_current_task_btf(), 0, 0);
	if (!start || !*start)
		return 0;
	__u64 stall = bpf_ktime_get_ns() - *start;
	*start = 0;
	__u64 cgroup = bpf_get_current_cgroup_id();
	struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cgroup);
	if (!s)
		return 0;
	__sync_fetch_and_add(&s->reclaim_ns, stall);
	__sync_fetch_and_add(&s->reclaim_count, 1);
	mark_changed(cgroup);
	return 0;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(direct_reclaim_begin, int order, gfp_t gfp_flags)
{
	return reclaim_begin();
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(direct_reclaim_end, unsigned long nr_reclaimed)
{
	return reclaim_end();
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(memcg_reclaim_begin, int order, gfp_t gfp_flags)
{
	return reclaim_begin();
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(memcg_reclaim_end, unsigned long nr_reclaimed)
{
	return reclaim_end();
}

// mark_victim's arguments are (task, uid) since Linux 6.8 and (pid) before;
// only the task form is supported (older kernels: this program fails to load
// and the monitor reports OOM kills as unavailable).
SEC("tp_btf/mark_victim")
int BPF_PROG(mark_victim, struct task_struct *task)
{
	__u64 cgroup = task_cgroup_id(task);
	struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cgroup);
	if (s) {
		__sync_fetch_and_add(&s->oom_kills, 1);
		mark_changed(cgroup);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
