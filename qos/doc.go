// Package qos holds Slackline's QoS controllers: the decision logic that
// protects guaranteed work from the revocable work running beside it, in
// the role of Mesos's QoSController. A controller looks at what the node
// observes and asks for corrections; the agent carries them out.
//
// The package is pure: no goroutines, clock or I/O. A Controller is a
// function of (Input, its own state) -> []Correction. Time advances only
// through Input.Now, so tests drive controllers through hours of simulated
// time in milliseconds and never sleep.
//
// # Signals
//
// The agent fills an Input at every evaluation from its monitor and from
// eBPF:
//
//   - per container (Container): whether it is revocable, or a service
//     outside Slackline named with --protect-cgroup (Protected); CPU
//     allocated and used; memory; start time; run-queue (wakeup-to-run)
//     latency p50/p99 over the last sampling interval; cgroup PSI avg10 for
//     CPU (some) and memory (some, full); and who-delayed-whom
//     (DelayedBy): how long revocable containers kept this one waiting for a
//     CPU during the interval;
//   - per node (Node): CPUs, /proc/meminfo's MemTotal and MemAvailable,
//     /proc/loadavg, node PSI;
//   - eBPF threshold events (Event) from the ring buffer since the previous
//     evaluation: single wakeups of guaranteed work that waited longer than
//     the kernel-side threshold, with the revocable container that was
//     running meanwhile;
//   - network, per container: bandwidth allocated, egress over the
//     interval (Mbit/s and packets), TCP round-trip p50/p99 and
//     retransmitted segments (eBPF sock_ops and tcp_retransmit_skb); per
//     node: the egress capacity (the bandwidth resource) and the managed
//     interfaces' egress and ingress over the last 100 ms; the revocable
//     bandwidth estimate and the bandwidth limit applied
//     (RevocableBandwidth, RevocableBandwidthLimit);
//   - the CPU limit currently applied to the revocable subtree
//     (RevocableLimit) and the CPUs it may run on (RevocableCPUs, nil
//     without a cpuset controller). Controllers take them as the truth, so a
//     correction that failed, or a stricter one from another controller, is
//     seen at the next evaluation.
//
// Guaranteed containers and protected services are the work to protect;
// revocable containers that are not protected are the only ones a
// controller throttles or kills. A zero field means "not measured" (no BTF,
// no PSI) and never triggers a correction: without eBPF the interference
// controller runs on PSI alone, and victims are chosen newest first.
//
// # Corrections
//
// A Correction is one of eight kinds (Kind, slackline.v1.CorrectionKind):
// Throttle (lower a limit), Unthrottle (raise it, or remove it with a
// limit of 0), Confine (set the CPUs the revocable subtree may run on;
// none listed: every CPU), Reclaim (lower the revocable subtree's
// memory.high to MemoryHigh), Release (raise it, or remove it with 0),
// Freeze and Thaw (the revocable subtree's cgroup.freeze) or Kill. A
// Throttle or Unthrottle limits a Resource: CPU (CPULimit, cores,
// enforced over Period), Bandwidth (the pace of all revocable egress,
// BandwidthLimit, Mbit/s) or DiskIO (the revocable subtree's reads and
// writes per device, IOLimit, bytes per second); Bandwidth, DiskIO,
// Confine and the memory kinds aim at the subtree only. A
// correction is aimed at one
// revocable container or, with an empty ContainerID, at the whole
// revocable subtree. Its Reason
// names the signal ("web-1 run-queue p99 4.2 ms > 1 ms") and becomes the
// killed task's status message; Signal is when that signal was observed,
// so that the agent can measure its reaction time.
//
// # How the agent applies corrections
//
// The agent evaluates the controller set when threshold events arrive from
// the ring buffer and periodically (--qos-correction-interval-min), always
// from one goroutine, and applies what comes back at once, in the order
// given (limits before kills):
//
//   - Throttle/Unthrottle of the subtree: cpu.max (v2) or the CFS quota
//     (v1) of <cgroup-root>/revocable, period Correction.Period (the
//     kernel's 100 ms when 0), quota CPULimit × period; Unthrottle with 0
//     writes "max" (v2) or -1 (v1). The applied value is reported back as
//     Input.RevocableLimit;
//   - Confine: cpuset.cpus of <cgroup-root>/revocable (the v1 cpuset
//     hierarchy on hybrid hosts, whose revocable tasks join it); reported
//     back as Input.RevocableCPUs;
//   - Throttle/Unthrottle of CPU for one container: not applied (logged;
//     no built-in controller issues these; Merge handles them);
//   - Throttle/Unthrottle of Bandwidth: the revocable egress pace on the
//     managed interfaces (agent/network), min(estimate, BandwidthLimit);
//     Unthrottle with 0 goes back to the estimate. The applied limit is
//     reported back as Input.RevocableBandwidthLimit;
//   - Throttle/Unthrottle of DiskIO: io.max (v2) or blkio.throttle (v1)
//     of the revocable subtree, per device; Unthrottle with 0 removes it;
//   - Reclaim/Release: memory.high of the revocable subtree (Release with
//     0 removes it; none on hybrid hosts, whose v1 memory controller has
//     no memory.high); Freeze/Thaw: cgroup.freeze of its v2 tree;
//   - Kill: cgroup.kill of the container, then TASK_STATE_KILLED with
//     REASON_CONTAINER_PREEMPTED and the Reason as message. A controller
//     does not ask again for a container while it stays listed, until
//     Config.KillRetry has passed.
//
// The agent records every correction with its reaction time (Signal to the
// cgroup write) for NodeService.GetCorrections and the metrics
// slackline_qos_corrections_total{kind,reason} and
// slackline_qos_reaction_seconds.
//
// # Controllers
//
// Registry maps names to factories; NewSet builds several into one
// Controller (--qos-controller cpuset,interference,reclaim,diskio is the default,
// DefaultControllers) and merges their corrections: one kill per
// container, a kill supersedes throttles of the same container, and the
// strictest limit per target wins (see NewSet and Merge).
//
// "noop" (Noop) never corrects: revocable work runs unchecked.
//
// "load" (Load) is Mesos's LoadQoSController, kept for parity and
// comparison: when the 5-minute load average exceeds
// LoadConfig.Threshold5Min or the 15-minute one exceeds Threshold15Min,
// it kills every revocable container at once. It reacts minutes late, counts
// guaranteed work's own load, throws all best-effort progress away, and
// keeps killing new revocable tasks until the averages decay; it needs at
// least one threshold.
//
// Mechanisms that need no controller are always on: the revocable subtree
// is SCHED_IDLE (cpu.idle) where the kernel has it, and lowest weight
// otherwise; revocable tasks get a core-scheduling cookie where cores have
// SMT siblings; the agent and the task supervisors run in cgroups of their
// own with small weights (agent/containerizer). docs/colocation-study.md
// says what each mechanism buys, measured.
//
// "cpuset" (CPUSet) keeps revocable work off the CPUs guaranteed work uses,
// one CPU at a time, like Heracles's core controller: revocable work gets
// the highest-numbered CPUs; a violation takes one CPU back per
// ShrinkInterval, down to MinCPUs; calm for GrowAfter gives one back per
// GrowInterval, never onto the last CPU free of it while guaranteed or
// protected work uses any, with the same probing and backoff as the
// interference controller's raises. With Headroom > 0 it also sizes
// revocable work's CPUs by guaranteed use without waiting for a violation,
// N - ceil(use × Headroom); off by default, because measured it cost
// revocable work a third of its CPU without improving the server's p99. Guaranteed work is never confined: it keeps every CPU it was
// promised and preempts idle-priority revocable work wherever both run.
// Confining costs revocable work no speed on its own CPUs, where throttling
// slows it everywhere, so in a set with "interference" the cpuset
// controller acts first and the interference controller throttles only
// once it has nothing left to try.
//
// Never worse than nothing: with eBPF attribution on (DelayedBy measured,
// MinAttributedDelay > 0), the cpuset and interference controllers judge
// each episode of corrections (from the first after calm) by its effect:
// EffectWindow after its start, and half of one after its latest step, the
// delay revocable containers cause guaranteed work must have fallen by at
// least MinEffect × the fraction of their CPU the episode took (CPUs, or
// cores of limit) (its effect), and guaranteed work's whole run-queue wait
// (Container.RunqWait; its run-queue p99 where the wait is not measured)
// over the last half window must have fallen by MinWaitGain (its cost
// repaid): the part attributed to revocable work can fall while the whole
// does not, when the waiting moves elsewhere (a server's threads crowd the
// CPUs left to them) or the violation was a passing one, and such a
// correction only costs best-effort work its CPU. A taking back of a CPU
// after a failed probe is judged the same way. The verdict waits until
// revocable work has used CPU (0.05 core, or half the interference floor
// where that is lower) in three quarters of that half window, and counts
// only the samples where it did: while it stands still (frozen, paused,
// between jobs) guaranteed work waits less whatever the correction did. It
// waits at most three EffectWindows after the episode began; then it is
// given on whatever samples revocable work ran in, and an episode in none
// of which it ran is undone, unjudged. An episode that fails
// either test is undone (best-effort work gets its CPU back) and the
// mechanism is not tried again for ProbeBackoff (doubling while it keeps
// failing, back to ProbeBackoff after ProbeBackoffMax of calm). When its effect failed, the interference controller kills
// instead the revocable container that delayed guaranteed work most, if
// any did: revocable work whose harm does not scale with its CPU (a cache
// or memory-bandwidth thrasher) is removed, not slowed for nothing. When
// only its cost did, nothing replaces it: neither a kill nor, after a
// confinement, throttling (which also takes revocable work's CPU) would
// shorten the waiting.
//
// "interference" (Interference) is a feedback controller on the revocable
// subtree's CPU limit, in the spirit of Heracles (a slack-driven
// controller that shrinks best-effort resources when the latency-critical
// task nears its target) and PARTIES (small step-wise adjustments, undo of
// a change that made things worse):
//
//   - Violation: a guaranteed or protected container has run-queue p99 above
//     RunqP99Enter or CPU PSI some avg10 above CPUPressureEnter, or
//     EventCount threshold events of at least EventLatency arrived within
//     EventWindow. Events make the first reaction as fast as the ring buffer:
//     no need to wait for the next percentile sample. Only evidence observed
//     after the controller's last change counts (Container.SampledAt, Event.Time).
//   - Attribution: when eBPF who-delayed-whom is available
//     (Container.DelayedBy is not nil), a guaranteed or protected container's
//     run-queue and PSI signals count, for violation and calm alike, only if
//     revocable containers delayed it at least MinAttributedDelay during
//     the interval and, where its total run-queue wait is known
//     (Container.RunqWait), at least MinAttributedShare (25%) of it; a
//     threshold event counts only if it names a revocable culprit that held
//     the CPU for that share of the wait. Work that suffers from itself or
//     from something outside Slackline is not the revocable tasks' doing,
//     and throttling them would not help: idle-priority best-effort work is
//     preempted within microseconds, which at 400 wakeups a second adds up
//     to a millisecond per interval while being a few percent of a server's
//     waiting (docs/colocation-study.md). MinAttributedDelay 0 (agent flag
//     --qos-min-attributed-delay 0) turns the check off; without eBPF every
//     signal counts.
//   - Calm: every p99 below RunqP99Exit, every PSI below CPUPressureExit,
//     and no event in the window. Between the Enter and Exit thresholds the
//     limit holds: noise near either threshold cannot make it flap.
//   - Decrease (multiplicative): on violation, limit = max(floor,
//     DecreaseFactor × current), where current is the applied limit, or
//     what revocable work uses, or the CPUs it may run on, if lower (a
//     limit above those would change nothing). The first decrease after a
//     calm spell is immediate; the next ones wait DecreaseInterval, long
//     enough to see the previous one's effect. Limits are enforced over
//     ThrottlePeriod (10 ms): with the kernel's 100 ms, best-effort work at
//     0.1 core runs 10 ms then waits 90 ms, and each period starts with a
//     burst.
//   - Increase (additive): after CalmPeriod of calm, the limit rises by one
//     step, max(IncreaseStepCores, IncreaseStepFraction × CPUs), every
//     IncreaseInterval; at the revocable containers' total allocation (or
//     the node's CPUs) the limit is removed.
//   - Probing: a violation within CalmPeriod of a raise is a failed probe:
//     the raise is undone instead of halving the limit. A level that caused a
//     violation is not exceeded for ProbeBackoff, which doubles after each
//     failed probe up to ProbeBackoffMax; this memory is dropped when the
//     guaranteed work's CPU use falls by more than one step (the load that
//     made the level bad has gone), when a probe above it holds for
//     CalmPeriod, and after a kill. Without it, additive increase and
//     multiplicative decrease saw-tooth through the knee forever
//     (TestBackoffPreventsOscillation).
//   - Kill: at the floor, max(FloorCores, FloorFraction × CPUs), once
//     violations have gone on for KillAfter (a calm sample restarts the
//     clock; the hold band does not), the controller kills one revocable
//     container, and at most one per KillCooldown after that. The victim is
//     the one that delayed guaranteed work most according to who-delayed-whom
//     (summed over guaranteed containers), then according to the culprits
//     of the threshold events in the window, then the newest, then the lowest
//     id: never random.
//
// "network" (Network) protects guaranteed traffic from revocable egress
// with AIMD on the revocable pace (agent/network paces it with HTB):
//
//   - Violation, only while revocable containers send: a guaranteed or
//     protected container's TCP round-trip p99 exceeds both RTTFactor ×
//     its baseline and baseline + RTTIncrease (the baseline is its least
//     interval p99 over one to two BaselineWindows: its own tail without a
//     queue; and only while the link carries RTTLinkFloor of a known
//     capacity: otherwise the queue is not the node's; in Persistence
//     consecutive samples: one is usually the host), or it retransmits more than RetransmitFraction of its packets,
//     or the managed interfaces' egress reaches SaturationEnter of the
//     capacity (the queue is about to form, at the NIC or at the next
//     hop). Only evidence observed after the last change counts.
//   - Decrease: pace = max(floor, DecreaseFactor × min(applied limit or
//     estimate, revocable egress)), at most every DecreaseInterval: the link
//     sample after a cut shows it, so several steps fit in one monitor
//     interval.
//   - Calm (round trips below halfway to their Enter threshold, losses
//     below half their threshold, egress below SaturationExit) for
//     CalmPeriod: the pace rises by IncreaseStepFraction of the capacity
//     every IncreaseInterval, and the limit goes at the estimate. In
//     between, it holds; it never kills.
//   - Plateau: for PlateauHold after a cut, raises stop at PlateauFraction
//     of the pace at which guaranteed traffic was delayed; a cut there
//     lowers the plateau. Plain AIMD climbed back to the delay every few
//     seconds, and each climb set the guaranteed task's p99.
//
// "memory" (Memory): memory cannot be throttled without pushing its holder
// into reclaim, so when MemAvailable falls below max(MinAvailableBytes,
// MinAvailableFraction × MemTotal) (the bytes at most ByteLineCap times
// the fraction's on a small node, as reclaim's lines: 115 MiB on 1.5 GiB),
// or a guaranteed or protected
// container's memory PSI full avg10 exceeds PressureFullEnter (some:
// PressureSomeEnter, off by default), it kills the largest revocable
// container (newest first among equals), one at a time: after KillCooldown
// for MemAvailable, which shows a kill's effect within a sample, and only if
// the memory of victims still being killed would not already suffice; after
// PressureCooldown for PSI, whose 10-second average needs that long.
//
// "reclaim" (MemoryReclaim, the default's memory controller): under node
// memory pressure (MemAvailable below max(512 MiB, 10%), the 512 MiB at most 15% of a small node; a guaranteed or
// protected container's memory.pressure some avg10 > 10% or full > 2%; the
// node's /proc/pressure/memory some > 40% or full > 10%, higher because it
// counts the stalls of the revocable work being reclaimed) it takes memory
// back in steps that cost revocable work less than a kill: Reclaim lowers
// the revocable subtree's memory.high below its usage by max(32 MiB, 10%)
// per second (never below 64 MiB), Freeze freezes the subtree after 10 s of
// pressure (at once when MemAvailable is critical, below max(256 MiB, 5%), the 256 MiB at most 7.5% of a small node,
// when memory.high is at its floor, or on cgroup v1, which has no
// memory.high), and Kill kills the newest revocable container 5 s after the
// episode's first freeze, then the next every 10 s: freezing frees nothing,
// so a thaw by someone else (an operator, a benchmark's slices) while the
// pressure lasts is answered by freezing again, without restarting that
// clock. After 10 s of calm (PSI below half its
// threshold, MemAvailable above its line by max(128 MiB, 2%)) Thaw, then Release
// raises memory.high a step per second until it would no longer bind.
// Guaranteed tasks carry memory.min (half their mem) and memory.low (all
// of it), so the kernel takes revocable memory first (agent/containerizer/
// cgroups/memory.go has the v1 equivalents).
//
// The reclaim and memory controllers are MemoryKeepers: KeepFree is the
// MemAvailable they need to stay calm (reclaim's low line plus its calm
// margin; memory's kill line), and the agent's memory slack estimate
// leaves that much free (estimator.NodeMemory), so that revocable work
// using all the memory it was offered does not drive the node under the
// line of a controller that would then take it back (#28).
//
// "diskio" (DiskIOController): where the node can cap the revocable
// subtree's disk I/O (Node.DiskIO: io.max, blkio.throttle), it is AIMD on
// the per-device cap. It halves the cap every DecreaseInterval while a
// guaranteed or protected container's fsync p99 over the last interval
// (eBPF, Container.SyncP99, over at least MinSyncs fsyncs) exceeds
// SyncP99Enter or SyncRatioEnter times its quiet fsync p99 (its p99 over
// intervals in which revocable work wrote nothing, a moving average, kept
// for at most 4,096 containers, those past it counted in
// QuietSyncsOverLimit; the relative threshold at least SyncP99Min; calm
// below 1.5 times it), or
// its own block requests' p99 (eBPF, Container.BlockP99,
// over at least MinBlockIOs) exceeds BlockP99Enter, or either p99 exceeds
// StallEnter however few completed (a stall lets too few complete to be
// counted; it sends the cap to the floor at once), or its io.pressure some avg10 exceeds SomeEnter (full:
// FullEnter), never twice on one sample, down to a floor that leaves
// revocable work its share: FloorFraction of the disk rate (the
// configured DiskBytesPerSecond, else the node's Node.DiskBytesPerSecond,
// else the highest rate the revocable subtree's I/O reached over an
// interval, at most the cap where capped, learned from
// Input.RevocableIOBytes), at least FloorBytesPerSecond. After CalmPeriod
// below half the thresholds it raises the cap by IncreaseFraction of the
// disk rate per IncreaseInterval, once revocable I/O used at least
// IncreaseUseFraction of the cap (a cap nothing tested is not raised),
// removing it at that rate (the first cap on a signal is the disk rate
// halved; StartBytesPerSecond where no rate is known). On a node whose
// guaranteed work does disk I/O (a guaranteed or protected container's
// fsyncs or block requests within GuardedIOWindow) revocable I/O starts
// capped before any signal, at GuardedStartFraction of the disk rate and
// at least the floor, as TCP's slow start does: a reaction comes after
// the harm, since what writers queued below the disk before it drains at
// the disk's rate with the guaranteed fsyncs behind it. There the rise
// stops at the disk rate instead of removing the cap, and a cap taken off
// from outside is put back at most once per DecreaseInterval.
// Every correction that leaves a cap on carries RequestKiB
// (Correction.IORequestKiB): the agent lowers the disk's largest request
// (queue/max_sectors_kb) to it, so that a guaranteed fsync waits behind one
// short revocable command rather than a long one; the Unthrottle that
// removes the cap carries 0 and the device's own size comes back.
// It never kills: capped writers wait.
//
// # Parameters and defaults
//
// DefaultConfig documents every default; Config.Validate rejects
// nonsense (Enter below Exit, factors outside (0, 1), a zero floor,
// non-positive durations) with errors wrapping ErrInvalidConfig.
//
//	interference  RunqP99Enter/Exit 1 ms / 500 µs   CPUPressureEnter/Exit 25 / 10 %
//	              EventLatency 1 ms, EventCount 5, EventWindow 250 ms
//	              MinAttributedDelay 1 ms, MinAttributedShare 0.25
//	              DecreaseFactor 0.5, DecreaseInterval 500 ms
//	              IncreaseStep max(0.1 cores, 5% of CPUs), CalmPeriod 3 s, IncreaseInterval 1 s
//	              ProbeBackoff 30 s (max 5 min)
//	              Floor max(0.1 cores, 2% of CPUs), KillAfter 5 s, KillCooldown 2 s
//	              ThrottlePeriod 10 ms, EffectWindow 2 s, MinEffect 0.3, MinWaitGain 0.1
//	cpuset        MinCPUs 1, Headroom 0 (off), ShrinkInterval 1 s, GrowAfter 5 s,
//	              GrowInterval 5 s, ProbeBackoff 30 s (max 5 min)
//	memory        MinAvailable max(256 MiB, 5% of MemTotal), the byte line at most ByteLineCap 1.5 x the fraction, PressureFullEnter 10 %,
//	              PressureSomeEnter off, KillCooldown 1 s, PressureCooldown 10 s
//	network       RTTFactor 2, RTTIncrease 1 ms, BaselineWindow 30 s, RTTLinkFloor 80 %, Persistence 2
//	              RetransmitFraction 1% (at least 3), SaturationEnter/Exit 95 / 85 %
//	              DecreaseFactor 0.7, DecreaseInterval 200 ms, MinRevocable 1 Mbit/s
//	              IncreaseStep 5% of capacity, CalmPeriod 2 s, IncreaseInterval 500 ms
//	              Floor 1% of capacity (at least 1 Mbit/s), Plateau 85% for 30 s
//	reclaim       LowAvailable max(512 MiB, 10%), Critical max(256 MiB, 5%), each byte line at most ByteLineCap 1.5 x its fraction
//	              (1.5 GiB node: 230 / 115 MiB; unchanged from 3.4 GiB up), Some/FullEnter 10 / 2 %,
//	              NodeSome/FullEnter 40 / 10 %, Step max(32 MiB, 10%) per 1 s, Floor 64 MiB,
//	              FreezeAfter 10 s, KillAfter 5 s, KillCooldown 10 s, CalmPeriod 10 s
//	diskio        SyncP99Enter 20 ms over MinSyncs 10, SyncRatioEnter 2 x quiet p99 (>= SyncP99Min 2 ms, SyncQuietWeight 0.25), BlockP99Enter 20 ms over MinBlockIOs 10, StallEnter 100 ms, Some/FullEnter 10 / 5 %, NodeFullEnter off, Start 256 MiB/s, DecreaseFactor 0.5 per 2 s,
//	              Floor 35% of the disk rate and >= 1 MiB/s, CalmPeriod 5 s, Increase 10% of the disk rate per 1 s once 50% of the cap is used, RequestKiB 32 while capped,
//	              GuardedStartFraction 35% of the disk rate (start capped where guaranteed work did disk I/O within GuardedIOWindow 5 min)
//	load          Threshold5Min, Threshold15Min: none (set at least one)
//	all           KillRetry 10 s
//
// With these, on an 8-CPU node, interference reaches the floor from a
// full 8-core subtree in about 3 s (8, 4, 2, 1, 0.5, 0.25, 0.16), may kill
// 5 s later, and climbs back from the floor to unlimited in CalmPeriod plus
// about 20 s.
//
// # State
//
// Controllers keep deterministic state between evaluations, documented on
// each type: timers (last change, calm since, at the floor since, last
// kill), the recent threshold events, the probe cap, the episode under
// judgement with the recent attributable delay, and the kills still being
// carried out. The same sequence of inputs always yields the same
// corrections. A controller is not safe for concurrent use, and Input.Now
// must not go backwards. Restarting the agent resets the state; the
// applied limit survives in the cgroup and comes back through
// Input.RevocableLimit.
//
// # Adding a controller
//
// Write a type with an Evaluate(Input) []Correction method (or a
// ControllerFunc) that reads only its Input and its own fields; put its
// parameters in a field of Config with defaults in DefaultConfig and checks
// in Validate; add one line to Registry; test it with tables and with the
// model plant in the tests (plant_test.go), and record a trace under
// testdata if its behaviour over time matters. Name the signal in Reason,
// set Signal, and never kill what Container.correctable would not.
package qos
