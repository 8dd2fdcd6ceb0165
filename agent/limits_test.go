package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

// overflowingContainerizer is a fakeContainerizer whose polled files
// overflowed overflows times.
type overflowingContainerizer struct {
	*fakeContainerizer
	overflows atomic.Uint64
}

func (c *overflowingContainerizer) PolledFileOverflows() uint64 { return c.overflows.Load() }

// TestLimitHitsMetric: slackline_agent_limit_hits_total has a series at 0
// for each of the agent's limits from the start; the QoS loop adds what
// the disk I/O controller's quiet fsync p99 table and the containerizer's
// polled files turned away, each logged once; a profile's fresh
// controllers (counting from 0) add to the metric rather than resetting it.
func TestLimitHitsMetric(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	cz := &overflowingContainerizer{fakeContainerizer: newFakeContainerizer()}
	l := newQoSLoop(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Containerizer: cz},
		resources.Resources{}, nil, nil, nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l.limits.hits)
	want := func(quiet, files int) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP slackline_agent_limit_hits_total Times a bound of the agent was reached, by limit: qos_quiet_syncs (a guaranteed container's quiet fsync p99 not learned), open_files (a polled cgroup file read without being kept open).
# TYPE slackline_agent_limit_hits_total counter
slackline_agent_limit_hits_total{limit="open_files"} %d
slackline_agent_limit_hits_total{limit="qos_quiet_syncs"} %d
`, files, quiet)), "slackline_agent_limit_hits_total"); err != nil {
			t.Error(err)
		}
	}
	want(0, 0)

	// 4096 quiet p99s are kept: 4098 guaranteed containers over three
	// evaluations with an unmoving revocable counter (the first one not
	// quiet) turn 2 away twice.
	containers := make([]qos.Container, 4098)
	for i := range containers {
		containers[i] = qos.Container{ID: fmt.Sprintf("web-%d", i), Syncs: 400, SyncP99: time.Millisecond}
	}
	evaluate := func(evaluations int) {
		for i := range evaluations {
			l.controller.Evaluate(qos.Input{Now: time.Unix(int64(i), 0), Node: qos.Node{CPUs: 2, DiskIO: true},
				RevocableIOBytes: 1 << 20, Containers: containers})
			l.countLimits()
		}
	}
	newSet := func() qos.Controller {
		c, err := qos.NewSet([]string{"interference", "diskio"}, qos.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	l.controller = newSet()
	cz.overflows.Store(3)
	evaluate(3)
	want(4, 3)
	cz.overflows.Store(5)
	evaluate(1)
	want(6, 5)

	// A profile's controllers start at 0: their first 2 add to 6.
	l.controller = newSet()
	l.limits.reset(limitQuietSyncs)
	evaluate(2)
	want(8, 5)

	for _, limit := range agentLimits {
		if n := strings.Count(logs.String(), "limit="+limit); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", limit, n, logs.String())
		}
	}
}
