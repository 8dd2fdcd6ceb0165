// Package bpf loads Slackline's eBPF programs, attaches them, and reads what
// they aggregate in the kernel for the cgroups the agent tracks; it also
// probes which eBPF features the kernel and the process's privileges allow.
//
// # Programs (one C file per concern, CO-RE against headers/vmlinux.h)
//
//   - sched.c: tp_btf/sched_switch alone where the kernel keeps each task's
//     run-queue wait in task_struct.sched_info (CONFIG_SCHED_INFO; the
//     sched_info probe), else tp_btf/sched_wakeup and
//     tp_btf/sched_wakeup_new too, which stamp waits in task storage. Per
//     cgroup: on-CPU time (the kernel's runtime, as cpu.stat counts it,
//     including runs begun by switches the kernel did not trace: sched.c's
//     "Missed switches"), wakeups (counted as the sleeps they end),
//     run-queue latency (runnable-to-running, after a wakeup or a
//     preemption) as a log2 histogram; who delayed whom: the part of a
//     guaranteed or protected task's wait during which revocable tasks held
//     its CPU, per (victim, culprit) pair; waits of guaranteed and
//     protected tasks at or above a threshold go to a ring buffer
//     (Monitor.Events). With sched_info the waits are the kernel's own
//     (the run_delay of /proc/<pid>/schedstat; when the load balancer moves
//     a waiting task, its wait counts from its arrival on the CPU where it
//     runs, and the kernel's run_delay also has the part before).
//   - net.c: cgroup_skb/ingress and cgroup_skb/egress attached at
//     Config.CgroupRoot in the v2 tree: bytes (IP layer, skb->len) and
//     packets per cgroup. They always return 1 (allow).
//   - mem.c: tp_btf/mm_vmscan_{direct,memcg}_reclaim_{begin,end}: reclaim
//     stall time; tp_btf/mark_victim (task form, Linux 6.8+): OOM kills.
//   - io.c: tp_btf/ext4_sync_file_{enter,exit}: the latency of synchronous
//     writes on ext4 (fsync, fdatasync, O_SYNC writes: data write-out and
//     journal commit) as a log2 histogram, their count and total
//     (CgroupStats.Sync*). Tracepoints, as kernels built without ftrace have
//     no fentry; other file systems are not measured. The waiting task's v2
//     cgroup is charged, so it works on hybrid hosts, where the block layer
//     charges bios to v1 blkio cgroups and the journal's writes to jbd2.
//     tp_btf/block_io_start (Linux 6.5+) and tp_btf/block_rq_complete: the
//     latency of each block request from its start (blk_account_io_start,
//     in the submitting task's context: its v2 cgroup, if tracked) to its
//     completion: I/O-scheduler queueing and device time, not the wait in
//     blk-throttle or for a request tag, which come before the start; as a
//     log2 histogram with count and bytes (CgroupStats.Block*; maps
//     blk_inflight, LRU of 16384 requests, and blk_stats, per-CPU LRU by
//     cgroup). Requests other tasks submit for it (buffered writeback, the
//     journal) are theirs. The block programs load apart from the
//     synchronous-write ones: on a kernel before 6.5 only they are missing.
//
// Every program first finds out whether the cgroup is tracked: the network
// and memory programs look it up in a map user space fills (Monitor.Track),
// and sched_switch, which runs on every context switch, in a cache each CPU
// keeps of that map; a cgroup the agent does not track costs that and
// nothing else. Cgroups are identified by their v2 id (CgroupID: the inode of
// the directory in the v2 tree), which works on hybrid hosts too, because the
// unified hierarchy is the kernel's default hierarchy. Accounting is for the
// exact cgroup: tasks in a child cgroup of a tracked one are not counted.
// Who-delayed-whom attributes a wait to the last revocable cgroup that ran on
// the CPU during it and considers only the part of the wait spent on the CPU
// where the task finally ran (the wakeup variant ignores waits during which
// the task changed CPUs).
//
// With Config.AllCulprits (or SetAllCulprits), sched_switch also keeps each
// CPU's last 32 runs of any task, and splits every wait of a guaranteed or
// protected task among everything that held the CPU meanwhile: tracked
// cgroups (revocable, guaranteed, protected) and untracked ones (the
// agent's, the root cgroup, any service) by cgroup id, kernel threads
// (CulpritKernel), the idle task (CulpritIdle: the time it took to wake the
// CPU up, on a virtual machine including the host scheduling the virtual
// CPU again), and the part older than the runs kept (CulpritUnknown). The
// parts sum to the wait. It costs every context switch, tracked or not, a
// clock read and a few stores: about 30 ns more for sched_switch in
// BenchmarkProgramCost on the 2-vCPU development machine (66-74 ns to
// 96-104 ns), so it is off unless asked for (slackline-agent
// --ebpf-all-culprits). The colocation study (docs/colocation-study.md)
// rests on it.
//
// # Cost
//
// sched_switch runs twice per round trip of two tasks handing a CPU to each
// other, so its common paths touch the two tasks (which the scheduler has
// just touched) and a couple of cache lines of the CPU's own state: its
// cache of the tracked set and the counters of up to four tracked cgroups
// ("resident" counters, which user space reads through a memory mapping of
// that state; the counts of other cgroups go to the per-CPU hash map
// cgroup_stats, and set the cgroup's flag in `changed`, which tells
// ReadAll to look it up). Counts never move between the two, so Stats can read at
// any time. The state takes about 3 KiB per possible CPU.
//
// # Lifecycle and ownership
//
// Load creates the maps and attaches what it can, logging what it cannot
// (Monitor.Attached lists what works), and picks the scheduler variant with
// the sched_info probe (if that variant fails to load, the wakeup one is
// tried); Track/Untrack maintain the tracked set and tell each CPU that it
// changed;
// Stats, AllStats and DelayedBy read cumulative counters (ReadAll reads
// every tracked cgroup's: it looks up only those whose counters a program
// marked changed since its last call, through the `changed` flags user
// space maps, reuses what it read of the others, and reads every cgroup
// once a second, with batch lookups, a system call per 128 cgroups, the
// block counters too (blk_stats walked once, not looked up per cgroup);
// ReadCounts says how often each happened; CgroupStats.Running says
// whether a task of the cgroup holds a CPU, from the CPUs' mapped
// states); Run(ctx) reads the
// ring buffer into Events until ctx ends, then closes the reader and the
// channel (in batches with Config.EventBatchWindow: a window after the first
// event of a batch it delivers every event the ring buffer holds, each with
// its own time, so the reader wakes once per window instead of once per
// event); Close detaches everything. The Monitor owns every kernel object;
// nothing is pinned, so the programs go away with the process.
//
// # Errors
//
// Probe runs Features once each. A probe's error is nil when the feature is
// available, wraps ebpf.ErrNotSupported when the kernel lacks it, wraps
// ErrPermission when the process may not use it (EPERM/EACCES: not root,
// missing CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN), and is anything else when the
// probe could not tell; FeatureResult.Status maps this onto the API's
// FeatureStatus. Load follows the same contract when nothing can be
// attached, so a caller can tell "run on cgroupfs/PSI/procfs alone because
// unprivileged" from "because the kernel is too old". Stats and Untrack
// return ErrNotTracked for unknown cgroups; methods needing the scheduler
// programs return ErrUnavailable when they are not loaded.
//
// # Generated files
//
// gen.go runs bpf2go (pinned in go.mod) for each C file; `make generate`
// pins clang (BPF_CLANG, Debian's clang-14) and flags (-O2 -g -Wall -Werror).
// The *_bpfel.go and *_bpfel.o outputs are committed, so building needs no
// clang, and regeneration is byte-for-byte reproducible. headers/update.sh
// refreshes the vendored libbpf headers (BSD-2-Clause, see headers/) and
// vmlinux.h.
//
// # Tests and benchmarks
//
// The tests need root (they skip otherwise; with SLACKLINE_TEST_PRIVILEGED=1
// they fail instead): real cgroups under <v2 root>/slackline-bpftest-<rand>,
// a network namespace with a veth pair (iproute2), taskset. They compare
// on-CPU time with cpu.stat/cpuacct.usage (0.1%; 5% for more cgroups on one
// CPU than it keeps resident; at least the cgroup's usage after switches
// went unseen, sched.c's "Missed switches"), run-queue waits with the kernel's schedstat
// (2%), network counters with the veth's (1%), check run-queue p99 under a
// revocable CPU hog is >= 10x the uncontended p99 with the delay attributed
// to the hog and a threshold event delivered, and run the probes as nobody.
// The scheduler tests run for both variants (export_test.go's
// WithWakeupHooks forces the wakeup one).
//
// Overhead benchmarks (not run by go test), as root:
//
//	go test -run '^$' -bench . -benchtime 300000x -v ./bpf
//
// BenchmarkProgramCost enables BPF statistics (like
// kernel.bpf_stats_enabled=1), runs a pipe ping-pong and UDP traffic in a
// tracked cgroup, and reports each program's run_time_ns/run_cnt, next to an
// empty tp_btf/sched_switch program measured the same way (the cost of the
// trampoline and of the statistics themselves). BenchmarkContextSwitch runs
// a pipe ping-pong between two processes pinned to one CPU, alternating
// rounds with nothing attached, with an empty program on each of the
// monitor's hooks, and with the monitor attached, in one run, and reports
// the throughput ratios attached/detached, empty/detached and
// attached/empty: the last is the monitor's own cost beside what its hooks
// cost on this kernel anyway (the trampolines; the goal is 0.99 or more).
package bpf
