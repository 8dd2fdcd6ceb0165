package agent

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/agent/session"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/tick"
	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

// protectedPrefix marks monitor targets that are --protect-cgroup services.
const protectedPrefix = "protected:"

// estimate is an oversubscription estimate, when it was made and, from an
// estimator that explains itself, how.
type estimate struct {
	revocable   resources.Resources
	at          time.Time
	explanation *estimator.Explanation
	// memory is how its mem was made, from an estimator that estimates
	// memory (Bound MemoryBoundNone otherwise).
	memory estimator.MemoryAccount
	// estimator names the estimator that made it; profile and version
	// are the node profile it runs (#29; "" and 0: the agent's flags).
	estimator string
	profile   string
	version   uint64
}

// estimateLoop computes the oversubscription estimate every interval and
// sends it to the coordinator when it changed (the estimator applies its
// own hysteresis) or when the session is new. Aligned to the monitor, the
// estimates are made on the monitor's goroutine at the end of its passes
// (sampleTaken) and on Run's when the monitor stalls; mu serialises them.
// Run alone sends. latest is read by the NodeService and /metrics.
type estimateLoop struct {
	log       *slog.Logger
	estimator estimator.Estimator
	name      string
	interval  time.Duration
	total     resources.Resources
	monitor   *monitor.Monitor // nil without a monitor
	network   *network.Network // nil without network QoS
	cz        Containerizer
	running   containerList // cz's containers, kept while unchanged
	protect   []string
	session   *session.Session
	shadows   *shadowSet // nil without shadows
	rollout   *rolloutShadow

	// keeper is the running QoS controllers' need of available memory
	// (nil: none acts on MemAvailable): the memory estimate leaves it
	// free (estimator.NodeMemory, #28). Guarded by mu, as the estimator.
	keeper qos.MemoryKeeper

	latest atomic.Pointer[estimate]
	// next is an estimator a node profile applied (#29), taken by Run's
	// next pass.
	next atomic.Pointer[profileSettings]
	// profile and version are the node profile of estimator.
	profile string
	version uint64

	// sent and sentFor are the last estimate sent and the session it was
	// sent in ("" none); only Run touches them.
	sent    resources.Resources
	sentFor string

	// mu guards what an estimate touches (the estimator, the shadows'
	// and rollout's calls, samples and spare, points, profile and
	// version) and the aligned schedule's state below.
	mu sync.Mutex
	// aligned is set when the estimates follow the monitor's passes
	// (estimateSchedule.aligned); sched and ticks are then their schedule
	// (ticks.interval is 0 until the first pass or Run), and timer Run's
	// timer for a stalled monitor (nil before Run).
	aligned bool
	sched   estimateSchedule
	ticks   lazyTicks
	timer   *time.Timer
	points  []monitor.Point
	// signalled and signalledFor are the estimate and session Run was
	// last woken to send: a pass wakes Run only when its estimate or the
	// session differs (a failed send clears signalledFor).
	signalled    resources.Resources
	signalledFor string
	// toSend wakes Run to send the latest estimate.
	toSend chan struct{}

	// samples keeps each target's estimator samples between passes, so that
	// a pass converts only the monitor's points that are new since the
	// last (at 100 ms a full copy of every history cost ~600 samples per
	// container per pass): one lookup per target and pass, the entries of
	// targets gone dropped. inputs counts input's calls, which mark the
	// entries they used.
	samples map[string]*targetSamples
	inputs  uint64
	// containers and protected are the inputs' lists, reused from pass to
	// pass (nothing keeps an Input past the estimate and its shadows: the
	// estimators must not), and protectedIDs the protected services'
	// target ids.
	containers, protected []estimator.Container
	protectedIDs          []string

	// quietMax is how long a due estimate may wait while the monitor's
	// passes are quiet (Config.QuietDeferMax; 0: never); estimatedAt and
	// estimatedVersion are the last estimate's time and the running
	// containers' version it read (deferQuiet), and deferred counts the
	// estimates that waited.
	quietMax         time.Duration
	estimatedAt      time.Time
	estimatedVersion uint64
	deferred         atomic.Uint64
}

// targetSamples is a target's estimator samples and the last input that
// used them (estimateLoop.inputs).
type targetSamples struct {
	samples []estimator.Sample
	input   uint64
	// seen is the time of the newest point taken from the monitor's
	// history, usable or not: kept here, beside input, so that a pass
	// does not load the cold end of samples to find it (#29).
	seen time.Time
}

func newEstimateLoop(cfg Config, total resources.Resources, s *session.Session, net *network.Network) *estimateLoop {
	l := &estimateLoop{
		log: cfg.Logger, estimator: cfg.Estimator, name: cfg.EstimatorName, interval: cfg.EstimateInterval,
		total: total, monitor: cfg.Monitor, network: net, cz: cfg.Containerizer, running: containerList{cz: cfg.Containerizer}, protect: cfg.ProtectCgroups, session: s,
		quietMax: cfg.QuietDeferMax,
	}
	l.keeper, _ = cfg.QoS.(qos.MemoryKeeper)
	l.latest.Store(&estimate{estimator: l.name})
	// Without an estimator Run is not started and passes make no estimate.
	l.aligned = l.estimator != nil && l.monitor != nil && l.monitor.Interval() <= l.interval
	l.sched = estimateSchedule{aligned: l.aligned, interval: l.interval}
	l.toSend = make(chan struct{}, 1)
	l.samples = map[string]*targetSamples{}
	for _, path := range l.protect {
		l.protectedIDs = append(l.protectedIDs, protectedPrefix+path)
	}
	return l
}

var estimateDesc = prometheus.NewDesc("slackline_agent_revocable_estimate",
	"The agent's latest oversubscription estimate: total revocable capacity (cpus in cores, mem in bytes, bandwidth in bytes per second).",
	[]string{"resource"}, nil)

var estimatesDeferredDesc = prometheus.NewDesc("slackline_agent_estimates_deferred_total",
	"Estimates not made because the monitor's pass changed nothing (--quiet-defer-max): the next pass that changes something, or the first after the deferral's end, estimates.", nil, nil)

// The calibrated estimator's account (#29), from its latest explanation.
var (
	calibrationLevelDesc = prometheus.NewDesc("slackline_agent_estimator_calibration_level",
		"The calibrated estimator's level alpha_t (at or below 0 it offers nothing).", nil, nil)
	calibrationMarginDesc = prometheus.NewDesc("slackline_agent_estimator_calibration_margin_cpus",
		"What the calibration adds to the guaranteed containers' need, in cores (negative: margin given back).", nil, nil)
	calibrationResolvedDesc = prometheus.NewDesc("slackline_agent_estimator_estimates_scored_total",
		"Estimates whose horizon has been measured against the real slack.", nil, nil)
	calibrationViolationsDesc = prometheus.NewDesc("slackline_agent_estimator_violations_total",
		"Scored estimates that exceeded the real slack by more than the tolerance.", nil, nil)
	calibrationUnresolvedDesc = prometheus.NewDesc("slackline_agent_estimator_estimates_unmeasured_total",
		"Estimates whose horizon was never measured (the bound on pending estimates was hit); counted as violations.", nil, nil)
	calibrationHeldDesc = prometheus.NewDesc("slackline_agent_estimator_rises_held_total",
		"Estimates whose rise was held back by --estimator-rise-interval.", nil, nil)
)

// The memory estimate's account (#28), from the estimator's latest
// (estimator.MemoryAccount); absent without a memory estimate.
var (
	memoryBoundDesc = prometheus.NewDesc("slackline_agent_estimator_memory_bound_bytes",
		"Each bound the revocable mem estimate is the least of (negative: over by that much): allocations (guaranteed allocations less their need), total (the agent's mem less the need), node (the node's memory less keep-free, other use and the need).",
		[]string{"bound"}, nil)
	memoryLimitingDesc = prometheus.NewDesc("slackline_agent_estimator_memory_limiting",
		"1 for the bound that set the revocable mem estimate, 0 for the others.", []string{"bound"}, nil)
	memoryKeepFreeDesc = prometheus.NewDesc("slackline_agent_estimator_memory_keep_free_bytes",
		"What the running QoS controllers need available to stay calm, left out of the node's memory bound.", nil, nil)
	memoryOtherDesc = prometheus.NewDesc("slackline_agent_estimator_memory_other_bytes",
		"What the node holds beyond the containers' working sets (kernel, agent, other processes), left out of the node's memory bound.", nil, nil)
)

// Describe implements prometheus.Collector: the latest estimate.
func (l *estimateLoop) Describe(ch chan<- *prometheus.Desc) {
	ch <- estimateDesc
	ch <- estimatesDeferredDesc
	for _, d := range []*prometheus.Desc{calibrationLevelDesc, calibrationMarginDesc, calibrationResolvedDesc,
		calibrationViolationsDesc, calibrationUnresolvedDesc, calibrationHeldDesc,
		memoryBoundDesc, memoryLimitingDesc, memoryKeepFreeDesc, memoryOtherDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (l *estimateLoop) Collect(ch chan<- prometheus.Metric) {
	e := l.latest.Load()
	latest := e.revocable
	ch <- prometheus.MustNewConstMetric(estimateDesc, prometheus.GaugeValue, latest.CPUs(), resources.NameCPUs)
	ch <- prometheus.MustNewConstMetric(estimateDesc, prometheus.GaugeValue, latest.Mem()*(1<<20), "mem_bytes")
	ch <- prometheus.MustNewConstMetric(estimateDesc, prometheus.GaugeValue, latest.Bandwidth()*1e6/8, "bandwidth_bytes_per_second")
	ch <- prometheus.MustNewConstMetric(estimatesDeferredDesc, prometheus.CounterValue, float64(l.deferred.Load()))
	collectMemory(ch, e.memory)
	if e.explanation == nil {
		return
	}
	c := e.explanation.Calibration
	ch <- prometheus.MustNewConstMetric(calibrationLevelDesc, prometheus.GaugeValue, c.Alpha)
	if !math.IsInf(c.Margin, 0) {
		ch <- prometheus.MustNewConstMetric(calibrationMarginDesc, prometheus.GaugeValue, c.Margin)
	}
	ch <- prometheus.MustNewConstMetric(calibrationResolvedDesc, prometheus.CounterValue, float64(c.Resolved))
	ch <- prometheus.MustNewConstMetric(calibrationViolationsDesc, prometheus.CounterValue, c.Violations)
	ch <- prometheus.MustNewConstMetric(calibrationUnresolvedDesc, prometheus.CounterValue, float64(c.Unresolved))
	ch <- prometheus.MustNewConstMetric(calibrationHeldDesc, prometheus.CounterValue, float64(c.RisesHeld))
}

// collectMemory collects the memory estimate's account: each bound it
// has, which one set the estimate, keep-free and other use (with the node
// bound); nothing without a memory estimate.
func collectMemory(ch chan<- prometheus.Metric, a estimator.MemoryAccount) {
	if a.Bound == estimator.MemoryBoundNone {
		return
	}
	bound := func(b estimator.MemoryBound, mib float64) {
		limiting := 0.0
		if a.Bound == b {
			limiting = 1
		}
		ch <- prometheus.MustNewConstMetric(memoryBoundDesc, prometheus.GaugeValue, mib*(1<<20), b.String())
		ch <- prometheus.MustNewConstMetric(memoryLimitingDesc, prometheus.GaugeValue, limiting, b.String())
	}
	bound(estimator.MemoryBoundAllocations, a.AllocationsMiB)
	if a.HasTotal {
		bound(estimator.MemoryBoundTotal, a.TotalMiB)
	}
	if a.HasNode {
		bound(estimator.MemoryBoundNode, a.NodeMiB)
		ch <- prometheus.MustNewConstMetric(memoryKeepFreeDesc, prometheus.GaugeValue, float64(a.Node.KeepFreeBytes))
		ch <- prometheus.MustNewConstMetric(memoryOtherDesc, prometheus.GaugeValue, float64(a.OtherBytes))
	}
}

// sampleTaken is the end of a monitor pass (the monitor's observer calls
// it on the monitor's goroutine). Aligned, it feeds the schedule the
// pass's ticks and sample and makes the estimate they call for right
// there, so that the estimate costs no wake-up of another goroutine
// (#29); it wakes Run only when that estimate is to be sent. It never
// blocks on the network.
func (l *estimateLoop) sampleTaken() {
	if !l.aligned {
		return
	}
	l.mu.Lock()
	now := time.Now()
	l.startTicks(now)
	run := l.ticks.feed(&l.sched, now)
	run = l.sched.sampled(now) || run
	if l.timer != nil {
		l.timer.Reset(time.Until(l.ticks.wake(&l.sched)))
	}
	if run {
		if l.deferQuiet(now) {
			l.deferred.Add(1)
		} else {
			l.estimateLocked(nil) // wakes Run when its estimate is to be sent
		}
	}
	l.mu.Unlock()
}

// deferQuiet reports whether the estimate due at the end of a pass at now
// waits (#29): the pass was quiet and the containers have been idle for
// quietSettle (settled: monitor.QuietSince), the running containers, the
// session and the estimator are those of the last estimate, and that
// estimate is less than quietMax old. Such an estimate would read the
// same figures as the last, one sample later; the samples it skips are
// not lost (the next estimate's input takes every point since its last,
// monitor.HistorySince), only its time-driven changes wait, at most
// quietMax: not those that follow activity (a fall's confirmation, the
// last second's peak), which the settling leaves to the 100 ms estimates,
// but an old peak leaving a longer window. l.mu is held.
func (l *estimateLoop) deferQuiet(now time.Time) bool {
	if l.quietMax <= 0 || l.estimatedAt.IsZero() || now.Before(l.estimatedAt) || now.Sub(l.estimatedAt) >= l.quietMax {
		return false
	}
	if l.next.Load() != nil || !l.running.unchangedSince(l.estimatedVersion) || !settled(l.monitor, now) {
		return false
	}
	if l.session != nil {
		if _, sessionID, ok := l.session.Current(); ok && sessionID != l.signalledFor {
			return false // a new session: its first estimate is sent now
		}
	}
	return true
}

// quietSettle is how long the containers stay idle (monitor.QuietSince)
// before quiet passes defer estimates and QoS evaluations (#29): longer
// than what the default estimator does on its own after activity ends
// (the 300 ms confirmation of a fall, the last second's peak), so that
// slack appearing is still offered at the 100 ms estimates.
const quietSettle = 2 * time.Second

// settled reports whether m's latest pass was quiet and its containers
// have been idle for quietSettle at now.
func settled(m *monitor.Monitor, now time.Time) bool {
	since := m.QuietSince()
	return !since.IsZero() && now.Sub(since) >= quietSettle
}

// startTicks starts the aligned schedule's ticks at the first boundary
// after now, once. l.mu is held.
func (l *estimateLoop) startTicks(now time.Time) {
	if l.ticks.interval == 0 {
		l.ticks = lazyTicks{next: now.Add(tick.Until(now, l.interval)), interval: l.interval}
	}
}

// estimateLocked makes and publishes one estimate, paces the revocable
// egress to it and runs the shadows on its input. When Run is to send it
// (it or the session differs from what Run was last woken for), it wakes
// Run before the shadows run, and reports so. l.mu is held.
// send, when set, is called after the pacing and before the shadows (the
// unaligned loop sends there, on its own goroutine).
func (l *estimateLoop) estimateLocked(send func()) bool {
	l.adoptProfile()
	l.estimatedAt = time.Now()
	var e *estimate
	var in estimator.Input
	e, in, l.points = l.publish(l.estimatedAt, l.points)
	if l.network != nil && l.total.Bandwidth() > 0 {
		// The revocable total is paced to the network slack.
		if err := l.network.SetEstimate(e.revocable.Bandwidth()); err != nil {
			l.log.Warn("network QoS: pace revocable egress to the estimate", "err", err)
		}
	}
	if send != nil {
		send()
	}
	wake := false
	if l.session == nil {
		return false
	}
	if _, sessionID, ok := l.session.Current(); ok && (sessionID != l.signalledFor || !l.signalled.Equal(e.revocable)) {
		l.signalled, l.signalledFor, wake = e.revocable, sessionID, true
		// Run is woken before the shadows run, so that they do not
		// delay the send.
		select {
		case l.toSend <- struct{}{}:
		default:
		}
	}
	// After the active estimate is published and Run woken to send it: a
	// shadow can neither change it nor delay its send (Run sends it
	// meanwhile).
	l.shadows.estimate(in, e.revocable.CPUs())
	l.rollout.estimate(in, e.revocable.CPUs())
	return wake
}

// Run estimates once per interval until ctx ends: right after the
// monitor's first pass following each tick when the monitor samples at
// least as often (estimateSchedule; made on the monitor's goroutine by
// sampleTaken, the ticks fed at the passes by lazyTicks, so that neither
// the tick nor the estimate wakes this goroutine), at the tick otherwise.
// It sends the estimates, and makes those a stalled monitor leaves to the
// ticks.
func (l *estimateLoop) Run(ctx context.Context) error {
	if !l.aligned {
		// On the monitor's grid (internal/tick).
		timer := tick.NewAligned(l.interval)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case now := <-timer.C:
				timer.Next()
				if !l.sched.tick(now) {
					continue
				}
			}
			l.mu.Lock()
			l.estimateLocked(func() { l.send(ctx, l.latest.Load().revocable) })
			l.mu.Unlock()
		}
	}
	l.mu.Lock()
	l.startTicks(time.Now())
	timer := time.NewTimer(time.Until(l.ticks.wake(&l.sched)))
	l.timer = timer
	l.mu.Unlock()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			// No pass by a tick that calls for an estimate: a stalled
			// monitor's estimate is made here.
			l.mu.Lock()
			if l.ticks.feed(&l.sched, time.Now()) {
				l.estimateLocked(nil)
			}
			timer.Reset(time.Until(l.ticks.wake(&l.sched)))
			l.mu.Unlock()
		case <-l.toSend:
		}
		l.sendLatest(ctx)
	}
}

// sendLatest sends the latest estimate (send skips one already sent in
// the session); a failed send has the next estimate wake Run again.
func (l *estimateLoop) sendLatest(ctx context.Context) {
	if !l.send(ctx, l.latest.Load().revocable) {
		l.mu.Lock()
		l.signalledFor = ""
		l.mu.Unlock()
	}
}

// adoptProfile takes the estimator a node profile applied, if any, and
// tells the shadows' active report.
func (l *estimateLoop) adoptProfile() {
	if s := l.next.Swap(nil); s != nil {
		l.estimator, l.name, l.profile, l.version = s.estimator, s.estimatorName, s.profile, s.version
		l.keeper, _ = s.qos.(qos.MemoryKeeper)
		l.shadows.activeEstimatorChanged(s.estimatorName)
		l.rollout.activeChanged(s.profile, s.version, s.warmup)
	}
}

// estimate makes and publishes (latest) one estimate at now, then runs
// the shadows on the same input, as Run does around sending it. points is
// a reusable buffer.
func (l *estimateLoop) estimate(now time.Time, points []monitor.Point) (*estimate, []monitor.Point) {
	e, in, points := l.publish(now, points)
	l.shadows.estimate(in, e.revocable.CPUs())
	l.rollout.estimate(in, e.revocable.CPUs())
	return e, points
}

// publish makes and publishes (latest) one estimate at now and returns it
// with its input. points is a reusable buffer.
func (l *estimateLoop) publish(now time.Time, points []monitor.Point) (*estimate, estimator.Input, []monitor.Point) {
	var in estimator.Input
	in, points = l.input(now, points)
	e := &estimate{revocable: l.estimator.Estimate(in), at: in.Now, estimator: l.name, profile: l.profile, version: l.version}
	if ex, ok := l.estimator.(estimator.Explainer); ok {
		explanation := ex.Explain()
		e.explanation = &explanation
	}
	if ex, ok := l.estimator.(estimator.MemoryExplainer); ok {
		e.memory = ex.ExplainMemory()
	}
	l.latest.Store(e)
	return e, in, points
}

// send sends the estimate if it differs from the last one sent in the
// current session. It reports false when a send failed.
func (l *estimateLoop) send(ctx context.Context, revocable resources.Resources) bool {
	_, sessionID, ok := l.session.Current()
	if !ok || sessionID == l.sentFor && l.sent.Equal(revocable) {
		return true
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.session.SendEstimate(callCtx, revocable.Proto("", resources.Revocable)); err != nil {
		l.log.Debug("send estimate (will retry)", "err", err)
		return false
	}
	l.sent, l.sentFor = revocable, sessionID
	l.log.Debug("revocable estimate sent", "estimate", revocable.String())
	return true
}

// input builds the estimator's input from the monitor's history. points
// is a reusable buffer.
func (l *estimateLoop) input(now time.Time, points []monitor.Point) (estimator.Input, []monitor.Point) {
	in := estimator.Input{Now: now, Total: l.total.ScalarsOnly()}
	m := l.monitor
	if m == nil {
		return in, points
	}
	if n := m.Node().Stats; n != nil {
		// The node's memory as the QoS loop reads it (qosLoop.input).
		in.Node.TotalBytes, in.Node.AvailableBytes = n.GetMemLimitBytes(), n.GetMemAvailableBytes()
		if l.keeper != nil {
			in.Node.KeepFreeBytes = l.keeper.KeepFree(in.Node.TotalBytes)
		}
	}
	l.inputs++
	used := 0
	history := func(id string) []estimator.Sample {
		t := l.samples[id]
		if t == nil {
			t = &targetSamples{}
			l.samples[id] = t
		}
		if t.input != l.inputs {
			t.input = l.inputs
			used++
		}
		samples := t.samples
		points = m.HistorySince(points[:0], id, t.seen)
		if len(points) > 0 {
			t.seen = points[len(points)-1].Time
		}
		for _, p := range points {
			// Unusable samples are dropped here, once, so that the
			// estimators need not check the whole window at every
			// estimate (HistoryChecked).
			if s := (estimator.Sample{Time: p.Time, CPU: p.CPURate, MemBytes: p.MemWorkingSet, NetTx: p.NetTxMbps}); s.Usable() {
				samples = append(samples, s)
			}
		}
		if excess := len(samples) - m.HistoryLimit(); excess > 0 {
			samples = samples[excess:] // the next growth reallocates and frees the dropped head
		}
		t.samples = samples
		return samples[:len(samples):len(samples)] // estimators may not append into the cache
	}
	containers := l.containers[:0]
	running := l.running.get()
	l.estimatedVersion = l.running.version
	for _, c := range running {
		if c.Exit != nil {
			continue
		}
		containers = append(containers, estimator.Container{
			ID: c.ID, Revocable: c.Spec.Revocable, Allocated: c.Spec.Resources.ScalarsOnly(), History: history(c.ID),
			HistoryChecked: true,
		})
	}
	protected := l.protected[:0]
	for _, id := range l.protectedIDs {
		protected = append(protected, estimator.Container{ID: id, History: history(id), HistoryChecked: true})
	}
	// What an earlier, longer list held is not kept alive by the buffers.
	clear(containers[len(containers):cap(containers)])
	clear(protected[len(protected):cap(protected)])
	l.containers, l.protected = containers, protected
	if len(containers) > 0 {
		in.Containers = containers
	}
	if len(protected) > 0 {
		in.Protected = protected
	}
	// Targets gone since the last pass are dropped.
	if len(l.samples) > used {
		for id, t := range l.samples {
			if t.input != l.inputs {
				delete(l.samples, id)
			}
		}
	}
	return in, points
}

func (s nodeService) GetEstimate(context.Context, *connect.Request[slacklinev1.GetEstimateRequest]) (*connect.Response[slacklinev1.GetEstimateResponse], error) {
	resp := &slacklinev1.GetEstimateResponse{}
	if l := s.a.slack; l != nil {
		e := l.latest.Load()
		resp.Revocable, resp.Estimator = e.revocable.Proto("", resources.Revocable), e.estimator
		if !e.at.IsZero() {
			resp.Timestamp = timestamppb.New(e.at)
		}
		if ex := e.explanation; ex != nil {
			explainEstimate(resp, ex)
		}
		resp.Memory = memoryProto(e.memory)
	}
	return connect.NewResponse(resp), nil
}

// memoryProto is GetEstimate's (and GetUsage's) account of the mem
// estimate; nil when there is none.
func memoryProto(a estimator.MemoryAccount) *slacklinev1.EstimateMemory {
	bound, ok := memoryBounds[a.Bound]
	if !ok {
		return nil
	}
	m := &slacklinev1.EstimateMemory{
		LimitedBy:           bound,
		EstimateMib:         a.EstimateMiB,
		AllocatedMib:        a.AllocatedMiB,
		NeedMib:             a.NeedMiB,
		AllocationsBoundMib: a.AllocationsMiB,
		NodeTotalBytes:      a.Node.TotalBytes,
		NodeAvailableBytes:  a.Node.AvailableBytes,
		KeepFreeBytes:       a.Node.KeepFreeBytes,
		OtherBytes:          a.OtherBytes,
		WorkingSetBytes:     a.WorkingSetBytes,
	}
	if a.HasTotal {
		m.TotalBoundMib = &a.TotalMiB
	}
	if a.HasNode {
		m.NodeBoundMib = &a.NodeMiB
	}
	return m
}

// memoryBounds maps the estimator's memory bounds onto the API's; a
// bound not in it (none) has no account.
var memoryBounds = map[estimator.MemoryBound]slacklinev1.EstimateMemoryBound{
	estimator.MemoryBoundAllocations: slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_ALLOCATIONS,
	estimator.MemoryBoundTotal:       slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_TOTAL,
	estimator.MemoryBoundNode:        slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_NODE,
}

// explainEstimate fills GetEstimateResponse fields 4-9 from an explanation.
func explainEstimate(resp *slacklinev1.GetEstimateResponse, ex *estimator.Explanation) {
	for _, m := range ex.Members {
		resp.Containers = append(resp.Containers, &slacklinev1.EstimateContainer{
			Id: m.ID, Protected: m.Protected, AllocatedCpus: m.Allocated, PredictedPeakCpus: m.PredictedPeak,
			MarginCpus: m.Margin, CalibrationCpus: m.Calibration, NeedCpus: m.Need, WarmingUp: m.WarmingUp,
		})
	}
	c := ex.Calibration
	margin := c.Margin
	if math.IsInf(margin, 0) {
		margin = 0
	}
	bound := c.Bound()
	if math.IsInf(bound, 0) {
		bound = 1
	}
	resp.LimitingContainer, resp.Reason = ex.Limiting, ex.Reason()
	resp.UncalibratedCpus, resp.CalibratedCpus = ex.Uncalibrated, ex.Calibrated
	resp.Calibration = &slacklinev1.EstimateCalibration{
		TargetViolation: c.Target, Level: c.Alpha, Paused: c.Paused, MarginCpus: margin,
		Resolved: int64(c.Resolved), Violations: c.Violations, ViolationBound: min(1, bound),
		MaxFeedbackDelay: int64(c.MaxDelay), Unresolved: int64(c.Unresolved),
		PublishedExpert: int32(ex.Expert),
	}
}
