package agent

import (
	"context"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// protectedPrefix marks monitor targets that are --protect-cgroup services.
const protectedPrefix = "protected:"

// estimateState is the latest oversubscription estimate and what was sent.
type estimateState struct {
	mu       sync.Mutex
	latest   resources.Resources
	at       time.Time
	sent     resources.Resources
	sentFor  string // the session the last estimate was sent on
	haveSent bool
}

var estimateDesc = prometheus.NewDesc("slackline_agent_revocable_estimate",
	"The agent's latest oversubscription estimate: total revocable capacity (cpus in cores, mem in bytes).",
	[]string{"resource"}, nil)

// estimateCollector exports the latest estimate.
type estimateCollector struct{ s *estimateState }

func (e estimateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- estimateDesc }

func (e estimateCollector) Collect(ch chan<- prometheus.Metric) {
	e.s.mu.Lock()
	latest := e.s.latest
	e.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(estimateDesc, prometheus.GaugeValue, latest.CPUs(), resources.NameCPUs)
	ch <- prometheus.MustNewConstMetric(estimateDesc, prometheus.GaugeValue, latest.Mem()*(1<<20), "mem_bytes")
}

// runEstimates computes the oversubscription estimate every interval and
// sends it to the coordinator when it changed (the estimator applies its
// own hysteresis) or when the session is new.
func (a *Agent) runEstimates(ctx context.Context) error {
	tick := time.NewTicker(a.cfg.EstimateInterval)
	defer tick.Stop()
	var points []monitor.Point
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		var in estimator.Input
		in, points = a.estimatorInput(time.Now(), points)
		estimate := a.cfg.Estimator.Estimate(in)
		a.estimate.mu.Lock()
		a.estimate.latest, a.estimate.at = estimate, in.Now
		a.estimate.mu.Unlock()
		a.sendEstimate(ctx, estimate)
	}
}

// sendEstimate sends the estimate if it differs from the last one sent on
// the current session.
func (a *Agent) sendEstimate(ctx context.Context, estimate resources.Resources) {
	a.mu.Lock()
	agentID, sessionID := a.agentID, a.session
	a.mu.Unlock()
	if sessionID == "" {
		return
	}
	s := &a.estimate
	s.mu.Lock()
	unchanged := s.haveSent && s.sentFor == sessionID && s.sent.Equal(estimate)
	s.mu.Unlock()
	if unchanged {
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := a.client.UpdateOversubscribedResources(callCtx, connect.NewRequest(&slacklinev1.UpdateOversubscribedResourcesRequest{
		AgentId: agentID, SessionId: sessionID, Resources: estimate.Proto("", resources.Revocable),
	}))
	if err != nil {
		a.log.Debug("send estimate (will retry)", "err", err)
		return
	}
	s.mu.Lock()
	s.sent, s.sentFor, s.haveSent = estimate, sessionID, true
	s.mu.Unlock()
	a.log.Debug("revocable estimate sent", "estimate", estimate.String())
}

// estimatorInput builds the estimator's input from the monitor's history.
// points is a reusable buffer.
func (a *Agent) estimatorInput(now time.Time, points []monitor.Point) (estimator.Input, []monitor.Point) {
	in := estimator.Input{Now: now, Total: a.total.ScalarsOnly()}
	m := a.cfg.Monitor
	if m == nil {
		return in, points
	}
	history := func(id string) []estimator.Sample {
		points = m.History(points[:0], id)
		samples := make([]estimator.Sample, len(points))
		for i, p := range points {
			samples[i] = estimator.Sample{Time: p.Time, CPU: p.CPURate, MemBytes: p.MemRSS}
		}
		return samples
	}
	for _, c := range a.cz.Containers() {
		if c.Exit != nil {
			continue
		}
		in.Containers = append(in.Containers, estimator.Container{
			ID: c.ID, Revocable: c.Spec.Revocable, Allocated: c.Spec.Resources.ScalarsOnly(), History: history(c.ID),
		})
	}
	for _, path := range a.cfg.ProtectCgroups {
		id := protectedPrefix + path
		in.Protected = append(in.Protected, estimator.Container{ID: id, History: history(id)})
	}
	return in, points
}

func (s nodeService) GetEstimate(context.Context, *connect.Request[slacklinev1.GetEstimateRequest]) (*connect.Response[slacklinev1.GetEstimateResponse], error) {
	a := s.a
	a.estimate.mu.Lock()
	defer a.estimate.mu.Unlock()
	resp := &slacklinev1.GetEstimateResponse{Revocable: a.estimate.latest.Proto("", resources.Revocable), Estimator: a.cfg.EstimatorName}
	if !a.estimate.at.IsZero() {
		resp.Timestamp = timestamppb.New(a.estimate.at)
	}
	return connect.NewResponse(resp), nil
}
