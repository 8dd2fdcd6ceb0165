package estimator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
)

// feed replays cpu(i), one 100 ms sample at a time, into a fresh fast
// estimator for a guaranteed container of 2 cpus, estimating after each
// sample as the agent does, and returns the estimates (cpus).
func feed(t *testing.T, cfg estimator.Config, n int, cpu func(i int) float64) []float64 {
	t.Helper()
	est := newEstimator(t, "fast", cfg)
	var history []estimator.Sample
	estimates := make([]float64, n)
	for i := range n {
		now := t0.Add(time.Duration(i+1) * 100 * time.Millisecond)
		history = append(history, estimator.Sample{Time: now, CPU: cpu(i)})
		estimates[i] = est.Estimate(estimator.Input{Now: now, Containers: []estimator.Container{
			guaranteed("g", "cpus:2", history),
		}}).CPUs()
	}
	return estimates
}

// TestFastAsymmetry: the fast estimator shrinks in the estimate after a
// rise and grows only once the fall has held for the confirmation period;
// between the two, noise within its band changes nothing.
func TestFastAsymmetry(t *testing.T) {
	cfg := estimator.DefaultConfig()
	fast := cfg.Fast
	confirm := int(fast.Confirm / (100 * time.Millisecond)) // samples
	idle := 2 - 2*fast.Margin                               // raw estimate of an idle container
	tests := []struct {
		name  string
		n     int
		cpu   func(i int) float64
		check func(t *testing.T, est []float64)
	}{
		{
			name: "a spike shrinks the estimate in one sample",
			n:    60,
			cpu: func(i int) float64 {
				if i == 50 {
					return 1.5
				}
				return 0
			},
			check: func(t *testing.T, est []float64) {
				if est[49] < idle-2*fast.Band || est[49] > idle {
					t.Errorf("idle estimate %.3f, want %.3f within two bands", est[49], idle)
				}
				if want := 2 - 1.5 - 2*fast.Margin; est[50] > want {
					t.Errorf("estimate after the spike %.3f, want at most %.3f", est[50], want)
				}
			},
		},
		{
			name: "growth needs the confirmation period",
			n:    40 + confirm + 5,
			cpu: func(i int) float64 {
				if i < 40 {
					return 1.5
				}
				return 0
			},
			check: func(t *testing.T, est []float64) {
				busy := 2 - 1.5 - 2*fast.Margin
				for i := 40; i < 40+confirm-1; i++ {
					if est[i] > busy+1e-9 {
						t.Errorf("%d ms after the drop: estimate %.3f, want at most %.3f until %v passed", (i-39)*100, est[i], busy, fast.Confirm)
					}
				}
				if got := est[40+confirm]; got < idle-2*fast.Band {
					t.Errorf("%v after the drop: estimate %.3f, want about %.3f", fast.Confirm+100*time.Millisecond, got, idle)
				}
			},
		},
		{
			name: "noise within the band changes nothing",
			n:    80,
			cpu: func(i int) float64 {
				return 0.5 + 0.01*float64(i%3)
			},
			check: func(t *testing.T, est []float64) {
				for i := 40; i < len(est); i++ {
					if est[i] != est[39] {
						t.Fatalf("estimate moved from %.3f to %.3f at sample %d on noise of 0.02 cores", est[39], est[i], i)
					}
				}
			},
		},
		{
			name: "a recurring burst is held back before it comes",
			n:    250,
			cpu: func(i int) float64 {
				if i%50 >= 20 && i%50 < 25 { // 0.5 s of a core every 5 s
					return 1
				}
				return 0
			},
			check: func(t *testing.T, est []float64) {
				// Bursts start at samples 20, 70, 120, 170, 220: three are
				// seen, so the fourth (at 170) is expected, the first not.
				before := func(start int) float64 { return est[start-2] } // the estimate in force 100 ms before
				if got := before(70); got < idle-2*fast.Band {
					t.Errorf("before the second burst the estimate is %.3f, want the idle %.3f", got, idle)
				}
				for _, start := range []int{170, 220} {
					if got, want := before(start), 2-1-2*fast.Margin; got > want+1e-9 {
						t.Errorf("100 ms before the burst at sample %d the estimate is %.3f, want at most %.3f", start, got, want)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, feed(t, cfg, tt.n, tt.cpu))
		})
	}
}

// TestFastNeedsSamples: until a container has MinSamples samples in the
// window, its whole allocation is taken as used.
func TestFastNeedsSamples(t *testing.T) {
	cfg := estimator.DefaultConfig()
	est := feed(t, cfg, cfg.MinSamples+1, func(int) float64 { return 0 })
	for i := range cfg.MinSamples - 1 {
		if est[i] != 0 {
			t.Errorf("after %d samples the estimate is %.3f, want 0", i+1, est[i])
		}
	}
	if est[cfg.MinSamples] == 0 {
		t.Errorf("after %d samples the estimate is still 0", cfg.MinSamples+1)
	}
}

func TestFastConfigErrors(t *testing.T) {
	for name, change := range map[string]func(*estimator.FastConfig){
		"no confirmation": func(c *estimator.FastConfig) { c.Confirm = 0 },
		"margin of 100%":  func(c *estimator.FastConfig) { c.Margin = 1 },
		"negative band":   func(c *estimator.FastConfig) { c.Band = -0.1 },
		"negative onset":  func(c *estimator.FastConfig) { c.Onset = -1 },
	} {
		cfg := estimator.DefaultConfig()
		change(&cfg.Fast)
		if _, err := estimator.New("fast", cfg); !errors.Is(err, estimator.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestFastOffersAfterConfirmEvenInARhythm: a guaranteed task that burns its
// allocation for ~3 s and stops until its slack is offered (what
// scripts/bench/slack does) recurs, but its slack is offered once the fall
// has held for Confirm, every time: rhythms are only held back out of quiet.
func TestFastOffersAfterConfirmEvenInARhythm(t *testing.T) {
	cfg := estimator.DefaultConfig()
	est := newEstimator(t, "fast", cfg)
	var history []estimator.Sample
	i := 0
	step := func(cpu float64) float64 {
		i++
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		history = append(history, estimator.Sample{Time: now, CPU: cpu})
		if len(history) > 600 {
			history = history[1:]
		}
		return est.Estimate(estimator.Input{Now: now, Containers: []estimator.Container{guaranteed("g", "cpus:2", history)}}).CPUs()
	}
	limit := int(cfg.Fast.Confirm/(100*time.Millisecond)) + 1
	for trial := range 30 {
		for range 32 + trial%3 {
			step(2)
		}
		idle := 1
		for step(0) < 1 {
			if idle++; idle > 100 {
				break
			}
		}
		if idle > limit {
			t.Errorf("trial %d: slack offered %d00 ms after the fall, want at most %d00 ms", trial, idle, limit)
		}
		step(0)
	}
}
