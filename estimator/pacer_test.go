package estimator_test

import (
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// TestPacer: shrinks are sent at once, a rise within RiseInterval of the
// last sent rise is held and sent at its newest value once the interval
// has passed, and what is sent is never above the estimate.
func TestPacer(t *testing.T) {
	t.Parallel()
	p, err := estimator.NewPacer(500 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		ms       int
		estimate float64
		wantSend bool
		want     float64
	}{
		{0, 1, true, 1},       // the first estimate is sent at once
		{100, 0.5, true, 0.5}, // a shrink at once
		{200, 0.8, false, 0.5},
		{300, 1.2, false, 0.5}, // held: the last rise was at 0 ms
		{400, 0.4, true, 0.4},  // a shrink while a rise is held: at once
		{500, 1.5, true, 1.5},  // 500 ms after the last rise: the newest value
		{600, 1.6, false, 1.5},
		{900, 1.6, false, 1.5},
		{1000, 1.7, true, 1.7},
		{1000, 1.7, false, 1.7}, // unchanged: nothing to send
	}
	for _, s := range steps {
		got, send := p.Next(at(s.ms), resources.New(s.estimate, 0, 0))
		if send != s.wantSend || got.CPUs() != s.want {
			t.Errorf("at %d ms, estimate %v: sent %v (%v), want %v (%v)", s.ms, s.estimate, got.CPUs(), send, s.want, s.wantSend)
		}
		if got.CPUs() > s.estimate {
			t.Errorf("at %d ms: %v is above the estimate %v", s.ms, got.CPUs(), s.estimate)
		}
	}
	if p.Deferred() != 4 {
		t.Errorf("%d estimates held, want 4", p.Deferred())
	}
	p.Reset()
	if got, send := p.Next(at(1100), resources.New(2, 0, 0)); !send || got.CPUs() != 2 {
		t.Errorf("after Reset: sent %v (%v), want 2 at once", got.CPUs(), send)
	}
	if _, err := estimator.NewPacer(-time.Second); err == nil {
		t.Error("a negative rise interval is accepted")
	}
}
