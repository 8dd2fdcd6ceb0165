package estimator_test

import (
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// TestPacer: shrinks are sent at once; a rise within RiseInterval of the
// last sent rise is held and sent at its newest value once the interval
// has passed, unless it is lasting and the estimate just before it sent a
// rise (the second step of slack that a load left when it stopped), even
// right after another change, or large (sent at once even when the first
// step was held behind a small rise just before); what is sent is never
// above the estimate.
func TestPacer(t *testing.T) {
	t.Parallel()
	p, err := estimator.NewPacer(500 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const N, L, G = estimator.RiseNoisy, estimator.RiseLasting, estimator.RiseLarge
	steps := []struct {
		ms       int
		estimate float64
		rise     estimator.Rise
		wantSend bool
		want     float64
	}{
		{0, 1, N, true, 1},       // the first estimate is sent at once
		{100, 0.5, N, true, 0.5}, // a shrink at once
		{200, 0.8, N, false, 0.5},
		{300, 1.2, L, false, 0.5}, // held: lasting, but the estimate before sent no rise
		{400, 0.4, N, true, 0.4},  // a shrink while a rise is held: at once
		{500, 1.5, N, true, 1.5},  // 500 ms after the last rise: the newest value
		{600, 1.6, N, false, 1.5},
		{700, 1.8, L, false, 1.5}, // the estimate before held its rise: still held
		{1000, 1.8, N, true, 1.8},
		{1000, 1.8, N, false, 1.8}, // unchanged: nothing to send
		{1100, 0, N, true, 0},      // a burst
		{3000, 0, N, false, 0},
		{3100, 0.3, N, true, 0.3},  // a change...
		{3200, 0.1, N, true, 0.1},  // ...and another, shortly before the burst ends
		{3600, 0.9, N, true, 0.9},  // the first step, 500 ms after the last rise
		{3700, 1.8, L, true, 1.8},  // its lasting second step follows at once
		{3800, 1.9, N, false, 1.8}, // a noisy rise is paced
		{3900, 2.5, L, false, 1.8}, // so is a lasting one after it
		{4200, 2.5, N, true, 2.5},
		{4300, 0, N, true, 0},      // a burst
		{6000, 0.2, N, true, 0.2},  // a small rise just before it ends...
		{6200, 0.6, N, false, 0.2}, // ...holds the first step
		{6300, 1.9, G, true, 1.9},  // the second is large: at once all the same
		{6400, 0, N, true, 0},
		{6500, 1.5, G, true, 1.5}, // large: at once, 200 ms after a rise and after no rise
	}
	for _, s := range steps {
		got, send := p.Next(at(s.ms), resources.New(s.estimate, 0, 0), s.rise)
		if send != s.wantSend || got.CPUs() != s.want {
			t.Errorf("at %d ms, estimate %v (rise %v): sent %v (%v), want %v (%v)", s.ms, s.estimate, s.rise, got.CPUs(), send, s.want, s.wantSend)
		}
		if got.CPUs() > s.estimate {
			t.Errorf("at %d ms: %v is above the estimate %v", s.ms, got.CPUs(), s.estimate)
		}
	}
	if p.Deferred() != 7 {
		t.Errorf("%d estimates held, want 7", p.Deferred())
	}
	p.Reset()
	if got, send := p.Next(at(6000), resources.New(2, 0, 0), estimator.RiseNoisy); !send || got.CPUs() != 2 {
		t.Errorf("after Reset: sent %v (%v), want 2 at once", got.CPUs(), send)
	}
	if _, err := estimator.NewPacer(-time.Second); err == nil {
		t.Error("a negative rise interval is accepted")
	}
}

// TestPacerNoInterval: with RiseInterval 0 every change is sent as it
// comes, lasting or not.
func TestPacerNoInterval(t *testing.T) {
	t.Parallel()
	p, err := estimator.NewPacer(0)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []float64{0, 1, 0.5, 0.6, 0.7, 2} {
		got, send := p.Next(t0.Add(time.Duration(i)*time.Millisecond), resources.New(c, 0, 0), estimator.RiseNoisy)
		if !send || got.CPUs() != c {
			t.Errorf("estimate %v: sent %v (%v), want it sent", c, got.CPUs(), send)
		}
	}
}

// TestPacerResetForgetsTheRise: a Reset right after a rise starts a fresh
// pacer: the first estimate after it is sent at once, and a lasting rise
// 100 ms later is held as a fresh pacer holds it (the rise sent before the
// Reset does not make it a second step).
func TestPacerResetForgetsTheRise(t *testing.T) {
	t.Parallel()
	p, err := estimator.NewPacer(500 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cpus := func(c float64) resources.Resources { return resources.New(c, 0, 0) }
	p.Next(at(0), cpus(0), estimator.RiseNoisy)
	if _, sent := p.Next(at(3000), cpus(1), estimator.RiseNoisy); !sent {
		t.Fatal("a rise 3 s after the last was held")
	}
	p.Reset()
	if got, sent := p.Next(at(3100), cpus(1), estimator.RiseNoisy); !sent || got.CPUs() != 1 {
		t.Fatalf("first estimate after Reset: sent=%v %v, want sent 1", sent, got.CPUs())
	}
	if got, sent := p.Next(at(3200), cpus(2), estimator.RiseLasting); sent {
		t.Fatalf("a lasting rise 100 ms after the new session's first estimate was sent (%v): the rise before Reset carried over", got.CPUs())
	}
}
