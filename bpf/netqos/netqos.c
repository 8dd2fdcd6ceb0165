//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Network QoS: the classifier that puts revocable tasks' egress into the
// agent's HTB classes, and the TCP signals of the cgroups the agent watches
// (round-trip times and retransmissions). See doc.go.

#include "../headers/vmlinux.h"
#include "../headers/bpf_helpers.h"
#include "../headers/bpf_tracing.h"
#include "../changed.h"

#define TC_ACT_OK 0
#define TC_ACT_UNSPEC -1

// RTT histogram: bucket i counts round trips in [2^i, 2^(i+1)) µs, bucket 0
// also 0 µs, the last everything from 2^31 µs. Must match RTTBuckets.
#define RTT_BUCKETS 32
_Static_assert((RTT_BUCKETS & (RTT_BUCKETS - 1)) == 0, "tcp_rtt masks bucket indexes with RTT_BUCKETS - 1");

// Sizes are defaults: user space sets max_entries before loading.
#define MAX_CGROUPS 4096

// tcp_counters is one CPU's share of a watched cgroup's TCP counters.
struct tcp_counters {
	__u64 rtt_hist[RTT_BUCKETS];
	__u64 rtt_count;
	__u64 rtt_sum_us;
	__u64 retransmits; // retransmitted skbs (tcp_retransmit_skb)
};

// classify_config is what the classifier knows besides per-cgroup classes.
struct classify_config {
	__u64 revocable_root;  // v2 id of the revocable subtree's cgroup, 0: none
	__u32 revocable_level; // its level in the v2 hierarchy (root: 0)
	__u32 revocable_class; // class minor of revocable cgroups without their own
};

// classes: v2 cgroup id -> HTB class minor. Filled by user space. The
// minor is all a cls_bpf program can choose (skb->tc_classid is 16 bits
// in the kernel): cls_bpf ORs it with the major of the filter's classid.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u64);
	__type(value, __u32);
} classes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct classify_config);
} classify_cfg SEC(".maps");

// tcp_stats: v2 cgroup id -> per-CPU TCP counters. User space creates the
// entry of each cgroup it watches; programs only look up.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct tcp_counters);
} tcp_stats SEC(".maps");

// tcp_changed: the changed marks (../changed.h, shared with package bpf)
// of tcp_stats: tcp_rtt and tcp_retransmit set a cgroup's flag after
// adding to its counters, so that user space looks up only the cgroups
// whose counters moved (bpf.ChangedMarks).
CHANGED_MAP(tcp_changed);

// mark_changed sets the cgroup's flag in tcp_changed, after its counters
// were written.
static __always_inline void mark_changed(__u64 cgroup)
{
	changed_mark(&tcp_changed, cgroup);
}

// classify is a direct-action cls_bpf program on the agent's HTB qdisc,
// whose filter carries the qdisc's major as classid: a packet of a cgroup
// with a class goes to that class, a packet of another
// cgroup below the revocable subtree to the shared revocable class; every
// other packet (guaranteed tasks, the host, forwarded traffic) gets no class
// and HTB sends it directly, ahead of every class and unshaped.
SEC("tc")
int classify(struct __sk_buff *skb)
{
	__u64 cgroup = bpf_skb_cgroup_id(skb);
	if (!cgroup)
		return TC_ACT_UNSPEC;
	__u32 *class = bpf_map_lookup_elem(&classes, &cgroup);
	if (class) {
		skb->tc_classid = *class;
		return TC_ACT_OK;
	}
	__u32 zero = 0;
	struct classify_config *cfg = bpf_map_lookup_elem(&classify_cfg, &zero);
	if (cfg && cfg->revocable_root &&
	    bpf_skb_ancestor_cgroup_id(skb, cfg->revocable_level) == cfg->revocable_root) {
		skb->tc_classid = cfg->revocable_class;
		return TC_ACT_OK;
	}
	return TC_ACT_UNSPEC;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;
	shift = (v > 0xFFFFFFFF) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

// sock_cgroup is the v2 cgroup id of the socket's owner (fixed when the
// socket was created), readable in softirq context where the current task
// is anybody.
static __always_inline __u64 sock_cgroup(const struct sock *sk)
{
	struct cgroup *cgrp = sk->sk_cgrp_data.cgroup;
	if (!cgrp)
		return 0;
	return cgrp->kn->id;
}

// tcp_rtt runs for the TCP sockets of every cgroup below the cgroup it is
// attached to: for each new connection of a watched cgroup it asks for a
// callback on every RTT sample, and adds the samples (mrtt, µs) to the
// socket's cgroup. Other connections cost one lookup when established.
SEC("sockops")
int tcp_rtt(struct bpf_sock_ops *ops)
{
	int established = 0;
	switch (ops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		established = 1;
		break;
	case BPF_SOCK_OPS_RTT_CB:
		break;
	default:
		return 1;
	}
	struct bpf_sock *bsk = ops->sk;
	if (!bsk)
		return 1;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return 1;
	__u64 cgroup = sock_cgroup(&tp->inet_conn.icsk_inet.sk);
	struct tcp_counters *c = bpf_map_lookup_elem(&tcp_stats, &cgroup);
	if (!c)
		return 1;
	if (established) {
		bpf_sock_ops_cb_flags_set(ops, ops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG);
		return 1;
	}
	// args[0] is the measured RTT (µs) since Linux 6.4; older kernels pass
	// no arguments (6.1: always 0), so the smoothed RTT stands in there.
	__u64 rtt_us = ops->args[0];
	if (!rtt_us)
		rtt_us = ops->srtt_us >> 3;
	__u32 bucket = rtt_us ? log2_u64(rtt_us) : 0;
	if (bucket >= RTT_BUCKETS)
		bucket = RTT_BUCKETS - 1;
	// The mask states the bound again in a form every verifier tracks: 6.1's
	// lost it through the clamp above and refused the program ("R2 unbounded
	// memory access"); the empty asm keeps clang from dropping the mask.
	asm volatile("" : "+r"(bucket));
	bucket &= RTT_BUCKETS - 1;
	// Atomic although per-CPU: the callback runs in process context (socket
	// backlog) and in softirq, which can interrupt it on the same CPU.
	__sync_fetch_and_add(&c->rtt_hist[bucket], 1);
	__sync_fetch_and_add(&c->rtt_count, 1);
	__sync_fetch_and_add(&c->rtt_sum_us, rtt_us);
	mark_changed(cgroup);
	return 1;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit, const struct sock *sk, const struct sk_buff *skb)
{
	__u64 cgroup = sock_cgroup(sk);
	struct tcp_counters *c = bpf_map_lookup_elem(&tcp_stats, &cgroup);
	if (c) {
		__sync_fetch_and_add(&c->retransmits, 1);
		mark_changed(cgroup);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
