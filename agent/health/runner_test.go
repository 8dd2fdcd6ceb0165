package health

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// outcome is one scripted probe result.
type outcome struct {
	ok, paused bool
	detail     string
}

// scriptedProber answers each probe with the next outcome it is sent.
type scriptedProber struct{ next chan outcome }

func (s scriptedProber) Probe(ctx context.Context, _ string, _ Policy) (bool, string, bool) {
	select {
	case o := <-s.next:
		return o.ok, o.detail, o.paused
	case <-ctx.Done():
		return false, ctx.Err().Error(), false
	}
}

// TestRunnerPausedChecksDoNotFail: a task whose checks find it paused
// (frozen by QoS) is not killed, however many there are with one failure
// allowed; the first real failure kills it, and reports its own detail.
func TestRunnerPausedChecksDoNotFail(t *testing.T) {
	t.Parallel()
	prober := scriptedProber{next: make(chan outcome)}
	decisions := make(chan Decision, 8)
	r := NewRunner(RunnerConfig{Prober: prober, Decide: func(_ string, d Decision) { decisions <- d }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r.Watch("c1", Policy{Type: slacklinev1.HealthCheck_TYPE_COMMAND, Interval: time.Millisecond,
		Timeout: time.Hour, ConsecutiveFailures: 1}, time.Now())
	for range 5 {
		prober.next <- outcome{paused: true, detail: "command: task paused"}
	}
	prober.next <- outcome{detail: "command exited with code 1"}
	d := <-decisions
	if !d.Kill || !strings.Contains(d.Message, "code 1") {
		t.Fatalf("first decision %+v, want the kill for the failure (paused checks count for nothing)", d)
	}
	cancel()
	<-done
	done <- nil
	if n := testutil.ToFloat64(r.checks.WithLabelValues("command", "paused")); n != 5 {
		t.Errorf("paused checks counted %v, want 5", n)
	}
	if n := testutil.ToFloat64(r.checks.WithLabelValues("command", "failed")); n != 1 {
		t.Errorf("failed checks counted %v, want 1", n)
	}
}
