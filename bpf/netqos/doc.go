// Package netqos holds the eBPF programs of network QoS: the classifier
// that puts revocable tasks' egress into the agent's HTB classes, and the
// TCP signals (round-trip times, retransmissions) of the cgroups the agent
// watches. It is a sibling of package bpf, with its own C file, gen.go and
// committed generated files, and the same conventions (bpf.Classify,
// bpf.FeatureResult, bpf.ProgramStat).
//
// # Programs (netqos.c, CO-RE against ../headers/vmlinux.h)
//
//   - classify (SEC "tc"): a direct-action cls_bpf program on the agent's
//     HTB qdisc (agent/network attaches it over netlink with classid
//     <qdisc major>:). It looks the socket's v2 cgroup up in `classes`
//     (cgroup id -> class minor: skb->tc_classid is 16 bits, the filter
//     supplies the major); failing that, a cgroup below the revocable
//     subtree (bpf_skb_ancestor_cgroup_id at the subtree's level) gets the
//     shared revocable class; anything else returns TC_ACT_UNSPEC and HTB
//     sends it directly.
//   - tcp_rtt (SEC "sockops"), attached at Config.CgroupRoot: on each new
//     connection of a watched cgroup below it, asks for
//     BPF_SOCK_OPS_RTT_CB; on each RTT sample (the kernel's mrtt, µs) adds
//     it to a log2 histogram of the socket's cgroup. The socket's cgroup is
//     read through BTF (tcp_sock -> sk_cgrp_data.cgroup -> kn->id) because
//     the callback runs in softirq, where the current task is anybody.
//     Other connections cost one lookup when established and nothing per
//     acknowledgement; connections opened before the program was attached,
//     or before their cgroup was watched, are not sampled.
//   - tcp_retransmit (SEC "tp_btf/tcp_retransmit_skb"): counts
//     retransmitted skbs per socket cgroup, for every socket.
//
// Counters exist only for watched cgroups (Watch creates their entry,
// Unwatch deletes it); the programs only look up. After adding to a
// cgroup's counters both programs set its flag in tcp_changed (changed
// marks, as package bpf's), and ReadAllTCP looks up only the marked
// cgroups, reusing what it read of the others, with every watched cgroup
// read at least once a second: an idle cgroup costs no system call, where
// each call walked the whole counters map (every bucket of MaxCgroups).
// A watched cgroup whose entry is gone from the map is an error of the
// pass that reads it (every full pass does), never its last counters
// repeated. ReadCounts says how it read.
//
// # Lifecycle and ownership
//
// Load creates the maps, loads each program on its own (a kernel without
// one signal loses only that signal) and attaches the two signal
// programs; Close detaches them and frees the maps. The classifier is
// attached by its user, to qdiscs that outlive the process: a filter
// holds the program and its maps, so classification goes on with the last
// classes after a crash until the restarted agent replaces the filter.
//
// # Errors
//
// Load, Probe and the Features follow package bpf's contract: nil when
// available, wrapping ebpf.ErrNotSupported when the kernel lacks it,
// bpf.ErrPermission without privileges, anything else when it cannot
// tell. TCPStats and Unwatch return bpf.ErrNotTracked for cgroups not
// watched; ClassifierFD returns bpf.ErrUnavailable when the classifier
// could not be loaded.
//
// # Cost
//
// BenchmarkProgramCost (not run by go test) measures each program's
// run_time_ns/run_cnt with BPF statistics enabled, under bulk TCP through
// the classifier, next to an empty tc program measured the same way:
//
//	go test -run '^$' -bench ProgramCost -benchtime 3x -v ./bpf/netqos
//
// On the 2-vCPU development VM (kernel 6.18, JIT): classify 135-182 ns per
// skb against 53-57 ns for the empty program (two runs on a busy host), so
// 80-125 ns of its own per skb; with TSO/GSO an skb carried 54-55 KB on
// average, well under 0.01 ns per byte. tcp_rtt costs 346-605 ns per
// sock_ops callback (one per acknowledgement that measures a round trip,
// plus connection events), mostly the BTF walk from the socket to its
// cgroup and the per-CPU atomics.
package netqos
