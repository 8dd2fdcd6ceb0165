package qos

import (
	"testing"
	"time"
)

// TestNoEffectClearsNoGain: a confinement found not to cut the delay
// revocable work causes (noEffect) ends the hold an earlier one that cut it
// for nothing (noGain) left: the interference controller may throttle, or
// kill, again. The earlier verdict is set up directly, with its hold still
// running when the later one is given (a probe taken back after a
// confinement that bought nothing starts an episode while the hold lasts).
func TestNoEffectClearsNoGain(t *testing.T) {
	cfg := DefaultConfig()
	for _, held := range []bool{false, true} {
		c := NewCPUSet(cfg.CPUSet, cfg.Interference)
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if held {
			c.noGainUntil = t0.Add(10 * time.Minute)
		}
		cpus := []int{0, 1, 2, 3, 4, 5, 6, 7}
		undone := false
		for i := range 60 {
			now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
			p99, delay := 200*time.Microsecond, time.Duration(0)
			if i >= 10 {
				p99, delay = 4*time.Millisecond, 5*time.Millisecond // however confined
			}
			in := Input{
				Now:  now,
				Node: Node{CPUs: 8, MemTotal: 16 << 30, MemAvailable: 8 << 30},
				Containers: []Container{
					{ID: "web-1", CPUAllocated: 6, CPU: 0.5, RunqP99: p99, RunqWait: 10 * time.Millisecond,
						DelayedBy: map[string]time.Duration{"batch-1": delay}, StartedAt: t0.Add(-time.Hour)},
					{ID: "batch-1", Revocable: true, CPUAllocated: 2, CPU: 1, StartedAt: t0.Add(-3 * time.Minute)},
				},
				RevocableCPUs: cpus,
			}
			for _, corr := range c.Evaluate(in) {
				if corr.Kind != Confine {
					t.Fatalf("%v: %v", now, corr)
				}
				cpus = corr.CPUs
				if len(cpus) == 0 {
					cpus = []int{0, 1, 2, 3, 4, 5, 6, 7}
					undone = true
				}
			}
			if undone {
				break
			}
		}
		if !undone {
			t.Fatalf("held %v: the confinement was not undone", held)
		}
		if c.fruitless() {
			t.Errorf("held %v: after a verdict that confining did not cut the delay, confining is still held fruitless", held)
		}
		if !c.exhausted() {
			t.Errorf("held %v: after the verdict confining is not held back", held)
		}
	}
}
