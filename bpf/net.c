//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Network: per-cgroup bytes and packets, from cgroup_skb programs attached at
// the agent's cgroup root in the v2 tree (they run for every socket of every
// cgroup below it). Bytes are skb->len at the hook: the IP packet, without
// the link-layer header. The programs never drop: they return 1 (allow).

#include "common.h"

static __always_inline void account(struct __sk_buff *skb, int egress)
{
	__u64 cgroup = bpf_skb_cgroup_id(skb);
	struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cgroup);
	if (!s)
		return;
	// Atomic although per-CPU: a softirq can interrupt a process-context
	// egress program on the same CPU.
	if (egress) {
		__sync_fetch_and_add(&s->tx_bytes, skb->len);
		__sync_fetch_and_add(&s->tx_packets, 1);
	} else {
		__sync_fetch_and_add(&s->rx_bytes, skb->len);
		__sync_fetch_and_add(&s->rx_packets, 1);
	}
	mark_changed(cgroup);
}

SEC("cgroup_skb/ingress")
int cgroup_skb_ingress(struct __sk_buff *skb)
{
	account(skb, 0);
	return 1;
}

SEC("cgroup_skb/egress")
int cgroup_skb_egress(struct __sk_buff *skb)
{
	account(skb, 1);
	return 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
