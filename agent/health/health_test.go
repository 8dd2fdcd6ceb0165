package health

import (
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// step is one check of a transcript: it starts at At (seconds after the
// task started), ends Took later with OK, and is expected to be due then
// and to decide Want.
type step struct {
	at, took float64
	ok       bool
	want     string // "" nothing, "healthy", "unhealthy", "kill"
}

func TestChecker(t *testing.T) {
	t.Parallel()
	policy := Policy{Type: slacklinev1.HealthCheck_TYPE_TCP, Delay: 2 * time.Second, Interval: 5 * time.Second,
		Timeout: time.Second, Grace: 10 * time.Second, ConsecutiveFailures: 3}
	tests := []struct {
		name  string
		steps []step
	}{
		{"healthy once, then quiet", []step{{2, 0.1, true, "healthy"}, {7, 0.1, true, ""}, {12, 0.1, true, ""}}},
		{"grace forgives failures before a first success", []step{
			{2, 0.1, false, ""}, {7, 0.1, false, ""}, {12, 0.1, false, "unhealthy"}, {17, 0.1, false, ""}, {22, 0.1, false, "kill"}}},
		{"a success ends the grace period", []step{
			{2, 0.1, true, "healthy"}, {7, 0.1, false, "unhealthy"}, {12, 0.1, false, ""}, {17, 0.1, false, "kill"}}},
		{"a success resets the count", []step{
			{2, 0.1, true, "healthy"}, {7, 0.1, false, "unhealthy"}, {12, 0.1, false, ""}, {17, 0.1, true, "healthy"},
			{22, 0.1, false, "unhealthy"}, {27, 0.1, false, ""}, {32, 0.1, true, "healthy"}}},
		// A check that takes longer than the interval: the next starts
		// when it ends, never overlapping.
		{"slow checks do not overlap", []step{{2, 7, true, "healthy"}, {9, 0.1, true, ""}, {14, 0.1, true, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Unix(1000, 0)
			at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
			c := NewChecker(policy, start)
			for i, s := range tt.steps {
				now := at(s.at)
				if i == 0 && c.Due(now.Add(-time.Millisecond)) {
					t.Fatalf("check due before the delay")
				}
				if !c.Due(now) {
					t.Fatalf("step %d: no check due at %vs (next %v)", i, s.at, c.Next().Sub(start))
				}
				c.Start(now)
				if c.Due(now) || !c.Next().IsZero() {
					t.Fatalf("step %d: a second check due while one is in flight", i)
				}
				d := c.Result(at(s.at+s.took), s.ok, "connection refused")
				got := ""
				switch {
				case d.Kill:
					got = "kill"
				case d.Report && d.Healthy:
					got = "healthy"
				case d.Report:
					got = "unhealthy"
				}
				if got != s.want {
					t.Fatalf("step %d at %vs (ok=%v): decided %q (%+v), want %q", i, s.at, s.ok, got, d, s.want)
				}
				if d.Kill && (c.Due(at(1e6)) || d.Message == "") {
					t.Fatalf("step %d: checks continue after a kill, or the kill has no message", i)
				}
			}
		})
	}
}

func TestCheckerKillReportsUnhealthyWhenFirstFailure(t *testing.T) {
	t.Parallel()
	// One failure allowed, no grace: the first failure is both the change
	// to unhealthy and the kill.
	c := NewChecker(Policy{Interval: time.Second, ConsecutiveFailures: 1}, time.Unix(0, 0))
	c.Start(time.Unix(0, 0))
	d := c.Result(time.Unix(0, 0), false, "HTTP 503")
	if !d.Kill || !d.Report || d.Healthy {
		t.Fatalf("decision %+v, want a kill that reports unhealthy", d)
	}
}

func TestCheckerDefer(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	c := NewChecker(Policy{Interval: time.Second, ConsecutiveFailures: 1}, start)
	c.Defer(start, 100*time.Millisecond)
	if c.Due(start) || !c.Due(start.Add(100*time.Millisecond)) {
		t.Fatal("a deferred check is due again only after the delay")
	}
}

// TestCheckerSkip: a check of a paused task neither fails nor passes: the
// count of failures, the health and the grace period are as before it,
// and the next check is due an interval after it started.
func TestCheckerSkip(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	c := NewChecker(Policy{Interval: 5 * time.Second, ConsecutiveFailures: 2}, start)
	c.Start(at(0))
	if d := c.Result(at(0), true, ""); !d.Report || !d.Healthy {
		t.Fatalf("first success = %+v, want healthy", d)
	}
	c.Start(at(5))
	if d := c.Result(at(5), false, "refused"); !d.Report || d.Healthy || d.Kill {
		t.Fatalf("first failure = %+v, want unhealthy", d)
	}
	for i := 10; i <= 30; i += 5 { // paused: many checks, none counted
		if !c.Due(at(i)) {
			t.Fatalf("no check due at %ds", i)
		}
		c.Start(at(i))
		c.Skip(at(i))
		if c.Due(at(i)) || !c.Due(at(i+5)) {
			t.Fatalf("after a skip at %ds, next due at %v, want %ds", i, c.Next().Sub(start), i+5)
		}
	}
	c.Start(at(35))
	if d := c.Result(at(35), false, "refused"); !d.Kill || d.Report {
		t.Fatalf("second failure = %+v, want the kill (the skips counted for nothing, the health unchanged)", d)
	}
}
