package estimator_test

import (
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// TestPacer: shrinks are sent at once, a rise within RiseInterval of the
// last sent rise is held and sent at its newest value once the interval
// has passed, unless it directly follows a rise that ended a quiet spell
// (2 s without any change at 500 ms), and what is sent is never above the
// estimate.
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
		{1100, 0, true, 0},      // a burst
		{3000, 0, false, 0},
		{3100, 0.6, true, 0.6},  // the quiet spell ends (2 s without a change)...
		{3200, 1.8, true, 1.8},  // ...and its second step follows at once
		{3300, 1.9, false, 1.8}, // a third is paced
		{3700, 1.9, true, 1.9},
		{3800, 0.2, true, 0.2},
		{5700, 0.2, false, 0.2}, // 1.9 s without a change: not a quiet spell
		{5750, 1.0, true, 1.0},
		{5800, 1.8, false, 1.0},
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
	if p.Deferred() != 6 {
		t.Errorf("%d estimates held, want 6", p.Deferred())
	}
	p.Reset()
	if got, send := p.Next(at(6000), resources.New(2, 0, 0)); !send || got.CPUs() != 2 {
		t.Errorf("after Reset: sent %v (%v), want 2 at once", got.CPUs(), send)
	}
	if _, err := estimator.NewPacer(-time.Second); err == nil {
		t.Error("a negative rise interval is accepted")
	}
}

// TestPacerResetForgetsTheQuietSpell: a Reset right after a rise that ended
// a quiet spell starts a fresh pacer: the first estimate after it is sent
// at once, and a rise 100 ms later is held as a fresh pacer holds it (the
// old second-step allowance does not carry over into the new session).
func TestPacerResetForgetsTheQuietSpell(t *testing.T) {
	t.Parallel()
	p, err := estimator.NewPacer(500 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cpus := func(c float64) resources.Resources { return resources.New(c, 0, 0) }
	p.Next(at(0), cpus(0))
	if _, sent := p.Next(at(3000), cpus(1)); !sent { // ends a 3 s quiet spell
		t.Fatal("the rise after a quiet spell was held")
	}
	p.Reset()
	if got, sent := p.Next(at(3100), cpus(1)); !sent || got.CPUs() != 1 {
		t.Fatalf("first estimate after Reset: sent=%v %v, want sent 1", sent, got.CPUs())
	}
	if got, sent := p.Next(at(3200), cpus(1.5)); sent {
		t.Fatalf("a rise 100 ms after the new session's first estimate was sent (%v): the quiet spell carried over Reset", got.CPUs())
	}
}
