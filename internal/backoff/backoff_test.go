package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

func TestNextGrowsToMaxWithinJitter(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name     string
		min, max time.Duration
		// ceilings are the d of successive delays, each drawn from [d/2, d].
		ceilings []time.Duration
	}{
		{"doubles up to max", 100 * ms, time.Second, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}},
		{"min equals max", time.Second, time.Second, []time.Duration{time.Second, time.Second}},
		{"max below min counts as min", time.Second, 10 * ms, []time.Duration{time.Second, time.Second}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			for seed := range uint64(50) {
				b := Backoff{Min: test.min, Max: test.max, Rand: rand.New(rand.NewPCG(seed, seed))}
				for i, d := range test.ceilings {
					if got := b.Next(); got < d/2 || got > d {
						t.Fatalf("seed %d: delay %d = %v, want within [%v, %v]", seed, i, got, d/2, d)
					}
				}
				if got := b.Failures(); got != len(test.ceilings) {
					t.Errorf("Failures() = %d, want %d", got, len(test.ceilings))
				}
			}
		})
	}
}

func TestResetStartsFromMin(t *testing.T) {
	b := Backoff{Min: time.Second, Max: time.Minute, Rand: rand.New(rand.NewPCG(1, 2))}
	for range 10 {
		b.Next()
	}
	if got := b.Next(); got < 30*time.Second {
		t.Fatalf("after 10 failures the delay is %v, want at least Max/2", got)
	}
	b.Reset()
	if got := b.Next(); got < 500*time.Millisecond || got > time.Second {
		t.Errorf("after Reset the delay is %v, want within [Min/2, Min]", got)
	}
}

func TestSlowIsAboutMaxAndCounts(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second, Rand: rand.New(rand.NewPCG(3, 4))}
	for range 100 {
		if got := b.Slow(); got < 5*time.Second || got > 10*time.Second {
			t.Fatalf("Slow() = %v, want within [5s, 10s]", got)
		}
	}
	if got := b.Failures(); got != 100 {
		t.Errorf("Failures() = %d after 100 Slow, want 100", got)
	}
}

func TestSameSeedSameDelays(t *testing.T) {
	a := Backoff{Min: time.Millisecond, Max: time.Hour, Rand: rand.New(rand.NewPCG(7, 7))}
	b := Backoff{Min: time.Millisecond, Max: time.Hour, Rand: rand.New(rand.NewPCG(7, 7))}
	spread := map[time.Duration]bool{}
	for range 20 {
		x, y := a.Next(), b.Next()
		if x != y {
			t.Fatalf("same seed gave %v and %v", x, y)
		}
		spread[x] = true
	}
	if len(spread) < 15 {
		t.Errorf("only %d distinct delays in 20: the jitter does not spread", len(spread))
	}
}

func TestManyFailuresDoNotOverflow(t *testing.T) {
	// Min·2ⁿ overflows int64 after 21 failures: the delay must reach Max and
	// stay there, never wrap around to something small.
	const maxDelay = time.Duration(1<<63 - 1)
	b := Backoff{Min: 3 * time.Hour, Max: maxDelay, Rand: rand.New(rand.NewPCG(5, 6))}
	for n := range 200 {
		ceiling := math.Min(float64(b.Min)*math.Pow(2, float64(n)), float64(maxDelay))
		if got := b.Next(); float64(got) < ceiling/2*0.999 || float64(got) > ceiling*1.001 {
			t.Fatalf("delay after %d failures = %v, want within [%v, %v]", n, got, time.Duration(ceiling/2), time.Duration(ceiling))
		}
	}
}

func TestJitterOfNothing(t *testing.T) {
	var b Backoff
	if got := b.Jitter(0); got != 0 {
		t.Errorf("Jitter(0) = %v, want 0", got)
	}
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := Backoff{Min: time.Second, Max: time.Second}
		start := time.Now()
		if !b.Wait(t.Context()) {
			t.Fatal("Wait returned false with a live context")
		}
		if waited := time.Since(start); waited < 500*time.Millisecond || waited > time.Second {
			t.Errorf("waited %v, want within [500ms, 1s]", waited)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if b.Wait(ctx) {
			t.Error("Wait returned true with a cancelled context")
		}
	})
}
