//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Scheduler: per-cgroup on-CPU time, wakeups, run-queue latency (the time a
// task spent runnable before it got a CPU, after a wakeup or a preemption) as
// a log2 histogram, and "who delayed whom": the part of a guaranteed or
// protected task's wait during which revocable tasks held its CPU, per
// victim and per culprit cgroup. Waits at or above latency_threshold_ns go to
// user space through the `events` ring buffer.

#include "common.h"
#include "headers/bpf_core_read.h"

// Per-CPU scheduler state, in a plain array indexed by CPU so that a wakeup
// on one CPU can read the revocable clock of the wakee's CPU. Only the owning
// CPU writes its slot (from sched_switch); padded to a cache line.
struct cpu_state {
	__u64 switch_ts;   // when the current task got this CPU
	__u64 cur_cgroup;  // tracked cgroup of the current task, 0 if untracked
	__u64 rev_ns;      // total time revocable tasks ran on this CPU
	__u64 last_rev;    // the last revocable cgroup that ran on this CPU
	__u32 cur_class;
	__u32 pad;
	__u64 pad2[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024); // set to the number of possible CPUs by user space
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

// A tracked task's current wait, if any.
struct task_wait {
	__u64 since;      // when it became runnable (0: not waiting)
	__u64 rev_clock;  // its CPU's revocable clock at that moment
	__u32 cpu;        // the CPU it was queued on
	__u32 flags;      // WAIT_WAKEUP: the wait began with a wakeup
};

#define WAIT_WAKEUP 1

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_wait);
} task_waits SEC(".maps");

struct delay_key {
	__u64 victim;   // guaranteed or protected cgroup
	__u64 culprit;  // revocable cgroup
};

// delays: (victim, culprit) -> ns the victim waited while the culprit ran.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct delay_key);
	__type(value, __u64);
} delays SEC(".maps");

// event is one wait at or above the threshold; must match bpf.rawEvent.
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

// Set by user space at run time; 0 disables events.
volatile __u64 latency_threshold_ns;
// Events the ring buffer had no room for.
__u64 events_lost;

// Timestamps come from the clock of the task's run queue (sched_clock, the
// clock of the scheduler's own statistics), which the scheduler has just
// updated when these tracepoints fire: three loads instead of a clock read,
// the costliest part of these programs on virtual machines. Kernels without
// group scheduling (no cfs_rq->rq) fall back to bpf_ktime_get_ns(). Events
// carry bpf_ktime_get_ns() (CLOCK_MONOTONIC) for user space.
static __always_inline __u64 task_rq_clock(struct task_struct *p)
{
	if (bpf_core_field_exists(p->se.cfs_rq->rq))
		return p->se.cfs_rq->rq->clock;
	return bpf_ktime_get_ns();
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

// rev_clock: cpu's revocable clock, including the running slice when the
// current task is revocable. Racy read of another CPU's slot: good enough.
static __always_inline __u64 rev_clock(struct cpu_state *cs, __u64 now)
{
	__u64 clock = cs->rev_ns;
	if (cs->cur_class == CLASS_REVOCABLE && cs->cur_cgroup && now > cs->switch_ts)
		clock += now - cs->switch_ts;
	return clock;
}

static __always_inline void start_wait(struct task_struct *p, __u32 class, __u32 cpu, __u64 now,
				       __u32 flags)
{
	struct task_wait *w = bpf_task_storage_get(&task_waits, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!w)
		return;
	w->since = now;
	w->cpu = cpu;
	w->flags = flags;
	w->rev_clock = 0;
	if (class != CLASS_REVOCABLE) {
		struct cpu_state *cs = bpf_map_lookup_elem(&cpu_states, &cpu);
		if (cs)
			w->rev_clock = rev_clock(cs, now);
	}
}

static __always_inline int on_wakeup(struct task_struct *p)
{
	__u64 cgroup = task_cgroup_id(p);
	__u32 *class = bpf_map_lookup_elem(&tracked, &cgroup);
	if (!class)
		return 0;
	// Counted in the cgroup's stats when the task gets its CPU, which
	// saves a lookup here.
	start_wait(p, *class, p->thread_info.cpu, task_rq_clock(p), WAIT_WAKEUP);
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

static __always_inline void add_delay(__u64 victim, __u64 culprit, __u64 ns)
{
	struct delay_key key = {.victim = victim, .culprit = culprit};
	__u64 *total = bpf_map_lookup_elem(&delays, &key);
	if (!total) {
		__u64 zero = 0;
		bpf_map_update_elem(&delays, &key, &zero, BPF_NOEXIST);
		total = bpf_map_lookup_elem(&delays, &key);
		if (!total)
			return;
	}
	__sync_fetch_and_add(total, ns);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct cpu_state *cs = bpf_map_lookup_elem(&cpu_states, &cpu);
	if (!cs)
		return 0;
	__u64 cgroup = task_cgroup_id(next);
	__u32 *classp = bpf_map_lookup_elem(&tracked, &cgroup);
	// The common case, neither task tracked, needs no clock.
	if (!classp && !cs->cur_cgroup)
		return 0;
	__u64 now = task_rq_clock(classp ? next : prev);

	// The task leaving the CPU (when it was tracked as it got it).
	if (cs->cur_cgroup) {
		__u64 ran = now > cs->switch_ts ? now - cs->switch_ts : 0;
		struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cs->cur_cgroup);
		if (s)
			s->oncpu_ns += ran;
		if (cs->cur_class == CLASS_REVOCABLE) {
			cs->rev_ns += ran;
			cs->last_rev = cs->cur_cgroup;
		}
		// Preempted, still runnable: it starts waiting again.
		if (preempt || prev_state == 0 /* TASK_RUNNING */)
			start_wait(prev, cs->cur_class, cpu, now, 0);
	}

	// The task getting the CPU.
	cs->switch_ts = now;
	if (!classp) {
		cs->cur_cgroup = 0;
		return 0;
	}
	__u32 class = *classp;
	cs->cur_cgroup = cgroup;
	cs->cur_class = class;

	struct task_wait *w = bpf_task_storage_get(&task_waits, next, 0, 0);
	if (!w || !w->since)
		return 0;
	__u64 latency = now > w->since ? now - w->since : 0;
	w->since = 0;

	struct cgroup_counters *s = bpf_map_lookup_elem(&cgroup_stats, &cgroup);
	if (!s)
		return 0;
	if (w->flags & WAIT_WAKEUP)
		s->wakeups++;
	__u32 bucket = log2_u64(latency);
	if (bucket >= RUNQ_BUCKETS)
		bucket = RUNQ_BUCKETS - 1;
	s->runq_hist[bucket]++;
	s->runq_count++;
	s->runq_sum_ns += latency;

	if (class == CLASS_REVOCABLE)
		return 0;

	// Who delayed whom: revocable run time on this CPU during the wait.
	// A task that moved CPUs while waiting is not attributed.
	__u64 delayed = 0, culprit = 0;
	if (w->cpu == cpu && cs->last_rev) {
		delayed = cs->rev_ns - w->rev_clock;
		if (delayed > latency)
			delayed = latency;
		if (delayed) {
			culprit = cs->last_rev;
			s->delayed_ns += delayed;
			add_delay(cgroup, culprit, delayed);
		}
	}

	__u64 threshold = latency_threshold_ns;
	if (!threshold || latency < threshold)
		return 0;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&events_lost, 1);
		return 0;
	}
	e->timestamp_ns = bpf_ktime_get_ns();
	e->cgroup = cgroup;
	e->culprit = culprit;
	e->latency_ns = latency;
	e->delayed_ns = delayed;
	e->cpu = cpu;
	e->pid = next->pid;
	e->class = class;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
