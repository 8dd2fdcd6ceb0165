// Package network is the agent's network QoS subsystem: it paces the egress
// of revocable tasks so that a revocable bulk transfer cannot fill the
// node's link under a guaranteed task, and it detects the node's bandwidth.
//
// # Place in the data flow
//
// The agent registers the `bandwidth` resource (Mbit/s: DetectBandwidth,
// the default-route interface's link speed, or --resources; a virtual NIC
// reporting no speed gives none, logged). The estimator
// turns the guaranteed tasks' egress (eBPF per-cgroup byte counters) into
// revocable bandwidth, which the coordinator offers like revocable cpus. A
// revocable task launched with bandwidth is paced here to its allocation,
// and all revocable tasks together to the pace: the latest estimate
// (SetEstimate), lowered by the "network" QoS controller (SetQoSLimit)
// when guaranteed traffic suffers. Guaranteed tasks are never paced.
//
// # Mechanism: HTB classes and a BPF classifier by cgroup
//
// On each managed interface (--network-interfaces, default the
// default-route interface when the node has a bandwidth resource) the root
// qdisc is an HTB whose handle major M is the agent's (HandleMajor of its
// cgroup root; QdiscMajor, 514c, by default), with no default class:
//
//	M:     htb, default 0: unclassified packets go "direct", unshaped and
//	       dequeued before every class (guaranteed tasks, the host)
//	M:1    revocable parent: rate = ceil = the pace
//	M:2    revocable tasks without an allocation: ceil = the pace
//	M:10.. one per revocable task with an allocation:
//	       ceil = min(allocation, pace), DRR quantum proportional to it
//	filter cls_bpf direct-action (bpf/netqos classify), classid M:
//
// The classifier reads the socket's v2 cgroup id (bpf_skb_cgroup_id) and
// picks the task's class, or, for any cgroup below the revocable subtree,
// the shared class (bpf_skb_ancestor_cgroup_id); every other packet is
// left unclassified and bypasses the shaping.
//
// Why HTB and not EDT (skb->tstamp stamped by a tc program, held by
// sch_fq): EDT needs sch_fq, which many kernels build as a module or not at
// all (the kernel this was developed on has HTB, TBF, cls_bpf and ifb
// built in, and no sch_fq, fq_codel or netem); HTB is everywhere, and its
// direct queue gives guaranteed traffic strict priority over paced
// traffic for free. What HTB costs: one qdisc lock per interface (on a
// multi-queue NIC the kernel's mq root is replaced, so every queue goes
// through that lock), and the classifier on every egress packet (see
// bpf/netqos for its measured cost). Pacing accuracy, measured through a
// 1 Gbit/s bottleneck: a task allocated 100 Mbit/s sends 93-95 Mbit/s of
// goodput (the allocation counts Ethernet and IP headers).
//
// # Ownership, crashes and shutdown
//
// The agent owns only qdiscs with its handle major; another agent on the
// same host (another cgroup root) finds them foreign and leaves them. New
// installs its qdisc where the kernel's default is (handle 0:), adopts its
// own left by a crashed run (same qdisc and classes, the filter replaced
// in place, stray filters on it removed: nothing is duplicated), removes
// its qdisc from interfaces it no longer manages, and refuses an interface
// whose root qdisc is someone else's (ErrForeignQdisc): it never destroys
// an operator's configuration. A filter keeps the classifier it was given
// alive in the kernel, so while the agent is down after a crash its tasks
// stay paced at their last rates. Run's end (a clean shutdown) and Close
// delete the agent's qdisc: the kernel's default comes back, and tasks
// still running are no longer paced.
//
// # Ingress
//
// Ingress is measured (per container by eBPF, per interface here: Link)
// but not limited. Policing ingress drops packets that have already
// crossed the link (the bandwidth is spent) and makes TCP senders back off
// only through losses; shaping it needs an ifb device and a classifier
// that cannot see the socket yet at that point (no cgroup before the
// socket lookup). Done right, it belongs in the sender's pacing: the peer
// sending to a revocable task is usually another Slackline node.
//
// # Concurrency and errors
//
// Methods are safe for concurrent use; one mutex guards the desired state,
// what is applied and the netlink handle, and is held across netlink calls
// (tens of microseconds), never by readers (Link, Pace, QoSLimit). New's
// error follows package bpf's probe contract (bpf.Classify): no
// CAP_NET_ADMIN wraps bpf.ErrPermission, a kernel without HTB or cls_bpf
// wraps ebpf.ErrNotSupported; the agent then runs without network QoS and
// says why in its log and GetFeatures ("network_qos"). Setters return the
// netlink errors of what they could not apply and keep the rest applied.
package network
