// Package monitor measures a Slackline agent's containers and its node, every
// 100 ms to 1 s: CPU, throttling, memory, OOM kills and pressure (PSI) from
// cgroupfs, node figures from procfs, and, when the eBPF programs are loaded,
// on-CPU time, run-queue latency, time delayed by revocable tasks, network
// traffic and reclaim stalls. It keeps each container's latest sample as a
// slackline.v1.ResourceStatistics (for NodeService.GetUsage and the QoS
// controllers), a bounded history of compact Points (for the estimator), and
// exports both as Prometheus metrics with cAdvisor's names.
//
// # Lifecycle
//
//	m, err := monitor.New(monitor.Config{Mode: "hybrid", Interval: time.Second, EBPF: adapter})
//	reg.MustRegister(m.Collector())          // the agent's /metrics
//	go m.Run(ctx)                            // samples every Interval until ctx ends (errgroup-friendly)
//	m.SetTargets(targets)                    // whenever containers come and go
//	u, ok := m.Latest(id); h := m.History(h[:0], id); n := m.Node()
//
// Sample(now) is one pass over every target and the node; Run calls it on a
// ticker, tests call it directly with fake trees and an explicit clock. The
// monitor starts no goroutine of its own. Run closes the files it kept open
// when it returns; Close does the same for callers that only use Sample.
//
// # Sources
//
// Each container is read by one sampler per source, run in this order:
//
//	v2-cpu | hybrid-cpu        CPU time and CFS throttling (one of the two, by layout)
//	v2-memory | hybrid-memory  usage, rss, cache, anon, limit, OOM kills (one of the two)
//	psi                        {cpu,memory,io}.pressure of the v2 tree (both layouts)
//	ebpf                       only when Config.EBPF is set
//
// The eBPF figures are fetched before the other samplers run (the CPU
// sampler reads what they say of the container's activity) and merged
// after them.
// New chooses the sources once, from the cgroup layout (Config.Mode or the
// detected one) and Config.EBPF, logs them and reports them in Sources; a
// sample never branches on the layout or on eBPF. Each container gets its
// own sampler of every chosen source, which holds that source's open files
// and previous values. The cgroupfs and PSI sources are required: when one
// fails (other than by a missing file) the container publishes nothing for
// the pass. eBPF is optional: its failure leaves the eBPF fields unset. The
// eBPF sampler runs last, as oom_events is the larger of the cgroup's and
// eBPF's counts.
//
// The cgroup layout is the containerizer's (see agent/containerizer/cgroups):
// Target.CgroupPath is relative to every hierarchy.
//
//	figure                    pure v2 (<mnt>/<path>/)          hybrid
//	cpus_usage/user/system    cpu.stat usage/user/system_usec  unified/<path>/cpu.stat (same keys; core statistics
//	                                                           need no controller), else cpuacct.usage (ns) and
//	                                                           cpuacct.stat (USER_HZ) in <mnt>/cpuacct/<path>
//	nr_periods/nr_throttled   cpu.stat (throttled_usec)        cpu/<path>/cpu.stat (throttled_time, ns)
//	mem_rss_bytes             memory.stat anon                 memory/<path>/memory.stat total_rss
//	mem_cache_bytes           memory.stat file                 memory.stat total_cache
//	mem_anon_bytes            active_anon + inactive_anon      total_active_anon + total_inactive_anon
//	mem_working_set_bytes     anon + active_file               total_rss + total_active_file
//	Usage.MemUsage            memory.current                   memory.usage_in_bytes
//	mem_limit_bytes           memory.max                       memory.limit_in_bytes
//	oom_events                memory.events oom_kill           memory.oom_control oom_kill
//	cpu/memory/io_pressure    {cpu,memory,io}.pressure         unified/<path>/{cpu,memory,io}.pressure
//
// mem_anon_bytes is the anonymous (swap-backed) LRU, shmem included, the
// same meaning in both layouts; mem_rss_bytes excludes shmem. mem_limit_bytes
// is the cgroup's limit, or Target.MemLimit when the cgroup has none.
// mem_working_set_bytes is what the container cannot lose without slowing
// down (anonymous memory and the page cache it keeps using); the estimator
// offers memory slack from it, not from usage, whose inactive cache the
// kernel reclaims for free.
// oom_events is the larger of the cgroup's counter and eBPF's. cpus_limit is
// Target.CPULimit. disk_sync (eBPF, ext4 only) is the histogram, count and
// total of the container's synchronous writes (fsync, fdatasync, O_SYNC),
// with their p99 over the interval (Usage.SyncP99, of Usage.Syncs writes),
// which the diskio QoS controller watches for guaranteed work, as it does
// the p99 of the block requests the container's tasks submitted
// (Usage.BlockP99, of Usage.BlockIOs, eBPF). Network figures exist only with eBPF: bytes and packets
// (cgroup_skb), and, with the network QoS programs, TCP round trips and
// retransmissions (EBPFStats.TCP*).
//
// The eBPF figures come from Config.EBPF, keyed by the container's v2 cgroup
// id: Target.CgroupID, or the inode number of <unified>/<path> found by the
// monitor (the kernel's cgroup id on 64-bit hosts).
//
// The node sample reads /proc/stat (usage = user + nice + system + irq +
// softirq + steal; cpus_limit = number of CPUs), /proc/meminfo
// (mem_available_bytes, mem_limit_bytes = MemTotal), /proc/loadavg and
// /proc/pressure/* through github.com/prometheus/procfs, at most once per
// Config.NodeInterval (default max(Interval, 1 s)): load and PSI averages
// move every few seconds and the node files cost as much as a dozen
// containers.
//
// With Config.CgroupRoot set (the agent's --cgroup-root), the node's memory
// is bounded by the lowest memory limit among the root and its ancestors
// (v2 memory.max, v1 memory.limit_in_bytes in the memory hierarchy of a
// hybrid host), read at the first node sample and every
// nodeBoundRescanInterval (10 s): when that limit is below MemTotal,
// mem_limit_bytes is the limit and mem_available_bytes the smaller of
// MemAvailable and limit - (usage - inactive file) of that cgroup (v2
// memory.current and memory.stat inactive_file, v1 memory.usage_in_bytes
// and total_inactive_file), read at each node sample while it bounds the
// node. Without such a limit nothing more is read per sample. A failed read
// of the bounding cgroup leaves the host's figures, is reported in the
// sample's error and makes the next node sample re-read the limits.
// Monitor.MemoryLimit reads the same bound on demand: the agent registers
// at most that much mem, so its estimator never offers as slack memory the
// limit cannot back.
//
// # Interval figures
//
// cpus_rate (Usage.CPURate) is the growth of cpus_usage_secs between the
// previous sample and this one divided by the time between them (the times
// passed to Sample). Run-queue p50 and p99 are computed from the growth of
// each log2 bucket (bucket i counts latencies in [2^i, 2^(i+1)) ns) over the
// same interval: the rank q*N is located in its bucket and interpolated
// linearly between the bucket's bounds, as Prometheus's histogram_quantile
// does, so the error is within the bucket's width (a factor of two; never
// more than the bucket's upper bound; the bpf package's last bucket is
// open-ended and is treated as [2^31, 2^32) ns). A container's first sample,
// and the first after its cgroup was recreated, has no interval figures:
// they are zero. When an eBPF bucket goes backwards (its entry was
// recreated), the current counts are taken whole. Network rates (net_tx_mbps,
// net_rx_mbps: bytes over the interval), packets and retransmissions over
// the interval, and TCP round-trip p50/p99 (the same interpolation over
// log2 buckets of microseconds) are computed between two eBPF samples;
// counters that went backwards restart the interval.
//
// # Cost
//
// Each container's control files are opened once and re-read with pread at
// offset 0 into one reused buffer (cgroupfs regenerates a file's content on
// every read from offset 0), then parsed in place without allocating: 9
// system calls per container per pass on hybrid hosts, 8 on v2, when every
// file is read (one pread each, cgroups.File: a read shorter than the
// buffer has the whole content; (*os.File).ReadAt made a second, empty,
// read). Without eBPF, CPU time (cpu.stat) is read at every pass.
// With eBPF scheduler figures (EBPFStats.Sched: sched_switch attached;
// without it cpu.stat is read at every pass) it is read when the container
// may have run since its last read: a task of it holds a CPU
// (EBPFStats.Running) or its on-CPU time, wakeups or run-queue wait moved;
// and at least every Config.IdleRefresh (the safety net; default
// refreshInterval, 1 s; the agent's --monitor-idle-refresh, 5 s). Every
// "at least every" and "at most every" below is on a grid, not an age
// (#29, tick.Crossed): a refresh is due at the first pass after a
// multiple of its interval on the Unix time line (where Run's passes
// fall, internal/tick) since the last read, so every idle container's
// refreshes fall in the same pass and the passes in between read no file
// of theirs, where an age since each container's own last read spread
// them over every pass. A refresh never comes later than the age rule
// made it (a read between boundaries, because something moved, is
// followed by the refresh at the next boundary, sooner). The node's
// files (Config.NodeInterval) and its bound (nodeBoundRescanInterval)
// follow the same grid, and so do the bpf package's full reads of its
// maps. A pass that reads no file and looks up no eBPF entry (no program
// marked a cgroup changed: the marks are memory-mapped) makes no system
// call of the monitor's, and the Go runtime's system monitor, which any
// system call made while the process was idle wakes and which then polls
// every 20 µs until the process is idle again, stays asleep (the agent's
// QoS evaluations, every third pass by default, hold what they read of the
// revocable subtree's limits until the next whole second or the agent's
// next write of one: containerizer's leverLayout).
// A read eBPF did not call for that
// finds CPU time eBPF did not see (tasks in a child cgroup, which eBPF
// counts as that cgroup's; or a run between the pass's eBPF read and the
// file's) has the container's cpu.stat read at every pass for blindHold (1
// minute) from then, renewed by every such read. A container that has not run repeats its CPU
// figures (its rate is 0), as it would have read them. A cgroup removed
// while still tracked is noticed within Config.IdleRefresh. When Config.EBPF
// is an EBPFPass, each pass reads every container's eBPF figures at once
// (the agent's adapter: batch lookups, a few system calls per pass)
// instead of one lookup per container (the bpf package's ReadAll looks up
// only the cgroups its programs marked changed). The memory
// files (usage, stat, limit, events) are read again when the container has
// run since they were last read (its CPU time grew), and repeated
// otherwise: an idle container charges no memory of its own. An idle
// container's usage (memory.current) is re-read every Config.IdleRefresh
// (default 1 s), so growth shows within it; its other memory files only when that
// usage moved, or every statRefreshInterval (5 s): the split of an
// unchanged usage (LRU ageing of its page cache, a limit changed from
// outside) shows within that. A fall of an idle container's usage
// (reclaim, its page cache dropped) likewise shows at the next refresh:
// the grid changes when the reads come, never how stale a repeated
// figure may be (at most the interval, as before). The PSI files are read at most every
// refreshInterval (the kernel moves their averages every 2 s, so reading
// them each pass bought nothing), and then only when the container may
// have run since their last read (its CPU time moved, or eBPF counted a
// run, a wakeup or a wait for a CPU), that read found recent pressure (a
// 10 s average not 0), or that read found a stall total grown since the
// read before; otherwise every statRefreshInterval. A stall begins with a
// task of the container running (it blocks on I/O or enters reclaim) or
// being woken (it waits for a CPU), and a stall that goes on keeps the
// totals growing from read to read: a task blocked on I/O, which uses no
// CPU, shows in its container's PSI within refreshInterval plus a pass of
// its start and is followed every refreshInterval while it lasts;
// without eBPF, a task starved of CPU from its wakeup on shows within
// statRefreshInterval plus a pass. Other containers' stalls (the node's
// totals) read nothing: an idle container without pressure of its own is
// read every 5 s on a busy node too; the 60 s and 300 s averages repeated
// so long are off by at most 8% of
// their value. An idle container costs no read at all at most passes with eBPF,
// one read per pass without. When Config.EBPF also knows what moved
// (EBPFChanges: the agent's adapter of the bpf package's ReadChanged and
// netqos's ReadChangedTCP, which keep the entries of cgroups no program
// marked changed and say which they stored anew), an idle container is
// not sampled at all at such passes (#29): when its previous sample was
// quiet (every interval figure 0: CPU rate, run-queue percentiles, syncs,
// block requests, network rates, TCP figures), it is the same target,
// eBPF says its figures did not move, and none of its samplers is due to
// read a file (each sampler's repeats, the same rules as above), the
// previous sample is published again at the pass's time, with no eBPF
// lookup, no copy of its counters and no new ResourceStatistics (the
// repeated sample shares the earlier one's, whose Timestamp Usages
// restamps); the interval baselines move to the pass as sampling would
// have moved them, so the sample is exactly the one sampling would have
// taken (TestIdleContainerRepeated compares with a monitor that samples
// everything). Within a run of repeats the samplers are not asked again:
// the first repeat of the run keeps the earliest boundary at which one of
// them may have a file due (repeater.repeatsUntil), and until then only
// eBPF's answer can end the run (TestRepeatHorizonChangesNothing compares
// with a monitor that asks every sampler at every pass).
// slackline_monitor_samples_repeated_total counts them. A file a
// cgroup does not have (no PSI, no memory controller) is noted and not
// retried. The file descriptors (up to 11 per container) are released when
// the container leaves the targets or its cgroup goes. A pass allocates one
// ResourceStatistics per container it samples; the history keeps a ~150-byte Point per
// sample (50 containers x 600 points = 4.4 MB). See BenchmarkSample.
//
// # Metrics
//
// Collector reports the latest samples at scrape time, labelled
// container_id, task_id and revocable: container_cpu_{usage,user,system}_seconds_total,
// container_cpu_cfs_{periods,throttled_periods}_total, container_cpu_cfs_throttled_seconds_total,
// container_memory_{rss,cache,usage_bytes,working_set_bytes}, container_spec_memory_limit_bytes,
// container_oom_events_total, container_pressure_{cpu,memory,io}_{waiting,stalled}_seconds_total
// (PSI some and full totals) and, for samples with eBPF figures only,
// container_network_{receive,transmit}_{bytes,packets}_total,
// slackline_container_delayed_by_revocable_seconds_total,
// slackline_container_tcp_retransmits_total, the histogram
// slackline_container_tcp_rtt_seconds (bounds 2^k µs, k = 3..24),
// slackline_container_memory_reclaim_stall_seconds_total and the histogram
// slackline_container_runqueue_latency_seconds, whose bounds are 2^k ns for
// k = 10..31 (1.024 µs to 2.1 s) so that they coincide with the eBPF log2
// buckets (counts are exact; its sum is EBPFStats.RunqSum when known, else
// estimated from bucket midpoints). Node: slackline_node_memory_available_bytes,
// slackline_node_load{1,5,15}; and the monitor's own
// slackline_monitor_sample_duration_seconds, _samples_total and _containers.
//
// # Concurrency and ownership
//
// The methods of a Monitor are safe for concurrent use. Passes are
// serialised; Latest, History, Node, Usages and scrapes never wait for file
// I/O. A Usage's Stats is shared by every reader and must not be modified;
// History copies Points into the caller's slice. The monitor only reads
// cgroups: it never writes or removes them.
//
// # Errors
//
// New fails for an unknown Mode, an Interval below 10 ms, a missing procfs at
// ProcRoot, or (with an empty Mode) a cgroup layout that cannot be detected.
// Sample never fails because a container's cgroup is gone: that container is
// dropped (Latest reports false, its history is forgotten) and measured
// afresh if the cgroup comes back while it is still a target. Other failures
// (a control file that cannot be read, an eBPF lookup, a node file) are
// joined into Sample's error while everything else is still published; a
// container whose cgroupfs files failed publishes nothing for that pass, one
// whose eBPF lookup failed publishes its cgroupfs figures with Usage.EBPF
// false. Run logs such errors (once per distinct message in a row) and keeps
// sampling.
package monitor
