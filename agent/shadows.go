package agent

import (
	"context"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/shadow"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
)

// shadowSet is the agent's shadows (#29 part 4) and the active settings'
// own score. The estimate loop calls estimate, the QoS loop evaluate, each
// after its active work is done; the NodeService and /metrics read
// reports. A nil *shadowSet does nothing: without --shadow nothing extra
// runs.
type shadowSet struct {
	active  *shadow.Shadow
	shadows []*shadow.Shadow
}

func newShadowSet(cfg Config) *shadowSet {
	if len(cfg.Shadows) == 0 {
		return nil
	}
	return &shadowSet{
		active:  shadow.New(shadow.Config{Name: shadow.ActiveName, EstimatorName: cfg.EstimatorName, QoSNames: cfg.QoSControllerNames}),
		shadows: cfg.Shadows,
	}
}

// estimate scores the active estimate made from in, then runs every
// shadow's estimator on in.
func (s *shadowSet) estimate(in estimator.Input, offered float64) {
	if s == nil {
		return
	}
	s.active.Observe(in, offered)
	for _, sh := range s.shadows {
		sh.Estimate(in)
	}
}

// activeEstimatorChanged records that a node profile replaced the active
// estimator: the active report names the new one and scores it afresh.
func (s *shadowSet) activeEstimatorChanged(name string) {
	if s != nil {
		s.active.ActiveEstimatorChanged(name)
	}
}

// evaluate counts the active corrections asked for on in, then runs every
// shadow's controllers on in.
func (s *shadowSet) evaluate(in qos.Input, corrections []qos.Correction) {
	if s == nil {
		return
	}
	s.active.Count(in.Now, corrections)
	for _, sh := range s.shadows {
		sh.Evaluate(in)
	}
}

// reports returns the active settings' report, then the shadows'.
func (s *shadowSet) reports() []shadow.Report {
	if s == nil {
		return nil
	}
	out := []shadow.Report{s.active.Report()}
	for _, sh := range s.shadows {
		out = append(out, sh.Report())
	}
	return out
}

// The shadows' metrics, labelled shadow=NAME (at most shadow.MaxShadows
// names and "active"; kind at most the qos.Kind values).
var (
	shadowEstimateDesc = prometheus.NewDesc("slackline_agent_shadow_estimate_cpus",
		"Latest estimate of each shadow setting (and of the active one, shadow=\"active\"), in cores; never offered.", []string{"shadow"}, nil)
	shadowSamplesDesc = prometheus.NewDesc("slackline_agent_shadow_samples_scored_total",
		"Samples at which each setting's estimate in force was scored against the real slack.", []string{"shadow"}, nil)
	shadowViolationsDesc = prometheus.NewDesc("slackline_agent_shadow_violations_total",
		"Scored samples at which each setting's estimate exceeded the real slack by more than 0.05 cores.", []string{"shadow"}, nil)
	shadowHarvestDesc = prometheus.NewDesc("slackline_agent_shadow_harvest_ratio",
		"Mean estimate over mean real slack over the scored samples, per setting.", []string{"shadow"}, nil)
	shadowViolationRateDesc = prometheus.NewDesc("slackline_agent_shadow_violation_ratio",
		"Violations over scored samples, per setting.", []string{"shadow"}, nil)
	shadowCorrectionsDesc = prometheus.NewDesc("slackline_agent_shadow_corrections_total",
		"QoS corrections each setting asked for (a shadow's are never applied), by kind.", []string{"shadow", "kind"}, nil)
	shadowCorrectionsRateDesc = prometheus.NewDesc("slackline_agent_shadow_corrections_per_hour",
		"QoS corrections of every kind per hour of evaluations, per setting.", []string{"shadow"}, nil)
)

// shadowCollector exports the shadows' reports.
type shadowCollector struct{ set *shadowSet }

// Describe implements prometheus.Collector.
func (c shadowCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{shadowEstimateDesc, shadowSamplesDesc, shadowViolationsDesc, shadowHarvestDesc,
		shadowViolationRateDesc, shadowCorrectionsDesc, shadowCorrectionsRateDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c shadowCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.set.reports() {
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{r.Name}, labels...)...)
		}
		counter := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{r.Name}, labels...)...)
		}
		gauge(shadowEstimateDesc, r.Latest)
		counter(shadowSamplesDesc, float64(r.Samples))
		counter(shadowViolationsDesc, float64(r.Violations))
		gauge(shadowHarvestDesc, r.Harvest)
		gauge(shadowViolationRateDesc, r.ViolationRate)
		// Every kind from the start, at 0, so that rates have data.
		for k := qos.Kind(1); !strings.HasPrefix(k.String(), "kind("); k++ {
			counter(shadowCorrectionsDesc, float64(r.Corrections[k.String()]), k.String())
		}
		gauge(shadowCorrectionsRateDesc, r.CorrectionsPerHour())
	}
}

func (s nodeService) GetShadows(context.Context, *connect.Request[slacklinev1.GetShadowsRequest]) (*connect.Response[slacklinev1.GetShadowsResponse], error) {
	resp := &slacklinev1.GetShadowsResponse{}
	for i, r := range s.a.shadows.reports() {
		if i == 0 {
			resp.Active = shadowReportProto(r)
		} else {
			resp.Shadows = append(resp.Shadows, shadowReportProto(r))
		}
	}
	// A profile rollout's shadow (#29 item 5), named RolloutShadowName.
	if r, ok := s.a.rollout.report(); ok {
		resp.Shadows = append(resp.Shadows, shadowReportProto(r))
	}
	return connect.NewResponse(resp), nil
}

func shadowReportProto(r shadow.Report) *slacklinev1.ShadowReport {
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	p := &slacklinev1.ShadowReport{
		Name: r.Name, Estimator: r.Estimator, QosControllers: r.QoSControllers,
		LatestCpus: r.Latest, Estimates: int64(r.Estimates), Shrinks: int64(r.Shrinks),
		FirstEstimate: ts(r.FirstEstimate), LastEstimate: ts(r.LastEstimate),
		Samples: int64(r.Samples), Violations: int64(r.Violations), Unscored: int64(r.Unscored),
		MeanIdealCpus: r.MeanIdeal, MeanOfferedCpus: r.MeanOffered, Harvest: r.Harvest, SafeHarvest: r.SafeHarvest,
		ViolationRate: r.ViolationRate, MaxExcessCpus: r.MaxExcess,
		Evaluations: int64(r.Evaluations), FirstEvaluation: ts(r.FirstEvaluation), LastEvaluation: ts(r.LastEvaluation),
		CorrectionsPerHour: r.CorrectionsPerHour(),
	}
	for _, s := range r.Settings {
		p.Settings = append(p.Settings, &slacklinev1.ShadowSetting{Flag: s.Flag, Value: s.Value})
	}
	hours := r.LastEvaluation.Sub(r.FirstEvaluation).Hours()
	kinds := make([]string, 0, len(r.Corrections))
	for k := range r.Corrections {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		c := &slacklinev1.ShadowCorrections{Kind: k, Count: int64(r.Corrections[k])}
		if hours > 0 {
			c.PerHour = float64(c.Count) / hours
		}
		p.Corrections = append(p.Corrections, c)
	}
	return p
}
