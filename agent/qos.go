package agent

import (
	"context"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/bpf"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
)

// maxCorrections bounds the corrections kept for GetCorrections.
const maxCorrections = 1000

// qosState is what the QoS loop keeps between evaluations.
type qosState struct {
	mu          sync.Mutex
	corrections []*slacklinev1.Correction
	// delayed holds each victim container's cumulative who-delayed-whom
	// counters (culprit cgroup -> time), to turn them into deltas.
	delayed map[string]map[uint64]time.Duration

	correctionsTotal *prometheus.CounterVec
	reaction         prometheus.Histogram
}

func newQoSState() *qosState {
	return &qosState{
		delayed: map[string]map[uint64]time.Duration{},
		correctionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slackline_qos_corrections_total",
			Help: "QoS corrections applied, by kind (throttle, unthrottle, kill) and reason (the controller that asked).",
		}, []string{"kind", "reason"}),
		reaction: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slackline_qos_reaction_seconds",
			Help:    "Time from the signal that triggered a QoS correction being observed to the cgroup being written.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
}

// runQoS evaluates the QoS controllers periodically and as soon as the
// eBPF ring buffer reports a guaranteed task waiting too long, at most once
// per QoSIntervalMin, and applies their corrections at once.
func (a *Agent) runQoS(ctx context.Context) error {
	period := max(a.cfg.QoSIntervalMin, 10*time.Millisecond)
	tick := time.NewTicker(period)
	defer tick.Stop()
	var events <-chan bpf.ThresholdEvent
	if a.cfg.EBPF != nil {
		events = a.cfg.EBPF.Events()
	}
	var pending []qos.Event
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			pending = append(pending, a.qosEvent(ev))
		drain:
			for {
				select {
				case ev, ok := <-events:
					if !ok {
						events = nil
						break drain
					}
					pending = append(pending, a.qosEvent(ev))
				default:
					break drain
				}
			}
			if time.Since(last) < a.cfg.QoSIntervalMin {
				continue // the next tick evaluates them
			}
		}
		last = time.Now()
		a.evaluateQoS(ctx, last, pending)
		pending = pending[:0]
	}
}

func (a *Agent) qosEvent(ev bpf.ThresholdEvent) qos.Event {
	victim, _ := a.containerOfCgroup(ev.Cgroup)
	culprit, _ := a.containerOfCgroup(ev.Culprit)
	return qos.Event{Time: ev.Time, Container: victim, Culprit: culprit, Latency: ev.Latency}
}

// evaluateQoS builds the controllers' input, evaluates and applies.
func (a *Agent) evaluateQoS(ctx context.Context, now time.Time, events []qos.Event) {
	in := a.qosInput(now)
	in.Events = events
	for _, c := range a.cfg.QoS.Evaluate(in) {
		a.applyCorrection(ctx, c, in)
	}
}

func (a *Agent) qosInput(now time.Time) qos.Input {
	in := qos.Input{Now: now, Node: qos.Node{CPUs: a.total.CPUs()}}
	if limit, err := a.cz.RevocableCPULimit(); err == nil {
		in.RevocableLimit = limit
	}
	m := a.cfg.Monitor
	if m == nil {
		return in
	}
	if n := m.Node().Stats; n != nil {
		in.Node.MemTotal, in.Node.MemAvailable = n.GetMemLimitBytes(), n.GetMemAvailableBytes()
		in.Node.Load1, in.Node.Load5, in.Node.Load15 = n.GetLoadAvg_1(), n.GetLoadAvg_5(), n.GetLoadAvg_15()
		in.Node.CPUPressureSome10 = n.GetCpuPressure().GetSomeAvg10()
		in.Node.MemPressureSome10, in.Node.MemPressureFull10 = n.GetMemoryPressure().GetSomeAvg10(), n.GetMemoryPressure().GetFullAvg10()
	}
	add := func(qc qos.Container) {
		u, ok := m.Latest(qc.ID)
		if ok && u.Stats != nil {
			qc.CPU, qc.MemBytes, qc.SampledAt = u.CPURate, u.MemUsage, u.Time
			qc.RunqP50, qc.RunqP99 = u.RunqP50, u.RunqP99
			qc.CPUPressureSome10 = u.Stats.GetCpuPressure().GetSomeAvg10()
			qc.MemPressureSome10, qc.MemPressureFull10 = u.Stats.GetMemoryPressure().GetSomeAvg10(), u.Stats.GetMemoryPressure().GetFullAvg10()
		}
		if !qc.Revocable || qc.Protected {
			qc.DelayedBy = a.delayedSince(qc.ID)
		}
		in.Containers = append(in.Containers, qc)
	}
	for _, c := range a.cz.Containers() {
		if c.Exit != nil {
			continue
		}
		add(qos.Container{ID: c.ID, TaskID: c.Spec.TaskID, Revocable: c.Spec.Revocable,
			CPUAllocated: c.Spec.Resources.CPUs(), StartedAt: c.StartedAt})
	}
	for _, path := range a.cfg.ProtectCgroups {
		add(qos.Container{ID: protectedPrefix + path, Protected: true})
	}
	return in
}

// delayedSince returns who delayed a guaranteed container since the last
// evaluation: culprit container id -> delay.
func (a *Agent) delayedSince(victim string) map[string]time.Duration {
	if a.cfg.EBPF == nil {
		return nil
	}
	a.obsMu.Lock()
	tr, ok := a.tracked[victim]
	a.obsMu.Unlock()
	if !ok || tr.cgroupID == 0 {
		return nil
	}
	cumulative, err := a.cfg.EBPF.DelayedBy(tr.cgroupID)
	if err != nil {
		return nil
	}
	a.qos.mu.Lock()
	prev := a.qos.delayed[victim]
	a.qos.delayed[victim] = cumulative
	a.qos.mu.Unlock()
	out := map[string]time.Duration{}
	for culprit, d := range cumulative {
		if delta := d - prev[culprit]; delta > 0 {
			if id, ok := a.containerOfCgroup(culprit); ok {
				out[id] += delta
			}
		}
	}
	return out
}

// applyCorrection writes a correction to the cgroups (or kills) and records
// it with its reaction time.
func (a *Agent) applyCorrection(ctx context.Context, c qos.Correction, in qos.Input) {
	var err error
	switch c.Kind {
	case qos.Throttle, qos.Unthrottle:
		if c.ContainerID != "" {
			a.log.Debug("QoS: per-container CPU limits are not applied", "container", c.ContainerID)
			return
		}
		err = a.cz.SetRevocableCPULimit(c.CPULimit)
	case qos.Kill:
		a.mu.Lock()
		tk, ok := a.byContainer[c.ContainerID]
		a.mu.Unlock()
		if !ok {
			return
		}
		a.killTask(tk, slacklinev1.TaskState_TASK_STATE_KILLED, slacklinev1.Reason_REASON_CONTAINER_PREEMPTED, c.Reason)
	default:
		return
	}
	if err != nil {
		a.log.Error("QoS correction failed", "correction", c.String(), "err", err)
		return
	}
	signal := c.Signal
	if signal.IsZero() {
		signal = in.Now
	}
	reaction := time.Since(signal)
	kind := strings.ToLower(c.Kind.String())
	a.qos.correctionsTotal.WithLabelValues(kind, c.Controller).Inc()
	a.qos.reaction.Observe(reaction.Seconds())
	a.log.Info("QoS correction", "kind", kind, "controller", c.Controller, "container", c.ContainerID, "task", c.TaskID,
		"cpu_limit", c.CPULimit, "reason", c.Reason, "reaction", reaction.Round(time.Microsecond))
	rec := &slacklinev1.Correction{
		Timestamp: timestamppb.New(time.Now()), Kind: slacklinev1.CorrectionKind(c.Kind), Controller: c.Controller,
		ContainerId: c.ContainerID, TaskId: c.TaskID, CpuLimit: c.CPULimit, Reason: c.Reason, ReactionSeconds: reaction.Seconds(),
	}
	a.qos.mu.Lock()
	a.qos.corrections = append(a.qos.corrections, rec)
	if over := len(a.qos.corrections) - maxCorrections; over > 0 {
		a.qos.corrections = append(a.qos.corrections[:0], a.qos.corrections[over:]...)
	}
	a.qos.mu.Unlock()
}

func (s nodeService) GetCorrections(context.Context, *connect.Request[slacklinev1.GetCorrectionsRequest]) (*connect.Response[slacklinev1.GetCorrectionsResponse], error) {
	q := s.a.qos
	q.mu.Lock()
	defer q.mu.Unlock()
	return connect.NewResponse(&slacklinev1.GetCorrectionsResponse{Corrections: append([]*slacklinev1.Correction(nil), q.corrections...)}), nil
}
