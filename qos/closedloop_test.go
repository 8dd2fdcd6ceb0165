package qos_test

import (
	"testing"
	"time"

	"github.com/slackline/slackline/qos"
)

func newInterference(t *testing.T, cfg qos.Config) qos.Controller {
	t.Helper()
	c, err := qos.NewSet([]string{"interference"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// limitReversals counts the changes of direction of the subtree limit
// (unlimited counts as the node's CPUs).
func limitReversals(steps []step, cpus float64) int {
	var reversals, lastDirection int
	prev := -1.0
	for _, s := range steps {
		limit := s.in.RevocableLimit
		if limit == 0 {
			limit = cpus
		}
		if prev >= 0 && limit != prev {
			direction := 1
			if limit < prev {
				direction = -1
			}
			if lastDirection != 0 && direction != lastDirection {
				reversals++
			}
			lastDirection = direction
		}
		prev = limit
	}
	return reversals
}

// TestStepResponse: web-1's CPU demand steps from 1 to 5 cores beside 4 cores
// of revocable hogs; the controller throttles at the first evaluation, brings
// the p99 back under target within two decreases, settles without
// oscillating, and removes the limit once the load steps back down.
func TestStepResponse(t *testing.T) {
	p := newPlant()
	p.noise = 50 * time.Microsecond
	p.guaranteed = 1
	p.addHog("batch-1", 2, -10*time.Minute)
	p.addHog("batch-2", 2, -5*time.Minute)
	c := newInterference(t, qos.DefaultConfig())

	before := p.run(c, 0, 10*time.Second, nil)
	for _, s := range before {
		if len(s.out) > 0 {
			t.Fatalf("%v: correction before any interference: %v", s.in.Now.Sub(t0), s.out)
		}
	}

	p.guaranteed = 5
	steps := p.run(c, 10*time.Second, 300*time.Second, nil)
	first := steps[0]
	if len(first.out) != 1 || first.out[0].Kind != qos.Throttle || first.out[0].ContainerID != "" {
		t.Fatalf("first evaluation after the step: got %v, want a throttle of the subtree", first.out)
	}
	t.Logf("first correction: %v", first.out[0])

	var recovered time.Duration
	for _, s := range steps {
		if webP99(s.in) <= time.Millisecond {
			recovered = s.in.Now.Sub(at(10 * time.Second))
			break
		}
	}
	if recovered == 0 || recovered > 1500*time.Millisecond {
		t.Errorf("p99 back under 1 ms %v after the step, want within 1.5 s", recovered)
	}

	settled := steps[100:] // from t = 20 s
	var violations int
	for _, s := range settled {
		if webP99(s.in) > time.Millisecond {
			violations++
		}
		for _, c := range s.out {
			if c.Kind == qos.Kill {
				t.Fatalf("%v: kill while throttling works: %v", s.in.Now.Sub(t0), c)
			}
		}
		if l := s.in.RevocableLimit; l == 0 || l < 0.7 || l > 1.6 {
			t.Fatalf("%v: limit %v left the band [0.7, 1.6] after settling", s.in.Now.Sub(t0), l)
		}
	}
	// Probes above the settled level at 30 s, 60 s, 120 s... after each failure.
	if frac := float64(violations) / float64(len(settled)); frac > 0.005 {
		t.Errorf("web-1 over target in %d of %d samples after settling (%.2f%%), want <= 0.5%%", violations, len(settled), 100*frac)
	}
	reversals := limitReversals(settled, p.cpus)
	if reversals > 10 {
		t.Errorf("limit changed direction %d times in 280 s after settling, want <= 10", reversals)
	}
	t.Logf("settled: %d violating samples of %d, %d reversals, final limit %.2f", violations, len(settled), reversals, p.limit)

	// The load steps back down: the cap is forgotten and the limit removed.
	p.guaranteed = 1
	back := p.run(c, 300*time.Second, 330*time.Second, nil)
	var removed time.Duration
	for _, s := range back {
		for _, c := range s.out {
			if c.Kind == qos.Unthrottle && c.CPULimit == 0 {
				removed = s.in.Now.Sub(at(300 * time.Second))
			}
		}
	}
	if removed == 0 || removed > 15*time.Second {
		t.Errorf("limit removed %v after the load fell, want within 15 s", removed)
	}
	if p.limit != 0 {
		t.Errorf("limit %v at the end, want none", p.limit)
	}
}

// TestBackoffPreventsOscillation: the same settled plant without probe
// backoff keeps climbing into the knee and falling back; the default
// configuration does so exponentially less often. This keeps the
// no-oscillation test above honest: it can fail.
func TestBackoffPreventsOscillation(t *testing.T) {
	run := func(cfg qos.Config) (reversals, violations int) {
		p := newPlant()
		p.guaranteed = 5
		p.addHog("batch-1", 2, -10*time.Minute)
		p.addHog("batch-2", 2, -5*time.Minute)
		steps := p.run(newInterference(t, cfg), 0, 300*time.Second, nil)
		for _, s := range steps[100:] {
			if webP99(s.in) > time.Millisecond {
				violations++
			}
		}
		return limitReversals(steps[100:], p.cpus), violations
	}
	naive := qos.DefaultConfig()
	naive.Interference.ProbeBackoff = time.Nanosecond
	naive.Interference.ProbeBackoffMax = time.Nanosecond
	naiveReversals, naiveViolations := run(naive)
	reversals, violations := run(qos.DefaultConfig())
	t.Logf("without backoff: %d reversals, %d violating samples; default: %d reversals, %d violating samples",
		naiveReversals, naiveViolations, reversals, violations)
	if naiveReversals < 4*reversals || naiveViolations < 4*violations {
		t.Errorf("backoff should cut reversals and violations at least 4-fold: without %d/%d, with %d/%d",
			naiveReversals, naiveViolations, reversals, violations)
	}
}

// TestNoisyNeighbourKilledAfterThrottleFails: a cache-thrashing hog hurts
// web-1 whatever its CPU share. Throttling does not reduce the delay the
// hogs cause (who-delayed-whom), so EffectWindow after the first decrease
// the controller undoes it (best-effort work gets its CPU back) and kills
// that hog instead (it delays web-1 most) and only it; calm returns and no
// limit is left.
func TestNoisyNeighbourKilledAfterThrottleFails(t *testing.T) {
	p := newPlant()
	p.guaranteed = 1
	p.addHog("batch-1", 2, -10*time.Minute)
	thrasher := p.addHog("batch-2", 1, -20*time.Minute) // older, smaller: only attribution can single it out
	p.addHog("batch-3", 2, -time.Minute)
	cfg := qos.DefaultConfig()
	c := newInterference(t, cfg)
	p.run(c, 0, 5*time.Second, nil)
	if p.limit != 0 {
		t.Fatalf("throttled before the thrasher started: limit %v", p.limit)
	}

	thrasher.thrash = 2 * time.Millisecond
	steps := p.run(c, 5*time.Second, 60*time.Second, nil)
	var firstThrottle, undone, killAt time.Time
	var kills []qos.Correction
	for _, s := range steps {
		for _, c := range s.out {
			switch {
			case c.Kind == qos.Throttle && firstThrottle.IsZero():
				firstThrottle = s.in.Now
			case c.Kind == qos.Unthrottle && c.CPULimit == 0 && undone.IsZero():
				undone = s.in.Now
			case c.Kind == qos.Kill:
				kills = append(kills, c)
				killAt = s.in.Now
			}
		}
	}
	if len(kills) != 1 || kills[0].ContainerID != "batch-2" {
		t.Fatalf("kills = %v, want exactly one, of batch-2", kills)
	}
	// Halving from 5 cores every DecreaseInterval reaches the floor in five
	// steps; the verdict comes half an EffectWindow after the last.
	if firstThrottle.IsZero() || undone.IsZero() || undone.Sub(firstThrottle) > 4*cfg.Interference.DecreaseInterval+cfg.Interference.EffectWindow {
		t.Errorf("throttled at %v, undone at %v: want the useless throttling undone within %v",
			firstThrottle.Sub(t0), undone.Sub(t0), 4*cfg.Interference.DecreaseInterval+cfg.Interference.EffectWindow)
	}
	if killAt.Before(undone) {
		t.Errorf("killed at %v, before throttling was judged (%v)", killAt.Sub(t0), undone.Sub(t0))
	}
	t.Logf("throttled at %v, undone at %v, kill at %v: %v", firstThrottle.Sub(t0), undone.Sub(t0), killAt.Sub(t0), kills[0].Reason)
	if p.limit != 0 {
		t.Errorf("limit %v 50 s after the kill, want removed", p.limit)
	}
}
