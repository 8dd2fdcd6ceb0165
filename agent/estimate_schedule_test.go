package agent

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// TestEstimateSchedule: aligned to the monitor, an estimate runs right after
// the first sample following each tick (never at the tick itself, never
// twice per tick), or at a sample shortly before the tick (then not again
// for that tick), and at the next tick when no sample came (so a stalled
// monitor still gets an estimate per tick); unaligned, at every tick and
// never on a sample. Events: tN a tick, sN a sample, at N ms; the result
// marks each event that ran an estimate (E) or not (.).
func TestEstimateSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		aligned  bool
		interval time.Duration
		events   string
		want     string
	}{
		{"sample after each tick", true, 100, "t0 s10 t100 s110 t200 s210", ".E.E.E"},
		{"a sample before the first tick runs nothing", true, 100, "s0 t5 s100 t105", "..E."},
		{"two samples per tick: only the first runs", true, 100, "t0 s10 s60 t100 s110 s160", ".E..E."},
		{"no sample by the next tick: estimate at it, then at the sample", true, 100, "t0 t100 s110 t200", ".EE."},
		{"stalled monitor: one estimate per tick, one tick late", true, 100, "t0 t100 t200 t300", ".EEE"},
		// The loops' phases close: a sample lands 1 ms before its tick
		// instead of 1 ms after. It runs the tick's estimate; before, it
		// waited for the next tick (an interval unseen).
		{"a sample just before its tick runs the tick's estimate", true, 100, "t99 s100 t199 s200 s298 t299 t399 s400", ".E.EE..E"},
		{"a sample a quarter interval before the tick is not early", true, 100, "t0 s10 s70 t100 s110", ".E..E"},
		{"slower estimates: one per tick, early or after it", true, 1000, "t0 s10 s760 s860 t1000 s1010 s1760 t2000 s2010", ".EE...E.."},
		{"unaligned: every tick, no sample", false, 100, "t0 s10 t100 s110 s160 t200", "E.E..E"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := estimateSchedule{aligned: tc.aligned, interval: tc.interval * time.Millisecond}
			var got strings.Builder
			for _, e := range strings.Fields(tc.events) {
				ms, err := strconv.Atoi(e[1:])
				if err != nil {
					t.Fatal(err)
				}
				now := time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond)
				run := false
				if e[0] == 't' {
					run = s.tick(now)
				} else {
					run = s.sampled(now)
				}
				if run {
					got.WriteByte('E')
				} else {
					got.WriteByte('.')
				}
			}
			if got.String() != tc.want {
				t.Errorf("events %s: estimates %s, want %s", tc.events, got.String(), tc.want)
			}
		})
	}
}

// TestLazyTicksMatchTimerTicks: fed the boundaries' ticks at the samples
// and woken only at lazyTicks.wake, an aligned schedule runs its
// estimates at the same instants as one woken at every boundary, for
// samples right after each boundary, samples just before it, two per
// interval, missing ones and a stalled monitor. Samples are at the given
// ms; boundaries every 100 ms from 0.
func TestLazyTicksMatchTimerTicks(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, samples := range [][]int{
		{10, 110, 210, 310, 410},
		{99, 199, 299, 398, 501},
		{10, 60, 110, 160, 260},
		{10, 110, 420, 430, 520},
		{10},
		{5, 1010, 1020, 1110},
		{74, 176, 299, 301, 399, 401},
	} {
		const end = 1500
		// Every boundary woken: ticks and samples in time order, a tick
		// first at the same instant (the timers fire before the pass ends).
		var want []time.Duration
		s := estimateSchedule{aligned: true, interval: interval}
		i := 0
		for b := 0; b <= end; b += 100 {
			for ; i < len(samples) && samples[i] < b; i++ {
				if s.sampled(at(samples[i])) {
					want = append(want, time.Duration(samples[i])*time.Millisecond)
				}
			}
			if s.tick(at(b)) {
				want = append(want, time.Duration(b)*time.Millisecond)
			}
		}
		// Lazy: the loop wakes at the samples and at wake only.
		var got []time.Duration
		s = estimateSchedule{aligned: true, interval: interval}
		ticks := lazyTicks{next: at(0), interval: interval}
		i = 0
		for {
			wake := ticks.wake(&s)
			if i < len(samples) && at(samples[i]).Before(wake) {
				now := at(samples[i])
				run := ticks.feed(&s, now)
				if s.sampled(now) || run {
					got = append(got, now.Sub(at(0)))
				}
				i++
				continue
			}
			if wake.After(at(end)) {
				break
			}
			if ticks.feed(&s, wake) {
				got = append(got, wake.Sub(at(0)))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("samples at %v ms: lazy estimates at %v, timer ticks at %v", samples, got, want)
		}
	}
}

// TestSampleTakenEstimates: aligned to the monitor, the end of a pass
// makes the estimate on the caller's goroutine (latest moves to the pass's
// time) without Run; without an estimator (Run is not started) a pass
// makes none and does not fail.
func TestSampleTakenEstimates(t *testing.T) {
	t.Parallel()
	m, _ := fakeMonitorNode(t, 100)
	est, err := estimator.New("fast", estimator.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Logger: quietLog(), Monitor: m, Containerizer: newFakeContainerizer(), EstimateInterval: m.Interval(), Estimator: est, EstimatorName: "fast"}
	l := newEstimateLoop(cfg, resources.MustParse("cpus:4;mem:1024"), nil, nil)
	if !l.aligned {
		t.Fatal("a monitor sampling at the estimate interval: not aligned")
	}
	// A tick has passed since the schedule started: the pass runs its
	// estimate.
	before := time.Now()
	l.ticks = lazyTicks{next: before.Add(-time.Millisecond), interval: l.interval}
	l.sampleTaken()
	if at := l.latest.Load().at; at.Before(before) {
		t.Errorf("after a pass the latest estimate is from %v, want at or after %v", at, before)
	}
	cfg.Estimator = nil
	l = newEstimateLoop(cfg, resources.MustParse("cpus:4;mem:1024"), nil, nil)
	if l.aligned {
		t.Error("no estimator: aligned")
	}
	l.ticks = lazyTicks{next: time.Now().Add(-time.Millisecond), interval: l.interval}
	l.sampleTaken()
	if at := l.latest.Load().at; !at.IsZero() {
		t.Errorf("no estimator: an estimate at %v", at)
	}
}

// TestQuietPassesDeferEstimates (#29): a due estimate at a quiet pass
// (nothing the monitor published changed), once the containers have been
// idle for quietSettle, waits while the last estimate is less than
// QuietDeferMax old and the containers, the profile and the session are
// unchanged; a pass that is not quiet, the settling, the deferral's end
// or a change of containers estimates; QuietDeferMax 0 never defers.
func TestQuietPassesDeferEstimates(t *testing.T) {
	t.Parallel()
	m, _ := fakeMonitorNode(t, 100)
	est, err := estimator.New("fast", estimator.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cz := &versionedFake{fakeContainerizer: newFakeContainerizer()}
	cfg := Config{Logger: quietLog(), Monitor: m, Containerizer: cz, EstimateInterval: m.Interval(), Estimator: est,
		EstimatorName: "fast", QuietDeferMax: time.Second}
	l := newEstimateLoop(cfg, resources.MustParse("cpus:4;mem:1024"), nil, nil)
	ms := time.Millisecond
	t0 := time.Unix(1_000_000, 0)        // the monitor's passes and the loop's times, on one clock
	if err := m.Sample(t0); err != nil { // samples the node: not quiet (and the monitor's first pass)
		t.Fatal(err)
	}
	if l.deferQuiet(t0.Add(100 * ms)) {
		t.Fatal("deferred before any estimate")
	}
	l.mu.Lock()
	l.estimateLocked(nil)
	l.mu.Unlock()
	l.estimatedAt = t0
	if l.deferQuiet(t0.Add(100 * ms)) {
		t.Error("deferred after a pass that sampled the node")
	}
	if err := m.Sample(t0.Add(100 * ms)); err != nil { // quiet: no target, the node not due
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		estimated, at time.Duration // the last estimate, and the pass
		setup         func()
		want          bool
	}{
		{"a quiet pass, not settled", 0, 200 * ms, nil, false},
		{"a quiet pass, settled", 2000 * ms, 2100 * ms, nil, true},
		{"just short of the bound", 2000 * ms, 2999 * ms, nil, true},
		{"the bound reached", 2000 * ms, 3000 * ms, nil, false},
		{"a clock that went back", 2000 * ms, 1999 * ms, nil, false},
		{"containers changed", 2000 * ms, 2100 * ms, func() { cz.version++ }, false},
	} {
		if c.setup != nil {
			c.setup()
		}
		l.estimatedAt = t0.Add(c.estimated)
		if got := l.deferQuiet(t0.Add(c.at)); got != c.want {
			t.Errorf("%s: deferred %v, want %v", c.name, got, c.want)
		}
	}
	l.mu.Lock()
	l.estimateLocked(nil) // reads the new version
	l.mu.Unlock()
	l.estimatedAt = t0.Add(2000 * ms)
	if !l.deferQuiet(t0.Add(2100 * ms)) {
		t.Error("an estimate that read the changed containers: the next quiet pass did not defer")
	}
	if err := m.Sample(t0.Add(time.Second)); err != nil { // the node's second: not quiet
		t.Fatal(err)
	}
	if l.deferQuiet(t0.Add(2100 * ms)) {
		t.Error("deferred at a pass that sampled the node")
	}
	l.quietMax = 0
	if err := m.Sample(t0.Add(1100 * ms)); err != nil {
		t.Fatal(err)
	}
	if l.deferQuiet(t0.Add(2100 * ms)) {
		t.Error("QuietDeferMax 0 deferred")
	}
}
