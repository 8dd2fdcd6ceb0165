package estimator_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// steadyHistory returns n samples every 100 ms ending at end, each using cpu
// cores and mem MiB.
func steadyHistory(end time.Time, n int, cpu, mem float64) []estimator.Sample {
	h := make([]estimator.Sample, n)
	for i := range h {
		h[i] = estimator.Sample{
			Time: end.Add(-time.Duration(n-1-i) * 100 * time.Millisecond),
			CPU:  cpu, MemBytes: uint64(mem * (1 << 20)),
		}
	}
	return h
}

func guaranteed(id, alloc string, history []estimator.Sample) estimator.Container {
	return estimator.Container{ID: id, Allocated: resources.MustParse(alloc), History: history}
}

// noHysteresis is the default config publishing raw estimates, so that
// tables can state the raw arithmetic.
func noHysteresis() estimator.Config {
	cfg := estimator.DefaultConfig()
	cfg.Hysteresis.Off = true
	return cfg
}

func newEstimator(t testing.TB, name string, cfg estimator.Config) estimator.Estimator {
	t.Helper()
	est, err := estimator.New(name, cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return est
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.0015 }

func TestNoopAndFixed(t *testing.T) {
	busy := estimator.Input{Now: t0, Containers: []estimator.Container{
		guaranteed("a", "cpus:1", steadyHistory(t0, 100, 0.1, 10)),
	}}
	cfg := estimator.DefaultConfig()
	cfg.Fixed = resources.MustParse("cpus:14;mem:100;disk:5;bandwidth:300;ports:[1-2]")
	if got := newEstimator(t, "noop", cfg).Estimate(busy); !got.IsEmpty() {
		t.Errorf("noop = %v, want nothing", got)
	}
	// fixed ignores usage (Mesos parity) and only ever offers cpus, mem and
	// bandwidth.
	want := resources.MustParse("cpus:14;mem:100;bandwidth:300")
	if got := newEstimator(t, "fixed", cfg).Estimate(busy); !got.Equal(want) {
		t.Errorf("fixed = %v, want %v", got, want)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := estimator.New("magic", estimator.DefaultConfig()); !errors.Is(err, estimator.ErrUnknown) {
		t.Errorf("New(magic) = %v, want ErrUnknown", err)
	}
	bad := []func(*estimator.Config){
		func(c *estimator.Config) { c.Window = 0 },
		func(c *estimator.Config) { c.Percentile = 0 },
		func(c *estimator.Config) { c.Percentile = 101 },
		func(c *estimator.Config) { c.Margin = 1 },
		func(c *estimator.Config) { c.MemoryMargin = -0.1 },
		func(c *estimator.Config) { c.MinSamples = 0 },
		func(c *estimator.Config) { c.PeakHalfLife = 0 },
		func(c *estimator.Config) { c.Hysteresis.Fraction = 0.5 },
		func(c *estimator.Config) { c.Hysteresis.CPUs = math.NaN() },
	}
	for _, name := range []string{"usage", "predictive"} {
		for i, mutate := range bad {
			cfg := estimator.DefaultConfig()
			mutate(&cfg)
			if _, err := estimator.New(name, cfg); !errors.Is(err, estimator.ErrInvalidConfig) {
				t.Errorf("%s, bad config #%d: err = %v, want ErrInvalidConfig", name, i, err)
			}
		}
	}
	// A zero config is not silently defaulted.
	if _, err := estimator.New("usage", estimator.Config{}); !errors.Is(err, estimator.ErrInvalidConfig) {
		t.Errorf("usage with a zero config: err = %v, want ErrInvalidConfig", err)
	}
}

// TestUsageTable states the raw (no hysteresis) arithmetic of usage:
// slack = Σ alloc − Σ (predicted peak + Margin × alloc) over guaranteed
// containers and protected services, at least 0, at most Total − Σ need.
// predictive must agree on all of them: none is periodic.
func TestUsageTable(t *testing.T) {
	spikeAt := func(h []estimator.Sample, age time.Duration, cpu float64) []estimator.Sample {
		for i := range h {
			if h[i].Time.Equal(t0.Add(-age)) {
				h[i].CPU = cpu
			}
		}
		return h
	}
	tests := []struct {
		name    string
		cfg     func(*estimator.Config)
		in      estimator.Input
		wantCPU float64
		wantMem float64
	}{{
		name: "idle container: allocation minus use minus 10% margin",
		cfg:  func(c *estimator.Config) { c.Memory = false },
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:2;mem:1024", steadyHistory(t0, 600, 0.2, 100)),
		}},
		wantCPU: 2 - 0.2 - 0.2,
	}, {
		name: "never negative when a container uses more than its allocation",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:1", steadyHistory(t0, 600, 1.7, 0)),
		}},
		wantCPU: 0,
	}, {
		name: "one container's burst above its allocation eats another's slack",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:1", steadyHistory(t0, 600, 1.5, 0)),
			guaranteed("b", "cpus:2", steadyHistory(t0, 600, 0.5, 0)),
		}},
		wantCPU: 3 - 1.5 - 0.5 - 0.3,
	}, {
		name: "margin is a fraction of the allocation",
		cfg:  func(c *estimator.Config) { c.Margin = 0.25 },
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:4", steadyHistory(t0, 600, 1, 0)),
		}},
		wantCPU: 4 - 1 - 1,
	}, {
		name: "old spike inside the window: the 99th percentile ignores it, the peak hold has decayed it",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:2", spikeAt(steadyHistory(t0, 600, 0.2, 0), 50*time.Second, 1.6)),
		}},
		// 1.6 × 2^(−50/10) = 0.05 < 0.2
		wantCPU: 2 - 0.2 - 0.2,
	}, {
		name: "recent spike: the decaying peak hold keeps it",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:2", spikeAt(steadyHistory(t0, 600, 0.2, 0), 10*time.Second, 1.6)),
		}},
		wantCPU: 2 - 0.8 - 0.2,
	}, {
		name: "percentile: the top 1% of the window is ignored",
		cfg:  func(c *estimator.Config) { c.PeakHalfLife = time.Millisecond },
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:2", spikeAt(spikeAt(steadyHistory(t0, 600, 0.2, 0), 3*time.Second, 1.6), 4*time.Second, 1.6)),
		}},
		wantCPU: 2 - 0.2 - 0.2,
	}, {
		name: "percentile 50 over a window half busy",
		cfg:  func(c *estimator.Config) { c.Percentile = 50; c.PeakHalfLife = time.Millisecond },
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:2", append(steadyHistory(t0.Add(-30*time.Second), 299, 1.0, 0), steadyHistory(t0, 300, 0.5, 0)...)),
		}},
		wantCPU: 2 - 0.5 - 0.2,
	}, {
		name: "samples older than the window do not count",
		cfg:  func(c *estimator.Config) { c.Window = 10 * time.Second },
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:2", append(steadyHistory(t0.Add(-2*time.Minute), 100, 2, 0), steadyHistory(t0, 100, 0.3, 0)...)),
		}},
		wantCPU: 2 - 0.3 - 0.2,
	}, {
		name: "samples after Now do not count",
		in: estimator.Input{Now: t0.Add(-time.Second), Containers: []estimator.Container{
			guaranteed("a", "cpus:2", append(steadyHistory(t0.Add(-time.Second), 600, 0.3, 0), steadyHistory(t0, 9, 2, 0)...)),
		}},
		wantCPU: 2 - 0.3 - 0.2,
	}, {
		name: "too little history: the whole allocation is taken as used",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("new", "cpus:2", steadyHistory(t0, 9, 0, 0)),
			guaranteed("old", "cpus:1", steadyHistory(t0, 600, 0, 0)),
		}},
		wantCPU: 1 - 0.1,
	}, {
		name: "non-finite samples are dropped, not read as idle",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:2", append(steadyHistory(t0.Add(-time.Second), 5, 0, 0),
				estimator.Sample{Time: t0.Add(-900 * time.Millisecond), CPU: math.NaN()},
				estimator.Sample{Time: t0.Add(-800 * time.Millisecond), CPU: math.Inf(1)},
				estimator.Sample{Time: t0.Add(-700 * time.Millisecond), CPU: -1})),
		}},
		wantCPU: 0, // five good samples are fewer than MinSamples
	}, {
		name: "a checked history (HistoryChecked, as the agent passes) estimates as an unchecked one",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			checked(guaranteed("a", "cpus:2", steadyHistory(t0, 600, 0.5, 0))),
			guaranteed("b", "cpus:1", steadyHistory(t0, 600, 0.3, 0)),
		}},
		wantCPU: 2 - 0.5 - 0.2 + 1 - 0.3 - 0.1,
	}, {
		name: "revocable containers neither add slack nor take it away",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("g", "cpus:2", steadyHistory(t0, 600, 0.5, 0)),
			{ID: "r", Revocable: true, Allocated: resources.MustParse("cpus:1.3"), History: steadyHistory(t0, 600, 1.3, 0)},
		}},
		wantCPU: 2 - 0.5 - 0.2,
	}, {
		name: "protected service with a reservation: its unused reservation is slack",
		in: estimator.Input{Now: t0, Protected: []estimator.Container{
			guaranteed("nginx", "cpus:1", steadyHistory(t0, 600, 0.3, 0)),
		}},
		wantCPU: 1 - 0.3 - 0.1,
	}, {
		name: "protected service without a reservation: its use holds back the machine's headroom",
		in: estimator.Input{Now: t0, Total: resources.MustParse("cpus:2"),
			Containers: []estimator.Container{guaranteed("g", "cpus:1.5", steadyHistory(t0, 600, 0.2, 0))},
			Protected:  []estimator.Container{guaranteed("db", "", steadyHistory(t0, 600, 1.2, 0))},
		},
		// alloc 1.5 + 1.2 (its peak); need 0.2+0.15 + 1.2+0.12; capped by Total 2 − 1.67.
		wantCPU: 2 - (0.2 + 0.15) - (1.2 + 0.12),
	}, {
		name: "Total caps the estimate",
		in: estimator.Input{Now: t0, Total: resources.MustParse("cpus:1"), Containers: []estimator.Container{
			guaranteed("a", "cpus:2", steadyHistory(t0, 600, 0.2, 0)),
		}},
		wantCPU: 1 - 0.2 - 0.2,
	}, {
		name: "memory is left alone when disabled (--oversubscribe-memory=false)",
		cfg:  func(c *estimator.Config) { c.Memory = false },
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:1;mem:1024", steadyHistory(t0, 600, 0.5, 100)),
		}},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 0,
	}, {
		name: "memory by default: working-set peak plus the memory margin",
		in: estimator.Input{Now: t0, Containers: []estimator.Container{
			guaranteed("a", "cpus:1;mem:1024", steadyHistory(t0, 600, 0.5, 100)),
		}},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 1024 - 100 - 0.03*1024,
	}, {
		// The memory scenario of the colocation bench (#28): a 1536 MiB
		// node allocated whole to a server working on 384 MiB, 60 MiB
		// held outside the containers, the reclaim controller's 230 MiB
		// line plus 46 MiB calm margin to keep free.
		name: "the node keeps its KeepFree and other use free of revocable memory",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{
			guaranteed("server", "cpus:1;mem:1536", steadyHistory(t0, 600, 0.5, 384)),
		}, Node: node(1536, 1536-384-60, 276)},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 1536 - 276 - 60 - (384 + 0.03*1536),
	}, {
		name: "revocable work holding memory does not lower the node bound (the estimate is its total)",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{
			guaranteed("server", "cpus:1;mem:1536", steadyHistory(t0, 600, 0.5, 384)),
			{ID: "r", Revocable: true, Allocated: resources.MustParse("mem:700"), History: steadyHistory(t0, 600, 0, 640)},
		}, Node: node(1536, 1536-384-60-640, 276)},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 1536 - 276 - 60 - (384 + 0.03*1536),
	}, {
		name: "the node bound without KeepFree (no controller acts on MemAvailable) still leaves other use",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{
			guaranteed("server", "cpus:1;mem:1536", steadyHistory(t0, 600, 0.5, 384)),
		}, Node: node(1536, 1536-384-60, 0)},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 1536 - 60 - (384 + 0.03*1536),
	}, {
		name: "available memory counting the working sets' page cache: no other use, not a negative one",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{
			guaranteed("server", "cpus:1;mem:1536", steadyHistory(t0, 600, 0.5, 384)),
		}, Node: node(1536, 1400, 276)},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 1536 - 276 - (384 + 0.03*1536),
	}, {
		name: "a large node: the allocations bound the slack, not the node",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:15360"), Containers: []estimator.Container{
			guaranteed("a", "cpus:1;mem:1024", steadyHistory(t0, 600, 0.5, 100)),
		}, Node: node(16384, 16384-100-900, 1966)},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 1024 - 100 - 0.03*1024,
	}, {
		name: "a node holding more than KeepFree leaves: nothing, not less than nothing",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{
			guaranteed("server", "cpus:1;mem:1536", steadyHistory(t0, 600, 0.5, 384)),
		}, Node: node(1536, 200, 276)},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 0,
	}, {
		name: "node memory unknown: no node bound",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{
			guaranteed("server", "cpus:1;mem:1536", steadyHistory(t0, 600, 0.5, 384)),
		}, Node: estimator.NodeMemory{KeepFreeBytes: 276 << 20}},
		wantCPU: 1 - 0.5 - 0.1, wantMem: 1536 - (384 + 0.03*1536),
	}, {
		name:    "no containers, nothing to offer",
		in:      estimator.Input{Now: t0, Total: resources.MustParse("cpus:8;mem:1000")},
		wantCPU: 0,
	}}
	for _, tt := range tests {
		for _, name := range []string{"usage", "predictive"} {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				cfg := noHysteresis()
				if tt.cfg != nil {
					tt.cfg(&cfg)
				}
				got := newEstimator(t, name, cfg).Estimate(tt.in)
				if !near(got.CPUs(), tt.wantCPU) || !near(got.Mem(), tt.wantMem) {
					t.Errorf("estimate = cpus %v mem %v, want cpus %v mem %v", got.CPUs(), got.Mem(), tt.wantCPU, tt.wantMem)
				}
			})
		}
	}
}

// node is a NodeMemory of total and available MiB keeping keepFree MiB.
func node(total, available, keepFree float64) estimator.NodeMemory {
	return estimator.NodeMemory{TotalBytes: uint64(total * (1 << 20)), AvailableBytes: uint64(available * (1 << 20)),
		KeepFreeBytes: uint64(keepFree * (1 << 20))}
}

func TestHysteresisApply(t *testing.T) {
	h := estimator.DefaultHysteresis()
	tests := []struct {
		name                 string
		published, raw, want float64
	}{
		{"first rise publishes raw minus the band", 0, 1.5, 1.5 - 0.1},
		{"raw within two bands above: keep", 1.4, 1.55, 1.4},
		{"raw wanders within the band: keep", 1.4, 1.45, 1.4},
		{"raw back to published: keep", 1.4, 1.4, 1.4},
		{"any shrink below published drops at once, a band lower", 1.4, 1.39, 1.29},
		{"big shrink", 1.4, 0.3, 0.2},
		{"shrink to nothing", 1.4, 0, 0},
		{"band is 5% of large estimates", 10, 11.5, 11.5 - 0.575},
		{"small rise below two bands from zero: keep", 0, 0.19, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := h.Apply(resources.New(tt.published, 0, 0), resources.New(tt.raw, 0, 0)).CPUs()
			if !near(got, tt.want) {
				t.Errorf("Apply(%v, %v) = %v, want %v", tt.published, tt.raw, got, tt.want)
			}
		})
	}
	mem := h.Apply(resources.New(0, 1000, 0), resources.New(0, 1100, 0)).Mem()
	if mem != 1000 {
		t.Errorf("mem 1000 -> raw 1100 published %v, want 1000 (band max(64, 55) MiB)", mem)
	}
	off := estimator.Hysteresis{Off: true}
	if got := off.Apply(resources.New(1, 0, 0), resources.New(1.01, 0, 0)).CPUs(); got != 1.01 {
		t.Errorf("Off: Apply = %v, want raw 1.01", got)
	}
}

// TestHysteresisNoChurnThenImmediateShrink drives usage through a minute of
// noisy light load (no change may be published after the first) and then a
// load step (the very next estimate must drop below the new safe value).
func TestHysteresisNoChurnThenImmediateShrink(t *testing.T) {
	for _, name := range []string{"usage", "predictive"} {
		t.Run(name, func(t *testing.T) {
			cfg := estimator.DefaultConfig()
			cfg.Percentile = 95
			est := newEstimator(t, name, cfg)
			var history []estimator.Sample
			now := t0
			// Deterministic noise around 0.4 cores, ±0.04.
			noise := func(i int) float64 { return 0.4 + 0.04*math.Sin(float64(i)*1.7) }
			step := func(cpu func(int) float64) float64 {
				for range 10 {
					now = now.Add(100 * time.Millisecond)
					history = append(history, estimator.Sample{Time: now, CPU: cpu(len(history))})
				}
				in := estimator.Input{Now: now, Containers: []estimator.Container{
					guaranteed("svc", "cpus:2", history),
				}}
				return est.Estimate(in).CPUs()
			}
			for range 60 { // fill the window
				step(noise)
			}
			first := step(noise)
			for i := range 120 {
				if got := step(noise); got != first {
					t.Fatalf("estimate changed under noise at second %d: %v -> %v", i, first, got)
				}
			}
			if first < 1.2 {
				t.Fatalf("steady estimate %v, want at least 1.2 (2 − 0.44 − 0.2 − band)", first)
			}
			// Load step to 1.5 cores: the safe estimate is at most 2 − 1.5 − 0.2.
			got := step(func(int) float64 { return 1.5 })
			if got > 0.3+1e-9 {
				t.Errorf("after a load step to 1.5 cores the estimate is %v, want at most 0.3 at once", got)
			}
		})
	}
}

// BenchmarkEstimate is the cost of one estimate on an agent with 20
// guaranteed containers carrying a minute of 100 ms samples each.
func BenchmarkEstimate(b *testing.B) {
	in := estimator.Input{Now: t0, Total: resources.MustParse("cpus:32;mem:65536")}
	for i := range 20 {
		h := steadyHistory(t0, 600, 0.5, 100)
		for j := range h {
			h[j].CPU = 0.5 + 0.4*math.Sin(float64(i*j)/7)
		}
		in.Containers = append(in.Containers, guaranteed(string(rune('a'+i)), "cpus:1.5;mem:1024", h))
	}
	for _, name := range []string{"usage", "predictive"} {
		b.Run(name, func(b *testing.B) {
			est := newEstimator(b, name, estimator.DefaultConfig())
			for b.Loop() {
				est.Estimate(in)
			}
		})
	}
}

// checked marks c's history as checked by its caller (every sample Usable).
func checked(c estimator.Container) estimator.Container {
	c.HistoryChecked = true
	return c
}

// TestSampleUsable: a sample is usable when its CPU is finite and not
// negative; estimators leave the others out.
func TestSampleUsable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cpu  float64
		want bool
	}{{0, true}, {1.5, true}, {-0.001, false}, {math.NaN(), false}, {math.Inf(1), false}, {math.Inf(-1), false}} {
		if got := (estimator.Sample{CPU: tc.cpu}).Usable(); got != tc.want {
			t.Errorf("Sample{CPU: %v}.Usable() = %v, want %v", tc.cpu, got, tc.want)
		}
	}
}
