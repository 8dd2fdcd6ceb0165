//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Scheduler: per-cgroup on-CPU time, sleeps, run-queue latency (the time a
// task spent runnable before it got a CPU, after a wakeup or a preemption) as
// a log2 histogram, and "who delayed whom": the part of a guaranteed or
// protected task's wait during which revocable tasks held its CPU, per
// victim and per culprit cgroup. Waits at or above the threshold user space
// sets go to user space through the `events` ring buffer.
//
// Cost. sched_switch runs twice for every round trip of two tasks handing a
// CPU to each other, so its common paths touch little memory besides what
// the scheduler has just touched itself: one CPU's own state (cpu_state),
// which caches which cgroups are tracked and holds the counters of up to
// RESIDENT tracked cgroups per CPU, and the fields of the two tasks. Wait
// start times come from the kernel (sched_info.last_queued, stamped when a
// task is queued, with CONFIG_SCHED_INFO), so no wakeup hook is needed. The
// rest (cgroup_stats, tracked, the revocable history, events) is off the
// common paths. Kernels without sched_info get the second variant below:
// sched_switch_wakeups plus sched_wakeup and sched_wakeup_new, which stamp
// waits in task storage. User space loads one variant (bpf.Load and the
// sched_info probe).
//
// Missed switches. A kernel may change a CPU's task without running the
// sched_switch tracepoint: on a 6.18 guest, no probe (this program, ftrace)
// saw any switch away from the threads of one system service or from one
// CPU's idle task. The CPU's state then still described the task that got
// the CPU at the last switch seen, and the run of the task that did get it
// was charged to that one: a tracked task lost whole runs (0.5-8% of a
// spinning task's time). So the CPU's state remembers which task it
// describes (cur_task, stored at every switch), every switch checks that
// prev is that task, and when it is not, prev's run is taken from what the
// kernel recorded when it picked prev (missed_switch). The run of the task
// that left unseen is lost: on that guest, never a tracked one.
// On-CPU time is the kernel's own runtime (se.sum_exec_runtime, which
// cpu.stat and cpuacct.usage count), read as a task gets the CPU and as it
// leaves.
//
// Counters. A tracked cgroup's counters are the sum, over CPUs, of its entry
// in cgroup_stats and of a resident entry on that CPU, if any. A CPU makes a
// tracked cgroup resident when one of its tasks first gets the CPU and an
// entry is free; entries are freed only when their cgroup stops being
// tracked, so counts never move and user space can read them at any time.
// Each tracking of a cgroup has an epoch (tracked_cgroup.epoch) that tags
// its resident entries: user space reads an entry while its res_epoch is
// the epoch it gave the cgroup.

#include "common.h"
#include "headers/bpf_core_read.h"

#define TASK_RUNNING 0
#define TASK_DEAD 0x80

#define RESIDENT 4     // tracked cgroups whose counters a CPU keeps itself
#define UNTRACKED 4    // untracked cgroups a CPU remembers having seen
#define FILTER_SIZE 64 // a CPU's cache of `tracked`
#define REV_RUNS 16    // revocable runs a CPU remembers

// A CPU's knowledge of a cgroup, an "info": its class (bits 0-1, 0 when not
// tracked) and, when its counters are resident on this CPU, the index + 1
// of its resident entry (bits 2-4).
#define INFO_CLASS(info) ((info) & 3)
#define INFO_RESIDENT(info) ((info) >> 2)

// filter_entry caches `tracked` for one cgroup id, direct-mapped by id.
struct filter_entry {
	__u64 cgroup;
	__u32 gen;   // valid_gen when filled
	__u32 class; // 0: not tracked
	__u32 epoch;
	__u32 pad;
};

// A maximal run of revocable tasks on a CPU, [start, end) on its run-queue
// clock. The last REV_RUNS runs are kept: a wait is attributed exactly unless
// more than REV_RUNS separate revocable runs happened during it, and then
// only the last REV_RUNS count.
struct rev_run {
	__u64 start;
	__u64 end;
};

// cpu_state is one CPU's state, in an array indexed by CPU that user space
// maps (BPF_F_MMAPABLE): it writes gen and threshold, and reads resident
// counters. Only programs running on that CPU write the rest, and they do
// not nest (sched_switch and the wakeup tracepoints run with interrupts off
// under the run-queue lock). The first lines are what the common paths
// read; the size is a multiple of 64 so that CPUs share no cache line.
struct cpu_state {
	// Lines 0 and 1 (128 bytes, fetched together): what the common paths
	// read, and what user space sets.
	__u64 switch_ts;            // when the current task got this CPU
	__u64 cur_cgroup;           // its cgroup if tracked, else 0
	__u32 cur_info;             // its info (0: not tracked)
	__u32 gen;                  // user space: bumped after every change to `tracked`
	__u32 valid_gen;            // gen that what is cached here was checked against
	__u8 res_class[RESIDENT];   // class of each resident cgroup
	__u64 threshold;            // user space: wait that raises an event (0: none)
	__u64 newest_rev_end;       // end of the newest revocable run
	__u64 res_cgroup[RESIDENT]; // resident cgroups (0: free entry)
	__u64 untracked[UNTRACKED]; // untracked cgroups seen lately (0: none)
	__u32 all_culprits;         // user space: 1 attributes waits to every culprit
	__u32 pad1;
	__u64 cur_task;             // the task that got this CPU at the last switch seen
	// Line 2: the rest.
	__u32 res_epoch[RESIDENT];  // written last when claiming, first when freeing
	__u64 last_rev;             // the last revocable cgroup that ran on this CPU
	__u32 rev_newest;           // index of the newest entry of rev_runs
	__u32 next_untracked;       // where the next untracked cgroup goes
	__u64 cur_runtime;          // the current task's se.sum_exec_runtime when it got the CPU, if tracked
	__u64 pad2[3];
	struct resident {
		struct sched_counters c;
		__u64 pad[3]; // a whole number of cache lines
	} res[RESIDENT];
	struct rev_run rev_runs[REV_RUNS];
	struct filter_entry filter[FILTER_SIZE];
};

_Static_assert(sizeof(struct cpu_state) % 64 == 0, "cpu_state must fill whole cache lines");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1024); // set to the number of possible CPUs by user space
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

struct delay_key {
	__u64 victim;  // guaranteed or protected cgroup
	__u64 culprit; // revocable cgroup
};

// delays: (victim, culprit) -> ns the victim waited while the culprit ran,
// per CPU.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct delay_key);
	__type(value, __u64);
} delays SEC(".maps");

// event is one wait at or above the threshold (read by Monitor.Run).
struct event {
	__u64 timestamp_ns; // bpf_ktime_get_ns() (CLOCK_MONOTONIC) when the task got the CPU
	__u64 cgroup;
	__u64 culprit;      // revocable cgroup that ran during the wait, 0 if none
	__u64 latency_ns;
	__u64 delayed_ns;   // part of latency_ns the culprit held the CPU
	__u32 cpu;
	__u32 pid;
	__u32 class;
	__u32 pad;
};

// Makes the type visible in BTF for bpf2go's -type event.
const struct event *unused_event __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

// Events the ring buffer had no room for.
__u64 events_lost;

// Who delayed whom, every culprit (user space sets cpu_state.all_culprits): each CPU
// also keeps its last RUNS runs of any task, keyed by culprit, so that a
// guaranteed or protected task's wait is split among everything that held
// the CPU meanwhile: tracked cgroups (revocable or not) and untracked ones
// by cgroup id, kernel threads, the idle task (waking the CPU up took that
// long), and, for the part of a wait older than the runs kept, "unknown".
// It costs every context switch a clock read and a few stores, so it is
// off unless asked for.
#define CULPRIT_KERNEL 0xfffffffffffffff1ULL
#define CULPRIT_IDLE 0xfffffffffffffff2ULL
#define CULPRIT_UNKNOWN 0xfffffffffffffff3ULL
#define RUNS 32

struct culprit_run {
	__u64 start;
	__u64 end;
	__u64 culprit;
	__u32 class;
	__u32 pad;
};

struct culprit_state {
	__u64 cur;       // culprit of the task on the CPU (0: none seen yet)
	__u64 since;     // when it got the CPU
	__u32 cur_class; // its class, 0 when not tracked
	__u32 newest;    // index of the newest run
	__u64 pad[5];
	struct culprit_run runs[RUNS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024); // set to the number of possible CPUs by user space
	__type(key, __u32);
	__type(value, struct culprit_state);
} culprit_states SEC(".maps");

// Timestamps come from the clock of the task's run queue (sched_clock, the
// clock of the scheduler's own statistics, sched_info included), which the
// scheduler has just updated when these tracepoints fire: three loads
// instead of a clock read. Kernels without group scheduling (no cfs_rq->rq)
// fall back to bpf_ktime_get_ns(); they only run the wakeup variant, whose
// timestamps all come from here. Events carry bpf_ktime_get_ns()
// (CLOCK_MONOTONIC) for user space.
static __always_inline __u64 task_rq_clock(struct task_struct *p)
{
	if (bpf_core_field_exists(p->se.cfs_rq->rq))
		return p->se.cfs_rq->rq->clock;
	return bpf_ktime_get_ns();
}

// runq_bucket is the histogram bucket of a wait: floor(log2(ns)), 0 for 0,
// at most RUNQ_BUCKETS - 1.
static __always_inline __u32 runq_bucket(__u64 v)
{
	if (v >> (RUNQ_BUCKETS - 1))
		return RUNQ_BUCKETS - 1;
	__u32 r = 0;
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	return r + (v >> 1);
}

static __always_inline struct cpu_state *this_cpu_state(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&cpu_states, &cpu);
}

// (Functions off the common paths are not inlined, which keeps the common
// paths short.)

// cgroup_info_slow answers cgroup_info from the filter, else from `tracked`,
// remembers untracked cgroups and, when claim is set, gives a tracked one a
// free resident entry.
static __noinline __u32 cgroup_info_slow(struct cpu_state *cs, __u64 cgroup, bool claim)
{
	struct filter_entry *e = &cs->filter[cgroup & (FILTER_SIZE - 1)];
	if (e->cgroup != cgroup || e->gen != cs->valid_gen) {
		struct tracked_cgroup *t = bpf_map_lookup_elem(&tracked, &cgroup);
		e->cgroup = cgroup;
		e->gen = cs->valid_gen;
		e->class = t ? t->class & 3 : 0;
		e->epoch = t ? t->epoch : 0;
	}
	__u32 class = e->class;
	if (!class) {
		cs->untracked[cs->next_untracked++ & (UNTRACKED - 1)] = cgroup;
		return 0;
	}
	if (!claim)
		return class;
#pragma unroll
	for (int i = 0; i < RESIDENT; i++) {
		if (cs->res_cgroup[i])
			continue;
		__builtin_memset(&cs->res[i].c, 0, sizeof(cs->res[i].c));
		cs->res_cgroup[i] = cgroup;
		cs->res_class[i] = class;
		// Publish last, with a barrier: user space trusts the counters
		// of an entry whose epoch it knows.
		__sync_lock_test_and_set(&cs->res_epoch[i], e->epoch);
		return class | (i + 1) << 2;
	}
	return class;
}

// cgroup_info returns what this CPU knows of the cgroup (see INFO_*).
static __always_inline __u32 cgroup_info(struct cpu_state *cs, __u64 cgroup, bool claim)
{
	if (cgroup == cs->res_cgroup[0])
		return cs->res_class[0] | 1 << 2;
	if (cgroup == cs->res_cgroup[1])
		return cs->res_class[1] | 2 << 2;
	if (cgroup == cs->res_cgroup[2])
		return cs->res_class[2] | 3 << 2;
	if (cgroup == cs->res_cgroup[3])
		return cs->res_class[3] | 4 << 2;
	if (cgroup == cs->untracked[0] || cgroup == cs->untracked[1] || cgroup == cs->untracked[2] ||
	    cgroup == cs->untracked[3])
		return 0;
	return cgroup_info_slow(cs, cgroup, claim);
}

// revalidate brings what this CPU caches up to date after user space changed
// the tracked set: resident entries of cgroups no longer tracked (or tracked
// anew) are freed, the others take their possibly new class.
static __noinline void revalidate(struct cpu_state *cs)
{
	__u32 gen = cs->gen;
#pragma unroll
	for (int i = 0; i < RESIDENT; i++) {
		__u64 cgroup = cs->res_cgroup[i];
		if (!cgroup)
			continue;
		struct tracked_cgroup *t = bpf_map_lookup_elem(&tracked, &cgroup);
		if (t && t->epoch == cs->res_epoch[i]) {
			cs->res_class[i] = t->class & 3;
			continue;
		}
		cs->res_epoch[i] = 0; // unpublish first
		cs->res_cgroup[i] = 0;
	}
#pragma unroll
	for (int i = 0; i < UNTRACKED; i++)
		cs->untracked[i] = 0;
	cs->valid_gen = gen;
	if (cs->cur_cgroup) {
		cs->cur_info = cgroup_info(cs, cs->cur_cgroup, false);
		if (!cs->cur_info)
			cs->cur_cgroup = 0;
	}
}

// resident returns the counters this CPU keeps for a tracked cgroup, NULL
// when they are in cgroup_stats.
static __always_inline struct sched_counters *resident(struct cpu_state *cs, __u32 info)
{
	switch (INFO_RESIDENT(info)) {
	case 1:
		return &cs->res[0].c;
	case 2:
		return &cs->res[1].c;
	case 3:
		return &cs->res[2].c;
	case 4:
		return &cs->res[3].c;
	}
	return 0;
}

static __always_inline void count_ran(struct sched_counters *c, __u64 ran, bool sleeps)
{
	c->oncpu_ns += ran;
	c->sleeps += sleeps;
}

// count_ran_stats is count_ran for a cgroup not resident on this CPU.
static __noinline void count_ran_stats(__u64 cgroup, __u64 ran, bool sleeps)
{
	struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cgroup);
	if (s) {
		count_ran(&s->sched, ran, sleeps);
		mark_changed(cgroup);
	}
}

// record_revocable notes that the current task, revocable, ran from
// cs->switch_ts to now: it extends the newest revocable run when this slice
// continues it, else starts a new one.
static __noinline void record_revocable(struct cpu_state *cs, __u64 now)
{
	__u32 newest = cs->rev_newest & (REV_RUNS - 1);
	struct rev_run *r = &cs->rev_runs[newest];
	if (r->end != cs->switch_ts || !r->end) {
		newest = (newest + 1) & (REV_RUNS - 1);
		cs->rev_newest = newest;
		r = &cs->rev_runs[newest];
		r->start = cs->switch_ts;
	}
	r->end = now;
	cs->newest_rev_end = now;
	cs->last_rev = cs->cur_cgroup;
}

// revocable_during returns how long revocable tasks ran on this CPU since
// `since`: the overlap of [since, now) with the recorded runs.
static __always_inline __u64 revocable_during(struct cpu_state *cs, __u64 since)
{
	__u64 total = 0;
	__u32 newest = cs->rev_newest;
	for (int i = 0; i < REV_RUNS; i++) {
		struct rev_run *r = &cs->rev_runs[(newest - i) & (REV_RUNS - 1)];
		if (r->end <= since)
			break;
		// The run that began before `since` ends the walk. Written
		// without a max() whose two paths would rejoin: newer verifiers
		// (6.2 on) keep both paths' states through the rest of the loop,
		// and the 16 iterations cost 6x the instructions to verify that
		// 6.1 spent (docs/vm.md, "Why eBPF loads were slow on 6.12").
		if (r->start <= since) {
			total += r->end - since;
			break;
		}
		total += r->end - r->start;
	}
	return total;
}

static __always_inline void add_delay(__u64 victim, __u64 culprit, __u64 ns)
{
	struct delay_key key = {.victim = victim, .culprit = culprit};
	__u64 *total = bpf_map_lookup_elem(&delays, &key);
	if (total) {
		*total += ns;
		return;
	}
	bpf_map_update_elem(&delays, &key, &ns, BPF_NOEXIST);
}

// attribute_wait handles a guaranteed or protected task's wait that
// overlapped revocable runs on this CPU or reached the event threshold: the
// task is cs's current one, counted in c; revocable runs since `since` (this
// CPU's clock) delayed it.
static __noinline void attribute_wait(struct cpu_state *cs, struct sched_counters *c,
				      struct task_struct *next, __u64 since, __u64 latency)
{
	// Who delayed whom: revocable run time on this CPU during the wait.
	__u64 delayed = 0, culprit = 0;
	if (cs->last_rev) {
		delayed = revocable_during(cs, since);
		if (delayed > latency)
			delayed = latency;
		if (delayed) {
			culprit = cs->last_rev;
			c->delayed_ns += delayed;
			add_delay(cs->cur_cgroup, culprit, delayed);
		}
	}

	__u64 threshold = cs->threshold;
	if (!threshold || latency < threshold)
		return;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&events_lost, 1);
		return;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->cgroup = cs->cur_cgroup;
	e->culprit = culprit;
	e->latency_ns = latency;
	e->delayed_ns = delayed;
	e->cpu = bpf_get_smp_processor_id();
	e->pid = next->pid;
	e->class = INFO_CLASS(cs->cur_info);
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

// record_culprit ends the run of the task leaving the CPU (extending the
// newest run when the same culprit ran on) and starts the next task's.
static __noinline void record_culprit(struct task_struct *next, __u64 cgroup, __u32 info, __u64 now)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct culprit_state *st = bpf_map_lookup_elem(&culprit_states, &cpu);
	if (!st)
		return;
	if (st->cur) {
		struct culprit_run *r = &st->runs[st->newest & (RUNS - 1)];
		if (r->culprit != st->cur || r->end != st->since) {
			st->newest = (st->newest + 1) & (RUNS - 1);
			r = &st->runs[st->newest & (RUNS - 1)];
			r->start = st->since;
			r->culprit = st->cur;
			r->class = st->cur_class;
		}
		r->end = now;
	}
	__u64 culprit = cgroup;
	if (next->pid == 0)
		culprit = CULPRIT_IDLE;
	else if (next->flags & 0x00200000 /* PF_KTHREAD */)
		culprit = CULPRIT_KERNEL;
	st->cur = culprit;
	st->cur_class = INFO_CLASS(info);
	st->since = now;
}

// attribute_all splits the wait of the task getting this CPU (cs's current
// one, guaranteed or protected), from `since` to now (cs->switch_ts), among
// the culprits of the runs this CPU kept; the part no run covers is
// "unknown". Revocable culprits also count in c's delayed_ns and name the
// threshold event's culprit.
static __noinline void attribute_all(struct cpu_state *cs, struct sched_counters *c, struct task_struct *next,
				     __u64 since, __u64 latency)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct culprit_state *st = bpf_map_lookup_elem(&culprit_states, &cpu);
	if (!st)
		return;
	__u64 victim = cs->cur_cgroup;
	__u64 until = cs->switch_ts;
	__u64 span = until - since;
	__u64 covered = 0, revocable = 0, top_rev = 0, top_rev_ns = 0;
	__u32 newest = st->newest;
	for (int i = 0; i < RUNS; i++) {
		struct culprit_run *r = &st->runs[(newest - i) & (RUNS - 1)];
		if (r->end <= since || !r->culprit)
			break;
		__u64 start = r->start > since ? r->start : since;
		__u64 end = r->end < until ? r->end : until;
		if (end > start) {
			__u64 d = end - start;
			covered += d;
			if (r->class == CLASS_REVOCABLE) {
				revocable += d;
				if (d > top_rev_ns) {
					top_rev = r->culprit;
					top_rev_ns = d;
				}
			}
			add_delay(victim, r->culprit, d);
		}
		if (r->start <= since)
			break;
	}
	if (span > covered)
		add_delay(victim, CULPRIT_UNKNOWN, span - covered);
	c->delayed_ns += revocable;

	__u64 threshold = cs->threshold;
	if (!threshold || latency < threshold)
		return;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&events_lost, 1);
		return;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->cgroup = victim;
	e->culprit = top_rev;
	e->latency_ns = latency;
	e->delayed_ns = revocable;
	e->cpu = cpu;
	e->pid = next->pid;
	e->class = INFO_CLASS(cs->cur_info);
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

// count_wait counts a wait of `latency` ns that ended on this CPU for the
// current task (tracked, counted in c); revocable runs on this CPU are
// attributed to it from `attr_since` on (this CPU's clock).
static __always_inline void count_wait(struct cpu_state *cs, struct sched_counters *c,
				       struct task_struct *next, __u64 attr_since, __u64 latency)
{
	c->runq_hist[runq_bucket(latency) & (RUNQ_BUCKETS - 1)]++;
	c->runq_count++;
	c->runq_sum_ns += latency;
	if (INFO_CLASS(cs->cur_info) == CLASS_REVOCABLE)
		return;
	if (cs->all_culprits) {
		if (latency && cs->switch_ts > attr_since)
			attribute_all(cs, c, next, attr_since, latency);
		return;
	}
	__u64 threshold = cs->threshold;
	if (cs->newest_rev_end > attr_since || (threshold && latency >= threshold))
		attribute_wait(cs, c, next, attr_since, latency);
}

// count_wait_stats is count_wait for a cgroup not resident on this CPU.
static __noinline void count_wait_stats(struct cpu_state *cs, struct task_struct *next, __u64 attr_since,
					__u64 latency)
{
	__u64 cgroup = cs->cur_cgroup;
	struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cgroup);
	if (s) {
		count_wait(cs, &s->sched, next, attr_since, latency);
		mark_changed(cgroup);
	}
}

// end_wait counts the wait of the tracked task getting the CPU (cs's
// current one), runnable since `since`; revocable runs on this CPU are
// attributed to it from `attr_since` on (this CPU's clock).
static __always_inline void end_wait(struct cpu_state *cs, struct task_struct *next, __u32 info,
				     __u64 since, __u64 attr_since, __u64 now)
{
	__u64 latency = now - since;
	if ((__s64)latency < 0)
		latency = 0;
	struct sched_counters *c = resident(cs, info);
	if (c)
		count_wait(cs, c, next, attr_since, latency);
	else
		count_wait_stats(cs, next, attr_since, latency);
}

// The wakeup variant's record of a tracked task's current wait.
struct task_wait {
	__u64 since; // when it became runnable (0: not waiting)
	__u32 cpu;   // the CPU it was queued on
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_wait);
} task_waits SEC(".maps");

static __always_inline void start_wait(struct task_struct *p, __u32 cpu, __u64 now)
{
	struct task_wait *w = bpf_task_storage_get(&task_waits, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (w) {
		w->since = now;
		w->cpu = cpu;
	}
}

// missed_switch makes cs describe prev, which got this CPU through switches
// sched_switch did not see (see "Missed switches"), and returns its info.
// The task cs described left at an unknown time: its run is lost. prev's
// run began when the kernel last picked it, which fair tasks record in
// runtime (se.prev_sum_exec_runtime: their runtime then) and, with
// sched_info, every task in run-queue clock (sched_info.last_arrival); it
// began after the last switch seen, which bounds it.
static __noinline __u32 missed_switch(struct cpu_state *cs, struct task_struct *prev)
{
	__u64 cgroup = task_cgroup_id(prev);
	__u32 info = cgroup_info(cs, cgroup, true);
	__u64 now = task_rq_clock(prev);
	__u64 runtime = prev->se.sum_exec_runtime;
	__u64 ran = 0;
	if (prev->prio >= 100 /* MAX_RT_PRIO: neither real-time nor deadline */) {
		ran = runtime - prev->se.prev_sum_exec_runtime;
	} else if (bpf_core_field_exists(prev->sched_info.last_arrival)) {
		__u64 arrival = prev->sched_info.last_arrival;
		if (arrival) // 0: the kernel does not keep sched_info
			ran = now - arrival;
	}
	__u64 since_seen = now - cs->switch_ts;
	if ((__s64)ran < 0)
		ran = 0;
	if ((__s64)since_seen >= 0 && ran > since_seen)
		ran = since_seen;
	cs->switch_ts = now - ran; // an estimate, for the revocable runs
	cs->cur_runtime = runtime - ran;
	cs->cur_cgroup = info ? cgroup : 0;
	cs->cur_info = info;
	return info;
}

// on_switch is sched_switch; kernel_waits selects the variant (a constant).
static __always_inline int on_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
				     unsigned int prev_state, const bool kernel_waits)
{
	struct cpu_state *cs = this_cpu_state();
	if (!cs)
		return 0;
	if (cs->gen != cs->valid_gen)
		revalidate(cs);
	// prev is the task that got the CPU at the last switch seen, unless
	// one was missed (0: none seen yet since loading).
	__u64 seen = cs->cur_task;
	cs->cur_task = (__u64)next;
	__u32 prev_info = cs->cur_info;
	if (seen != (__u64)prev && seen)
		prev_info = missed_switch(cs, prev);
	__u64 cgroup = task_cgroup_id(next);
	__u32 info = cgroup_info(cs, cgroup, true);
	if (cs->all_culprits) {
		__u64 now = task_rq_clock(prev);
		record_culprit(next, cgroup, info, now);
		if (!info && !prev_info)
			return 0;
	}
	// The common case on a host, neither task tracked, ends here.
	if (!info && !prev_info)
		return 0;
	__u64 now = task_rq_clock(info ? next : prev);

	// The task leaving the CPU, as it was tracked when it got it.
	if (prev_info) {
		__u64 ran = prev->se.sum_exec_runtime - cs->cur_runtime;
		if ((__s64)ran < 0)
			ran = 0;
		bool sleeps = !preempt && prev_state != TASK_RUNNING && !(prev_state & TASK_DEAD);
		struct sched_counters *c = resident(cs, prev_info);
		if (c)
			count_ran(c, ran, sleeps);
		else
			count_ran_stats(cs->cur_cgroup, ran, sleeps);
		if (INFO_CLASS(prev_info) == CLASS_REVOCABLE)
			record_revocable(cs, now);
		// Preempted, still runnable: the wakeup variant starts its wait
		// (the kernel stamps sched_info.last_queued itself).
		if (!kernel_waits && !sleeps && !(prev_state & TASK_DEAD))
			start_wait(prev, bpf_get_smp_processor_id(), now);
	}

	// The task getting the CPU.
	cs->switch_ts = now;
	cs->cur_cgroup = info ? cgroup : 0;
	cs->cur_info = info;
	if (!info)
		return 0;
	cs->cur_runtime = next->se.sum_exec_runtime;

	if (kernel_waits) {
		// Stamped by the kernel when the task was queued on this CPU's
		// run queue (wakeup, new task, preemption, or migration: a
		// migrated task's wait restarts on its new CPU).
		__u64 queued = next->sched_info.last_queued;
		if (queued)
			end_wait(cs, next, info, queued, queued, now);
		return 0;
	}
	struct task_wait *w = bpf_task_storage_get(&task_waits, next, 0, 0);
	if (!w || !w->since)
		return 0;
	__u64 since = w->since;
	w->since = 0;
	// A wait that began on another CPU is counted but not attributed.
	end_wait(cs, next, info, since, w->cpu == bpf_get_smp_processor_id() ? since : now, now);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return on_switch(preempt, prev, next, prev_state, true);
}

// The wakeup variant, for kernels without sched_info.

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_wakeups, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return on_switch(preempt, prev, next, prev_state, false);
}

static __always_inline int on_wakeup(struct task_struct *p)
{
	struct cpu_state *cs = this_cpu_state();
	if (!cs)
		return 0;
	if (cs->gen != cs->valid_gen)
		revalidate(cs);
	if (!cgroup_info(cs, task_cgroup_id(p), false))
		return 0;
	start_wait(p, p->thread_info.cpu, task_rq_clock(p));
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new, struct task_struct *p)
{
	return on_wakeup(p);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
