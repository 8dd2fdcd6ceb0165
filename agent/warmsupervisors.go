package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/agent/containerizer"
)

// warmSupervisorCounters is what a containerizer with warm supervisors
// (*containerizer.Containerizer) reports of them.
type warmSupervisorCounters interface {
	WarmSupervisorStats() containerizer.WarmSupervisorStats
}

// warmSupervisorCollector exports the containerizer's warm supervisor
// counters (containerizer.WarmSupervisorLimit bounds them), when it has any.
type warmSupervisorCollector struct{ cz Containerizer }

var (
	warmLaunchesDesc = prometheus.NewDesc("slackline_agent_warm_supervisor_launches_total",
		"Launches that took a warm supervisor (outcome hit) or found none ready and started their own (miss).", []string{"outcome"}, nil)
	warmDiedDesc = prometheus.NewDesc("slackline_agent_warm_supervisors_died_idle_total",
		"Warm supervisors that ended before a launch took them.", nil, nil)
	warmFailedDesc = prometheus.NewDesc("slackline_agent_warm_supervisor_start_failures_total",
		"Warm supervisors that could not be started.", nil, nil)
)

func (c warmSupervisorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- warmLaunchesDesc
	ch <- warmDiedDesc
	ch <- warmFailedDesc
}

func (c warmSupervisorCollector) Collect(ch chan<- prometheus.Metric) {
	w, ok := c.cz.(warmSupervisorCounters)
	if !ok {
		return
	}
	st := w.WarmSupervisorStats()
	ch <- prometheus.MustNewConstMetric(warmLaunchesDesc, prometheus.CounterValue, float64(st.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(warmLaunchesDesc, prometheus.CounterValue, float64(st.Misses), "miss")
	ch <- prometheus.MustNewConstMetric(warmDiedDesc, prometheus.CounterValue, float64(st.DiedIdle))
	ch <- prometheus.MustNewConstMetric(warmFailedDesc, prometheus.CounterValue, float64(st.StartFailures))
}
