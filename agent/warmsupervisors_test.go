package agent

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slackline/slackline/agent/containerizer"
)

type warmStatsFake struct {
	Containerizer
	st containerizer.WarmSupervisorStats
}

func (f warmStatsFake) WarmSupervisorStats() containerizer.WarmSupervisorStats { return f.st }

func TestWarmSupervisorCollector(t *testing.T) {
	t.Parallel()
	c := warmSupervisorCollector{warmStatsFake{st: containerizer.WarmSupervisorStats{Hits: 5, Misses: 2, DiedIdle: 1, StartFailures: 3}}}
	want := `
# HELP slackline_agent_warm_supervisor_launches_total Launches that took a warm supervisor (outcome hit) or found none ready and started their own (miss).
# TYPE slackline_agent_warm_supervisor_launches_total counter
slackline_agent_warm_supervisor_launches_total{outcome="hit"} 5
slackline_agent_warm_supervisor_launches_total{outcome="miss"} 2
# HELP slackline_agent_warm_supervisor_start_failures_total Warm supervisors that could not be started.
# TYPE slackline_agent_warm_supervisor_start_failures_total counter
slackline_agent_warm_supervisor_start_failures_total 3
# HELP slackline_agent_warm_supervisors_died_idle_total Warm supervisors that ended before a launch took them.
# TYPE slackline_agent_warm_supervisors_died_idle_total counter
slackline_agent_warm_supervisors_died_idle_total 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// A containerizer without warm supervisors exports nothing.
	if n := testutil.CollectAndCount(warmSupervisorCollector{}); n != 0 {
		t.Errorf("%d metrics from a containerizer without warm supervisors", n)
	}
}
