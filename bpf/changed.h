// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Changed marks (#29), shared by package bpf's programs (common.h: the
// `changed` map) and package netqos's (netqos.c: `tcp_changed`): every
// program that adds to a cgroup's counters then sets the cgroup's flag in
// its package's changed map, so that user space reads only the cgroups
// whose counters moved (an idle one costs no lookup) and clears each flag
// it reads. A flag is a byte (plain stores: no atomic OR, which the
// programs built for the base ISA do not have, and no lost update between
// CPUs); the flag is picked by a multiplicative hash of the cgroup id, so
// two cgroups may share one: a false "changed" costs one lookup, never a
// missed change. User space maps the array (BPF_F_MMAPABLE) and must hash
// alike (bpf.changedFlag, bpf.ChangedMarks).
//
// Include it after vmlinux.h and bpf_helpers.h.
#pragma once

#define CHANGED_FLAGS 4096 // a power of two
#define CHANGED_SHIFT 52   // 64 - log2(CHANGED_FLAGS)

struct changed_flags {
	__u8 flag[CHANGED_FLAGS];
};

// CHANGED_MAP(name) defines a changed map: one entry, the flags, which
// user space reads and clears through a memory mapping.
#define CHANGED_MAP(name)                               \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_ARRAY);       \
		__uint(map_flags, BPF_F_MMAPABLE);      \
		__uint(max_entries, 1);                 \
		__type(key, __u32);                     \
		__type(value, struct changed_flags);    \
	} name SEC(".maps")

// changed_mark sets cgroup's flag in the changed map, after the cgroup's
// counters were written. The load first keeps the hot paths from writing
// a cache line that is already marked.
static __always_inline void changed_mark(void *map, __u64 cgroup)
{
	__u32 zero = 0;
	struct changed_flags *f = bpf_map_lookup_elem(map, &zero);
	if (!f)
		return;
	__u32 i = (__u32)((cgroup * 0x9E3779B97F4A7C15ULL) >> CHANGED_SHIFT) & (CHANGED_FLAGS - 1);
	if (!f->flag[i])
		f->flag[i] = 1;
}
