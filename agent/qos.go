package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/bpf"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

// maxCorrections bounds the corrections kept for GetCorrections.
const maxCorrections = 1000

// qosLoop evaluates the QoS controllers periodically and as soon as the
// eBPF ring buffer reports a guaranteed task waiting too long, at most once
// per interval, and applies their corrections at once. Following the
// monitor, the periodic evaluations are made on the monitor's goroutine
// at the end of its passes (sampleTaken), the others on Run's; evalMu
// serialises them and guards what an evaluation touches. corrections
// (read by the NodeService) are guarded by mu.
type qosLoop struct {
	log         *slog.Logger
	controller  qos.Controller
	intervalMin time.Duration
	cpus        float64
	bandwidth   float64 // the node's, Mbit/s; 0 unknown
	cz          Containerizer
	running     containerList    // cz's containers, kept while unchanged
	monitor     *monitor.Monitor // nil without a monitor
	ebpf        EBPF             // nil without eBPF
	network     *network.Network // nil without network QoS
	watch       *observer
	protect     []string
	// preempt kills a revocable container with a reason.
	preempt func(containerID, reason string)
	// shadows evaluate the candidate controllers on the same input, after
	// the active ones' corrections are applied (nil without shadows).
	shadows *shadowSet
	// rollout runs a profile rollout's shadow controllers likewise.
	rollout *rolloutShadow
	// follows is set when the monitor's observer calls sampleTaken after
	// each pass: see qosSchedule.
	follows bool
	// nextEval is qosSchedule.next of the schedule, as time since epoch
	// (0: no evaluation yet): sampleTaken takes evalMu only for the
	// passes that evaluate.
	nextEval atomic.Int64
	epoch    time.Time

	// evalMu serialises the evaluations (the monitor's goroutine makes
	// the periodic ones, #29: a wake-up of Run's goroutine for each cost
	// the runtime a thread's wake-up and sleep) and guards the schedule,
	// the pending events, the timer, the controllers and what the
	// evaluations keep below (delayed to statsRead). timer is Run's (nil
	// while Run is not running: then no evaluation is made), due when it
	// is armed to fire.
	evalMu  sync.Mutex
	sched   qosSchedule
	timer   *time.Timer
	due     time.Time
	pending []qos.Event

	// delayed holds each victim container's cumulative who-delayed-whom
	// counters (culprit cgroup -> time), to turn them into deltas.
	delayed map[string]map[uint64]time.Duration
	// waited holds each victim's cumulative run-queue wait, likewise.
	waited map[string]time.Duration
	// allDelays is every victim's cumulative delays, read once per
	// evaluation when the eBPF programs can (allDelayer); allDelaysErr the
	// error of that read.
	allDelays    map[uint64]map[uint64]time.Duration
	allDelaysErr error
	batched      bool
	// allStats is every tracked cgroup's counters, read at most once per
	// evaluation when the eBPF programs can (allReader, statsBatched)
	// instead of one lookup per guaranteed container, and only when a
	// victim's latest monitor sample lacks its run-queue total.
	allStats     map[uint64]bpf.CgroupStats
	statsBatched bool
	// statsRead is set once allStats was read in this evaluation: only
	// for victims whose latest sample has no eBPF figures.
	statsRead bool

	correctionsTotal *prometheus.CounterVec
	reaction         prometheus.Histogram
	// limits counts the bounds of the controllers and of the polled
	// cgroup files reached (countLimits, after each evaluation).
	limits *limitHits

	mu          sync.Mutex
	corrections []*slacklinev1.Correction // the latest maxCorrections

	// next is a controller set a node profile applied (#29), taken by
	// Run's next evaluation; guaranteedRunqP99 is the highest guaranteed
	// (or protected) run-queue p99 of the latest evaluation, for the
	// heartbeats' ProfileReport.
	next              atomic.Pointer[profileSettings]
	guaranteedRunqP99 atomic.Int64

	// quietMax is Config.QuietDeferMax (qosSchedule.quiet); deferred
	// counts the evaluations quiet passes deferred (each once, however
	// many passes it waited).
	quietMax time.Duration
	deferred atomic.Uint64
}

func newQoSLoop(cfg Config, total resources.Resources, watch *observer, preempt func(containerID, reason string), net *network.Network) *qosLoop {
	l := &qosLoop{
		log: cfg.Logger, controller: cfg.QoS, intervalMin: cfg.QoSIntervalMin, quietMax: cfg.QuietDeferMax, cpus: total.CPUs(), bandwidth: total.Bandwidth(),
		cz: cfg.Containerizer, running: containerList{cz: cfg.Containerizer}, monitor: cfg.Monitor, ebpf: cfg.EBPF, network: net, watch: watch, protect: cfg.ProtectCgroups, preempt: preempt,
		delayed: map[string]map[uint64]time.Duration{}, waited: map[string]time.Duration{}, epoch: time.Now(),
		correctionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slackline_qos_corrections_total",
			Help: "QoS corrections applied, by kind (throttle, unthrottle, kill) and reason (the controller that asked).",
		}, []string{"kind", "reason"}),
		reaction: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slackline_qos_reaction_seconds",
			Help:    "Time from the signal that triggered a QoS correction being observed to the cgroup being written.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		limits: newLimitHits(cfg.Logger),
	}
	// Every (kind, controller) series exists from the start, at 0, so that
	// rates, increases and the kill alert have data before a correction.
	for _, name := range cfg.QoSControllerNames {
		for k := qos.Kind(1); !strings.HasPrefix(k.String(), "kind("); k++ {
			l.correctionsTotal.WithLabelValues(k.String(), name)
		}
	}
	return l
}

// eventsReady is an EBPF whose events are known only once it is loaded
// (lateEBPF): Events is asked once EventsReady is closed.
type eventsReady interface{ EventsReady() <-chan struct{} }

// polledFileOverflows is implemented by a containerizer that keeps polled
// cgroup files open under a bound (*containerizer.Containerizer).
type polledFileOverflows interface{ PolledFileOverflows() uint64 }

// countLimits counts the bounds reached by the controllers' latest
// evaluation and by the containerizer's polled files (the evaluation's
// input read them).
func (l *qosLoop) countLimits() {
	l.limits.observe(limitQuietSyncs, qos.QuietSyncsOverLimit(l.controller),
		"disk I/O QoS: more guaranteed containers than its quiet fsync p99 table keeps; those past it are judged by the absolute threshold only")
	if p, ok := l.cz.(polledFileOverflows); ok {
		l.limits.observe(limitOpenFiles, p.PolledFileOverflows(),
			"more polled cgroup files than the containerizer keeps open; the rest are opened at every read")
	}
}

// sampleTaken is the end of a monitor pass (the monitor's observer calls
// it on the monitor's goroutine): a pass that the schedule says
// evaluates makes the evaluation right there, so that it costs no
// wake-up of Run's goroutine (#29). Nothing is evaluated while Run is not
// running.
func (l *qosLoop) sampleTaken() {
	if next := l.nextEval.Load(); next != 0 && int64(time.Since(l.epoch)) < next {
		return // not due: this pass does not evaluate (qosSchedule.sampled)
	}
	l.evalMu.Lock()
	defer l.evalMu.Unlock()
	if l.timer == nil {
		return
	}
	now := time.Now()
	quiet := l.monitor != nil && len(l.pending) == 0 && l.next.Load() == nil && settled(l.monitor, now)
	deferring := l.sched.deferring
	switch {
	case l.sched.sampled(now, quiet):
		l.evaluateLocked(now)
	case l.sched.deferring && !deferring:
		l.deferred.Add(1)
		l.arm(now, false) // the stalled monitor's grace, after the deferral
	}
}

// deferredCounter exports the evaluations quiet passes deferred.
func (l *qosLoop) deferredCounter() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "slackline_qos_evaluations_deferred_total",
		Help: "QoS evaluations that waited because the monitor's passes changed nothing (--quiet-defer-max): made at the first pass that changes something, or at the deferral's end.",
	}, func() float64 { return float64(l.deferred.Load()) })
}

// Run evaluates until ctx ends, when qosSchedule says: on threshold
// events, and on its timer (without a monitor to follow, or when the
// monitor stalls); the monitor's passes make the others (sampleTaken).
func (l *qosLoop) Run(ctx context.Context) error {
	period := max(l.intervalMin, 10*time.Millisecond)
	l.evalMu.Lock()
	l.sched = qosSchedule{min: period, quiet: l.quietMax}
	if l.monitor != nil && l.follows && l.monitor.Interval() <= period {
		l.sched.follow, l.sched.sample = true, l.monitor.Interval()
	}
	timer := time.NewTimer(time.Hour)
	l.timer = timer
	l.arm(time.Now(), false)
	l.evalMu.Unlock()
	defer func() {
		l.evalMu.Lock()
		l.timer = nil
		l.evalMu.Unlock()
		timer.Stop()
	}()
	var events <-chan bpf.ThresholdEvent
	var ready <-chan struct{} // closed when events are to be asked for
	if r, ok := l.ebpf.(eventsReady); ok {
		ready = r.EventsReady()
	} else if l.ebpf != nil {
		events = l.ebpf.Events()
	}
	var arrived []qos.Event
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ready:
			events, ready = l.ebpf.Events(), nil
		case <-timer.C:
			l.evalMu.Lock()
			// A pass may have evaluated and armed the timer anew while
			// this fire waited for the lock.
			if now := time.Now(); now.Before(l.due) {
				timer.Reset(l.due.Sub(now))
			} else {
				l.evaluateLocked(now)
			}
			l.evalMu.Unlock()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			arrived = append(arrived[:0], l.event(ev))
		drain:
			for {
				select {
				case ev, ok := <-events:
					if !ok {
						events = nil
						break drain
					}
					arrived = append(arrived, l.event(ev))
				default:
					break drain
				}
			}
			l.evalMu.Lock()
			l.pending = append(l.pending, arrived...)
			if now := time.Now(); l.sched.events(now) {
				l.evaluateLocked(now)
			} else {
				l.arm(now, true) // evaluated then, or at an earlier pass
			}
			l.evalMu.Unlock()
		}
	}
}

// arm sets Run's timer for the schedule's wait after now (pending: events
// wait for it). l.evalMu is held.
func (l *qosLoop) arm(now time.Time, pending bool) {
	d := l.sched.wait(now, pending)
	l.due = now.Add(d)
	l.timer.Reset(d)
}

// evaluateLocked makes one evaluation at now, with the events pending:
// the controllers' corrections are applied, then the shadows run on the
// same input, and Run's timer is armed for the next. l.evalMu is held.
func (l *qosLoop) evaluateLocked(now time.Time) {
	l.sched.evaluated(now)
	if l.sched.follow {
		l.nextEval.Store(int64(max(l.sched.next().Sub(l.epoch), 1)))
	}
	in := l.input(now)
	in.Events = l.pending
	// A profile's controllers are fresh instances: they take over only
	// while the revocable subtree is not frozen, since a reclaim
	// controller thaws only a freeze it made itself.
	if !in.RevocableFrozen {
		if s := l.next.Swap(nil); s != nil {
			l.controller = s.qos
			l.limits.reset(limitQuietSyncs) // fresh controllers count from 0
		}
	}
	l.guaranteedRunqP99.Store(int64(guaranteedRunqP99(in.Containers)))
	corrections := l.controller.Evaluate(in)
	l.countLimits()
	for _, c := range corrections {
		l.apply(c, in)
	}
	l.shadows.evaluate(in, corrections)
	l.rollout.evaluate(in)
	l.pending = l.pending[:0]
	l.arm(time.Now(), false)
}

// guaranteedRunqP99 is the highest run-queue p99 of the work QoS
// protects (guaranteed containers and protected services).
func guaranteedRunqP99(containers []qos.Container) time.Duration {
	var p99 time.Duration
	for _, c := range containers {
		if !c.Revocable || c.Protected {
			p99 = max(p99, c.RunqP99)
		}
	}
	return p99
}

func (l *qosLoop) event(ev bpf.ThresholdEvent) qos.Event {
	victim, _ := l.watch.container(ev.Cgroup)
	culprit, _ := l.watch.container(ev.Culprit)
	return qos.Event{Time: ev.Time, Container: victim, Culprit: culprit, Latency: ev.Latency, Delayed: ev.Delayed}
}

func (l *qosLoop) input(now time.Time) qos.Input {
	in := qos.Input{Now: now, Node: qos.Node{CPUs: l.cpus, LinkCapacity: l.bandwidth}}
	if limit, err := l.cz.RevocableCPULimit(); err == nil {
		in.RevocableLimit = limit
	}
	if cpus, err := l.cz.RevocableCPUs(); err == nil {
		in.RevocableCPUs, in.Node.CPUList = cpus, l.cz.CPUs()
	}
	l.memoryInput(&in)
	l.diskInput(&in)
	if n := l.network; n != nil {
		link := n.Link()
		in.Node.LinkTx, in.Node.LinkRx, in.Node.LinkSampledAt = link.Tx, link.Rx, link.At
		in.RevocableBandwidth, in.RevocableBandwidthLimit = n.Estimate(), n.QoSLimit()
	}
	m := l.monitor
	if m == nil {
		return in
	}
	if n := m.Node().Stats; n != nil {
		in.Node.MemTotal, in.Node.MemAvailable = n.GetMemLimitBytes(), n.GetMemAvailableBytes()
		in.Node.Load1, in.Node.Load5, in.Node.Load15 = n.GetLoadAvg_1(), n.GetLoadAvg_5(), n.GetLoadAvg_15()
		in.Node.CPUPressureSome10 = n.GetCpuPressure().GetSomeAvg10()
		in.Node.MemPressureSome10, in.Node.MemPressureFull10 = n.GetMemoryPressure().GetSomeAvg10(), n.GetMemoryPressure().GetFullAvg10()
		in.Node.IOPressureSome10, in.Node.IOPressureFull10 = n.GetIoPressure().GetSomeAvg10(), n.GetIoPressure().GetFullAvg10()
	}
	// Every victim's delays in one walk of the eBPF map rather than one
	// walk per guaranteed container.
	l.batched = false
	if b, ok := l.ebpf.(allDelayer); ok {
		l.allDelays, l.allDelaysErr = b.AllDelays()
		l.batched = !errors.Is(l.allDelaysErr, errNoAllDelays)
	}
	l.statsRead, l.statsBatched = false, false
	size := 0 // of in.Containers
	add := func(qc qos.Container) {
		u, ok := m.Latest(qc.ID)
		if ok && u.Stats != nil {
			qc.CPU, qc.MemBytes, qc.SampledAt = u.CPURate, u.MemUsage, u.Time
			qc.RunqP50, qc.RunqP99 = u.RunqP50, u.RunqP99
			qc.NetTx, qc.NetTxPackets = u.NetTxMbps, u.NetTxPackets
			qc.TCPRTTP50, qc.TCPRTTP99, qc.TCPRetransmits = u.TCPRTTP50, u.TCPRTTP99, u.TCPRetransmits
			qc.CPUPressureSome10 = u.Stats.GetCpuPressure().GetSomeAvg10()
			qc.MemPressureSome10, qc.MemPressureFull10 = u.Stats.GetMemoryPressure().GetSomeAvg10(), u.Stats.GetMemoryPressure().GetFullAvg10()
			qc.IOPressureSome10, qc.IOPressureFull10 = u.Stats.GetIoPressure().GetSomeAvg10(), u.Stats.GetIoPressure().GetFullAvg10()
			qc.Syncs, qc.SyncP99 = u.Syncs, u.SyncP99
			qc.BlockIOs, qc.BlockP99 = u.BlockIOs, u.BlockP99
		}
		if !qc.Revocable || qc.Protected {
			var runqSum *time.Duration
			if ok && u.EBPF {
				// The monitor's pass, just taken, read the counter.
				sum := u.RunqSum()
				runqSum = &sum
			}
			qc.DelayedBy, qc.DelayedByOthers, qc.RunqWait = l.delayedSince(qc.ID, runqSum)
		}
		if in.Containers == nil {
			in.Containers = make([]qos.Container, 0, size)
		}
		in.Containers = append(in.Containers, qc)
	}
	running := l.running.get()
	// Sized once, at the first container (nil without any, as before):
	// growing it by appends copied it several times and touched fresh
	// memory at every evaluation (#29).
	size = len(running) + len(l.protect)
	for _, c := range running {
		if c.Exit != nil {
			continue
		}
		add(qos.Container{ID: c.ID, TaskID: c.Spec.TaskID, Revocable: c.Spec.Revocable,
			CPUAllocated: c.Spec.Resources.CPUs(), BandwidthAllocated: c.Spec.Resources.Bandwidth(), StartedAt: c.StartedAt})
	}
	for _, path := range l.protect {
		add(qos.Container{ID: protectedPrefix + path, Protected: true})
	}
	return in
}

// allDelayer reads every victim's delays at once (bpf.Monitor.AllDelays).
type allDelayer interface {
	AllDelays() (map[uint64]map[uint64]time.Duration, error)
}

// delayedSince returns, for a guaranteed container or protected service,
// who delayed it since the last evaluation (eBPF who-delayed-whom): the
// revocable containers by id, and everything else by culprit name (see
// observer.culprit; only with bpf's all-culprit attribution), and its total
// run-queue wait meanwhile. runqSum is its cumulative run-queue wait from
// the monitor's latest sample, when that sample has eBPF figures; without
// it the counters are read (every cgroup's at once, at most once per
// evaluation, when the programs can).
func (l *qosLoop) delayedSince(victim string, runqSum *time.Duration) (revocable, others map[string]time.Duration, wait time.Duration) {
	if l.ebpf == nil {
		return nil, nil, 0
	}
	cgid := l.watch.cgroupID(victim)
	if cgid == 0 {
		return nil, nil, 0
	}
	var cumulative map[uint64]time.Duration
	var err error
	if l.batched {
		cumulative, err = l.allDelays[cgid], l.allDelaysErr
	} else {
		cumulative, err = l.ebpf.DelayedBy(cgid)
	}
	if err != nil {
		return nil, nil, 0
	}
	prev := l.delayed[victim]
	l.delayed[victim] = cumulative
	revocable, others = map[string]time.Duration{}, map[string]time.Duration{}
	for culprit, d := range cumulative {
		delta := d - prev[culprit]
		if delta <= 0 {
			continue
		}
		if name := l.watch.culprit(culprit); l.watch.revocable(culprit) {
			revocable[name] += delta
		} else {
			others[name] += delta
		}
	}
	total, ok := l.runqTotal(cgid, runqSum)
	if ok {
		wait = max(total-l.waited[victim], 0)
		l.waited[victim] = total
	}
	return revocable, others, wait
}

// runqTotal returns a cgroup's cumulative run-queue wait: runqSum when the
// monitor's sample had it, else from the eBPF counters (read at most once
// per evaluation for all cgroups when the programs can, else looked up).
func (l *qosLoop) runqTotal(cgid uint64, runqSum *time.Duration) (time.Duration, bool) {
	if runqSum != nil {
		return *runqSum, true
	}
	if !l.statsRead {
		l.statsRead = true
		if r, ok := l.ebpf.(allReader); ok {
			if l.allStats == nil {
				l.allStats = map[uint64]bpf.CgroupStats{}
			}
			l.statsBatched = r.ReadAll(l.allStats) == nil
		}
	}
	if l.statsBatched {
		st, ok := l.allStats[cgid]
		return st.RunqTotal, ok
	}
	st, err := l.ebpf.Stats(cgid)
	return st.RunqTotal, err == nil
}

// apply writes a correction to the cgroups (or kills) and records it with
// its reaction time.
func (l *qosLoop) apply(c qos.Correction, in qos.Input) {
	switch c.Kind {
	case qos.Throttle, qos.Unthrottle:
		if c.Resource == qos.DiskIO {
			if err := l.applyDisk(c); err != nil {
				l.log.Error("QoS correction failed", "correction", c.String(), "err", err)
				return
			}
			break
		}
		if c.Resource == qos.Bandwidth {
			if l.network == nil || c.ContainerID != "" {
				l.log.Debug("QoS: bandwidth limits apply to the revocable total on managed interfaces only", "correction", c.String())
				return
			}
			if err := l.network.SetQoSLimit(c.BandwidthLimit); err != nil {
				l.log.Error("QoS correction failed", "correction", c.String(), "err", err)
				return
			}
			break
		}
		if c.ContainerID != "" {
			l.log.Debug("QoS: per-container CPU limits are not applied", "container", c.ContainerID)
			return
		}
		if err := l.cz.SetRevocableCPULimit(c.CPULimit, c.Period); err != nil {
			l.log.Error("QoS correction failed", "correction", c.String(), "err", err)
			return
		}
	case qos.Confine:
		if err := l.cz.SetRevocableCPUs(c.CPUs); err != nil {
			l.log.Error("QoS correction failed", "correction", c.String(), "err", err)
			return
		}
	case qos.Reclaim, qos.Release, qos.Freeze, qos.Thaw:
		if err := l.applyMemory(c); err != nil {
			l.log.Error("QoS correction failed", "correction", c.String(), "err", err)
			return
		}
	case qos.Kill:
		l.preempt(c.ContainerID, c.Reason)
	default:
		return
	}
	signal := c.Signal
	if signal.IsZero() {
		signal = in.Now
	}
	reaction := time.Since(signal)
	kind := strings.ToLower(c.Kind.String())
	l.correctionsTotal.WithLabelValues(kind, c.Controller).Inc()
	l.reaction.Observe(reaction.Seconds())
	l.log.Info("QoS correction", "kind", kind, "controller", c.Controller, "container", c.ContainerID, "task", c.TaskID,
		"resource", c.Resource.String(), "cpu_limit", c.CPULimit, "cpu_period", c.Period, "cpus", qos.FormatCPUs(c.CPUs),
		"bandwidth_limit_mbps", c.BandwidthLimit, "memory_high_bytes", c.MemoryHigh, "io_limit_bytes_per_second", c.IOLimit, "reason", c.Reason,
		"reaction", reaction.Round(time.Microsecond))
	rec := &slacklinev1.Correction{
		Timestamp: timestamppb.New(time.Now()), Kind: slacklinev1.CorrectionKind(c.Kind), Controller: c.Controller,
		ContainerId: c.ContainerID, TaskId: c.TaskID, CpuLimit: c.CPULimit, Reason: c.Reason, ReactionSeconds: reaction.Seconds(),
		BandwidthLimitMbps: c.BandwidthLimit, Cpus: qos.FormatCPUs(c.CPUs), CpuPeriodSeconds: c.Period.Seconds(),
		MemoryHighBytes: c.MemoryHigh, IoLimitBytesPerSecond: c.IOLimit,
	}
	switch c.Kind {
	case qos.Throttle, qos.Unthrottle, qos.Confine:
		rec.Resource = c.Resource.String()
	case qos.Reclaim, qos.Release, qos.Freeze, qos.Thaw:
		rec.Resource = "mem"
	}
	l.mu.Lock()
	l.corrections = append(l.corrections, rec)
	if over := len(l.corrections) - maxCorrections; over > 0 {
		l.corrections = append(l.corrections[:0], l.corrections[over:]...)
	}
	l.mu.Unlock()
}

func (s nodeService) GetCorrections(context.Context, *connect.Request[slacklinev1.GetCorrectionsRequest]) (*connect.Response[slacklinev1.GetCorrectionsResponse], error) {
	l := s.a.qos
	l.mu.Lock()
	defer l.mu.Unlock()
	return connect.NewResponse(&slacklinev1.GetCorrectionsResponse{Corrections: append([]*slacklinev1.Correction(nil), l.corrections...)}), nil
}
