package agent

import (
	"context"
	"log/slog"
	"math"
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
	// estimator names the estimator that made it; profile and version
	// are the node profile it runs (#29; "" and 0: the agent's flags).
	estimator string
	profile   string
	version   uint64
}

// estimateLoop computes the oversubscription estimate every interval and
// sends it to the coordinator when it changed (the estimator applies its
// own hysteresis) or when the session is new. Only Run's goroutine touches
// its fields, except latest, which the NodeService and /metrics read.
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

	latest atomic.Pointer[estimate]
	// next is an estimator a node profile applied (#29), taken by Run's
	// next pass.
	next atomic.Pointer[profileSettings]
	// profile and version are the node profile of estimator.
	profile string
	version uint64

	sent    resources.Resources
	sentFor string // the session the last estimate was sent in ("" none)

	// sampled is signalled (without blocking) at the end of each monitor
	// pass: Run estimates right after the first sample following each
	// tick (estimateSchedule).
	sampled chan struct{}

	// samples keeps each target's estimator samples between passes, so that
	// a pass converts only the monitor's points that are new since the
	// last (at 100 ms a full copy of every history cost ~600 samples per
	// container per pass). spare is the previous pass's map, reused.
	samples, spare map[string][]estimator.Sample
}

func newEstimateLoop(cfg Config, total resources.Resources, s *session.Session, net *network.Network) *estimateLoop {
	l := &estimateLoop{
		log: cfg.Logger, estimator: cfg.Estimator, name: cfg.EstimatorName, interval: cfg.EstimateInterval,
		total: total, monitor: cfg.Monitor, network: net, cz: cfg.Containerizer, running: containerList{cz: cfg.Containerizer}, protect: cfg.ProtectCgroups, session: s,
	}
	l.latest.Store(&estimate{estimator: l.name})
	l.sampled = make(chan struct{}, 1)
	l.samples, l.spare = map[string][]estimator.Sample{}, map[string][]estimator.Sample{}
	return l
}

var estimateDesc = prometheus.NewDesc("slackline_agent_revocable_estimate",
	"The agent's latest oversubscription estimate: total revocable capacity (cpus in cores, mem in bytes, bandwidth in bytes per second).",
	[]string{"resource"}, nil)

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

// Describe implements prometheus.Collector: the latest estimate.
func (l *estimateLoop) Describe(ch chan<- *prometheus.Desc) {
	ch <- estimateDesc
	for _, d := range []*prometheus.Desc{calibrationLevelDesc, calibrationMarginDesc, calibrationResolvedDesc,
		calibrationViolationsDesc, calibrationUnresolvedDesc, calibrationHeldDesc} {
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

// sampleTaken tells Run that the monitor finished a pass (the monitor's
// observer calls it); it never blocks.
func (l *estimateLoop) sampleTaken() {
	select {
	case l.sampled <- struct{}{}:
	default:
	}
}

// Run estimates once per interval until ctx ends: right after the
// monitor's first pass following each tick when the monitor samples at
// least as often (estimateSchedule; the ticks are fed at the passes,
// lazyTicks, so that the loop wakes once per pass, not at the tick too),
// at the tick otherwise.
func (l *estimateLoop) Run(ctx context.Context) error {
	sched := estimateSchedule{aligned: l.monitor != nil && l.monitor.Interval() <= l.interval, interval: l.interval}
	if !sched.aligned {
		// On the monitor's grid (internal/tick): both timers fire in one
		// wake-up of the runtime.
		timer := tick.NewAligned(l.interval)
		defer timer.Stop()
		var points []monitor.Point
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case now := <-timer.C:
				timer.Next()
				if sched.tick(now) {
					points = l.runOnce(ctx, points)
				}
			}
		}
	}
	// Aligned: the ticks are fed at the samples (lazyTicks), and the
	// timer wakes the loop only when a tick would run an estimate itself.
	now := time.Now()
	ticks := lazyTicks{next: now.Add(tick.Until(now, l.interval)), interval: l.interval}
	timer := time.NewTimer(time.Until(ticks.wake(&sched)))
	defer timer.Stop()
	var points []monitor.Point
	for {
		run := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			run = ticks.feed(&sched, time.Now())
		case <-l.sampled:
			now := time.Now()
			run = ticks.feed(&sched, now)
			run = sched.sampled(now) || run
		}
		timer.Reset(time.Until(ticks.wake(&sched)))
		if run {
			points = l.runOnce(ctx, points)
		}
	}
}

// runOnce makes, publishes and sends one estimate, then runs the shadows
// on its input. points is a reusable buffer.
func (l *estimateLoop) runOnce(ctx context.Context, points []monitor.Point) []monitor.Point {
	l.adoptProfile()
	e, in, points := l.publish(time.Now(), points)
	if l.network != nil && l.total.Bandwidth() > 0 {
		// The revocable total is paced to the network slack.
		if err := l.network.SetEstimate(e.revocable.Bandwidth()); err != nil {
			l.log.Warn("network QoS: pace revocable egress to the estimate", "err", err)
		}
	}
	l.send(ctx, e.revocable)
	// After the active estimate is published and sent: a shadow can
	// neither change nor delay it.
	l.shadows.estimate(in, e.revocable.CPUs())
	l.rollout.estimate(in, e.revocable.CPUs())
	return points
}

// adoptProfile takes the estimator a node profile applied, if any, and
// tells the shadows' active report.
func (l *estimateLoop) adoptProfile() {
	if s := l.next.Swap(nil); s != nil {
		l.estimator, l.name, l.profile, l.version = s.estimator, s.estimatorName, s.profile, s.version
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
	l.latest.Store(e)
	return e, in, points
}

// send sends the estimate if it differs from the last one sent in the
// current session.
func (l *estimateLoop) send(ctx context.Context, revocable resources.Resources) {
	_, sessionID, ok := l.session.Current()
	if !ok || sessionID == l.sentFor && l.sent.Equal(revocable) {
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.session.SendEstimate(callCtx, revocable.Proto("", resources.Revocable)); err != nil {
		l.log.Debug("send estimate (will retry)", "err", err)
		return
	}
	l.sent, l.sentFor = revocable, sessionID
	l.log.Debug("revocable estimate sent", "estimate", revocable.String())
}

// input builds the estimator's input from the monitor's history. points
// is a reusable buffer.
func (l *estimateLoop) input(now time.Time, points []monitor.Point) (estimator.Input, []monitor.Point) {
	in := estimator.Input{Now: now, Total: l.total.ScalarsOnly()}
	m := l.monitor
	if m == nil {
		return in, points
	}
	// Targets gone since the last pass are dropped with the old map.
	kept := l.spare
	clear(kept)
	history := func(id string) []estimator.Sample {
		samples := l.samples[id]
		var after time.Time
		if len(samples) > 0 {
			after = samples[len(samples)-1].Time
		}
		points = m.HistorySince(points[:0], id, after)
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
		kept[id] = samples
		return samples[:len(samples):len(samples)] // estimators may not append into the cache
	}
	for _, c := range l.running.get() {
		if c.Exit != nil {
			continue
		}
		in.Containers = append(in.Containers, estimator.Container{
			ID: c.ID, Revocable: c.Spec.Revocable, Allocated: c.Spec.Resources.ScalarsOnly(), History: history(c.ID),
			HistoryChecked: true,
		})
	}
	for _, path := range l.protect {
		id := protectedPrefix + path
		in.Protected = append(in.Protected, estimator.Container{ID: id, History: history(id), HistoryChecked: true})
	}
	l.samples, l.spare = kept, l.samples
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
	}
	return connect.NewResponse(resp), nil
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
	resp.LimitingContainer, resp.Reason = ex.Limiting, ex.Reason
	resp.UncalibratedCpus, resp.CalibratedCpus = ex.Uncalibrated, ex.Calibrated
	resp.Calibration = &slacklinev1.EstimateCalibration{
		TargetViolation: c.Target, Level: c.Alpha, Paused: c.Paused, MarginCpus: margin,
		Resolved: int64(c.Resolved), Violations: c.Violations, ViolationBound: min(1, bound),
		MaxFeedbackDelay: int64(c.MaxDelay), Unresolved: int64(c.Unresolved),
	}
}
