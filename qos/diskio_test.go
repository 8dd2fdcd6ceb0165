package qos_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/qos"
)

// reactiveConfig is the diskio defaults without the start cap
// (GuardedStartFraction 0): the tables of the reactive rules, which start
// from no cap whatever guaranteed work does (TestDiskIOGuardedStart tests
// the start cap).
func reactiveConfig() qos.DiskIOConfig {
	cfg := qos.DefaultDiskIOConfig()
	cfg.GuardedStartFraction = 0
	return cfg
}

// ioScene: a node that can cap revocable I/O, with web-1 (guaranteed, doing
// fsyncs), db (protected) and a revocable writer.
func ioScene() qos.Input {
	return qos.Input{
		Node: qos.Node{CPUs: 2, DiskIO: true},
		Containers: []qos.Container{
			{ID: "web-1"},
			{ID: "protected:db", Protected: true},
			{ID: "writer", Revocable: true},
		},
	}
}

func TestDiskIOTranscript(t *testing.T) {
	t.Parallel()
	s := time.Second
	stall := func(v float64) func(in *qos.Input) {
		return func(in *qos.Input) { in.Containers[0].IOPressureSome10 = v }
	}
	steps := []struct {
		offset time.Duration
		edit   func(in *qos.Input)
		want   string // "kind MiB/s" or ""
		reason string
	}{
		{0, nil, "", ""},
		{s, stall(30), "throttle 128.0", "web-1 io.pressure some avg10 30.0% > 10%; revocable disk I/O cap 128.0 MiB/s, requests <= 32 KiB"},
		{2 * s, nil, "", ""}, // DecreaseInterval
		{3 * s, nil, "throttle 64.0", ""},
		{5 * s, nil, "throttle 32.0", ""},
		{7 * s, stall(7), "", ""}, // between exit (5) and enter (10): hold
		{9 * s, stall(2), "", ""}, // calm begins
		{13 * s, nil, "", ""},
		{14 * s, nil, "unthrottle 57.6", "guaranteed I/O calm for 5s"}, // + 10% of 256 MiB/s
		{14*s + s/2, nil, "", ""},
		{15 * s, nil, "unthrottle 83.2", ""},
		{16 * s, func(in *qos.Input) { in.Containers[1].IOPressureFull10 = 9 }, "throttle 41.6", "protected:db io.pressure full avg10 9.0% > 5%; revocable disk I/O cap 41.6 MiB/s, requests <= 32 KiB"},
		{17 * s, func(in *qos.Input) { in.Containers[1].IOPressureFull10 = 0; in.Containers[2].IOPressureFull10 = 90 }, "", ""}, // revocable's own stalls are no signal
	}
	c, err := qos.NewSet([]string{"diskio"}, qos.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in := ioScene()
	for i, st := range steps {
		in.Now = at(st.offset)
		if st.edit != nil {
			st.edit(&in)
		}
		var got []string
		for _, corr := range c.Evaluate(in) {
			if corr.Resource != qos.DiskIO || corr.Controller != "diskio" {
				t.Errorf("step %d: %v", i, corr)
			}
			got = append(got, fmt.Sprintf("%s %.1f", corr.Kind, corr.IOLimit/(1<<20)))
			in.RevocableIOLimit = corr.IOLimit
			if st.reason != "" && corr.Reason != st.reason {
				t.Errorf("step %d: reason %q, want %q", i, corr.Reason, st.reason)
			}
		}
		if strings.Join(got, "; ") != st.want {
			t.Errorf("step %d (%s): got %q, want %q", i, st.offset, strings.Join(got, "; "), st.want)
		}
	}
}

func TestDiskIOEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(in *qos.Input)
		want string
	}{
		{"no cap on this node: nothing", func(in *qos.Input) { in.Node.DiskIO = false; in.Containers[0].IOPressureSome10 = 50 }, ""},
		{"at the floor: nothing more", func(in *qos.Input) { in.RevocableIOLimit = 1 << 20; in.Containers[0].IOPressureSome10 = 50 }, ""},
		{"just above the floor: to the floor", func(in *qos.Input) { in.RevocableIOLimit = 1.5 * (1 << 20); in.Containers[0].IOPressureSome10 = 50 }, "throttle 1.0"},
		{"the node's disk capacity is the start", func(in *qos.Input) {
			in.Node.DiskBytesPerSecond = 100 << 20
			in.Containers[0].IOPressureFull10 = 50
		}, "throttle 50.0"},
		{"node pressure is ignored by default", func(in *qos.Input) { in.Node.IOPressureFull10 = 80 }, ""},
		{"calm without a cap: nothing to undo", func(in *qos.Input) {}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := qos.NewDiskIO(reactiveConfig())
			in := ioScene()
			in.Now = at(0)
			tt.edit(&in)
			var got []string
			for _, corr := range c.Evaluate(in) {
				got = append(got, fmt.Sprintf("%s %.1f", corr.Kind, corr.IOLimit/(1<<20)))
			}
			if strings.Join(got, "; ") != tt.want {
				t.Errorf("got %q, want %q", strings.Join(got, "; "), tt.want)
			}
		})
	}
}

// TestDiskIOSyncLatency: the guaranteed task's fsync p99 (eBPF) drives the
// cap where io.pressure shows nothing (its fsyncs wait for the journal
// commit, not in an I/O sleep of its own).
// ioStep is one step of a diskio transcript: at offset, edit changes the
// input; the corrections evaluated then read want ("KIND MiB/s", joined by
// "; ", or ""), and each has reason when reason is set.
type ioStep struct {
	offset time.Duration
	edit   func(in *qos.Input)
	want   string
	reason string
}

// runIOSteps runs steps on ioScene with c, applying each correction's cap
// to the input as the agent does.
func runIOSteps(t *testing.T, c *qos.DiskIOController, steps []ioStep) {
	t.Helper()
	in := ioScene()
	for i, st := range steps {
		in.Now = at(st.offset)
		st.edit(&in)
		var got []string
		for _, corr := range c.Evaluate(in) {
			got = append(got, fmt.Sprintf("%s %.1f", corr.Kind, corr.IOLimit/(1<<20)))
			in.RevocableIOLimit = corr.IOLimit
			if st.reason != "" && corr.Reason != st.reason {
				t.Errorf("step %d: reason %q, want %q", i, corr.Reason, st.reason)
			}
		}
		if strings.Join(got, "; ") != st.want {
			t.Errorf("step %d (%s): got %q, want %q", i, st.offset, strings.Join(got, "; "), st.want)
		}
	}
}

func TestDiskIOSyncLatency(t *testing.T) {
	t.Parallel()
	s, ms := time.Second, time.Millisecond
	syncs := func(n uint64, p99 time.Duration, sampled time.Duration) func(in *qos.Input) {
		return func(in *qos.Input) {
			in.Containers[0].Syncs, in.Containers[0].SyncP99, in.Containers[0].SampledAt = n, p99, at(sampled)
		}
	}
	steps := []ioStep{
		{0, syncs(400, 3*ms, 0), "", ""},
		{s, syncs(5, 90*ms, s), "", ""}, // too few fsyncs: their p99 is their maximum (and no stall: <= 100 ms)
		{2 * s, syncs(400, 45*ms, 2*s), "throttle 128.0", "web-1 fsync p99 45ms over 400 > 20ms; revocable disk I/O cap 128.0 MiB/s, requests <= 32 KiB"},
		{4 * s, syncs(400, 45*ms, 2*s), "", ""}, // the same sample again: it cannot show the change
		{5 * s, syncs(400, 40*ms, 5*s), "throttle 64.0", ""},
		{6 * s, syncs(400, 15*ms, 6*s), "", ""}, // under enter, over calm (10 ms): hold
		{7 * s, syncs(400, 4*ms, 7*s), "", ""},  // calm begins
		{12 * s, syncs(400, 4*ms, 12*s), "unthrottle 89.6", "guaranteed I/O calm for 5s"},
		{13 * s, func(in *qos.Input) {
			in.Containers[0].SyncP99, in.Containers[0].SampledAt = 4*ms, at(13*s)
			in.Containers[2].Syncs, in.Containers[2].SyncP99 = 400, 2*s // revocable work's own fsyncs are no signal
		}, "unthrottle 115.2", ""},
	}
	runIOSteps(t, qos.NewDiskIO(reactiveConfig()), steps)
}

// TestDiskIOAIMD: the controller learns the rate revocable I/O reaches
// uncapped from the subtree's byte counter, halves the cap from it on a
// violation down to the floor (35% of that rate, so that revocable work
// keeps a share of the disk), raises it additively by 10% of it when calm,
// and removes it at the rate. Intervals shorter than 500 ms teach it
// nothing, capped ones at most the cap.
func TestDiskIOAIMD(t *testing.T) {
	t.Parallel()
	s, ms := time.Second, time.Millisecond
	const mib = 1 << 20
	type step struct {
		offset time.Duration
		bytes  uint64        // the revocable subtree's counter (MiB)
		p99    time.Duration // web-1's fsync p99 over 400 fsyncs, sampled now
		want   string
		reason string
	}
	steps := []step{
		{0, 100, 2 * ms, "", ""},
		{s, 200, 2 * ms, "", ""},     // 100 MiB/s uncapped: learned
		{2 * s, 280, 2 * ms, "", ""}, // 80 MiB/s: the highest stays
		{3 * s, 380, 40 * ms, "throttle 50.0", "web-1 fsync p99 40ms over 400 > 20ms; revocable disk I/O cap 50.0 MiB/s, requests <= 32 KiB"},
		{4 * s, 780, 40 * ms, "", ""}, // capped: 400 MiB/s (a burst) teaches the cap at most; too soon to halve
		{5 * s, 830, 40 * ms, "throttle 35.0", "web-1 fsync p99 40ms over 400 > 20ms; revocable disk I/O cap 35.0 MiB/s (the floor: 35% of the highest rate revocable I/O reached 100.0 MiB/s), requests <= 32 KiB"},
		{7 * s, 900, 40 * ms, "", ""}, // at the floor: nothing more
		{8 * s, 935, 3 * ms, "", ""},  // calm begins
		{13 * s, 1110, 3 * ms, "unthrottle 45.0", "guaranteed I/O calm for 5s"},
		{14 * s, 1155, 3 * ms, "unthrottle 55.0", ""},
		{15 * s, 1210, 3 * ms, "unthrottle 65.0", ""},
		{16 * s, 1275, 3 * ms, "unthrottle 75.0", ""},
		{17 * s, 1350, 3 * ms, "unthrottle 85.0", ""},
		{18 * s, 1435, 3 * ms, "unthrottle 95.0", ""},
		{19 * s, 1530, 3 * ms, "unthrottle 0.0", ""}, // at the learned rate: the cap is removed
		{19*s + 100*ms, 1600, 3 * ms, "", ""},        // 700 MiB/s over 100 ms: too short to count
		{20 * s, 1650, 3 * ms, "", ""},               // the interval from 19 s began capped: nothing learned
		{21 * s, 1770, 3 * ms, "", ""},               // 120 MiB/s uncapped: learned
		{22 * s, 1800, 40 * ms, "throttle 60.0", ""}, // half of 120
	}
	var io []ioStep
	for _, st := range steps {
		io = append(io, ioStep{st.offset, func(in *qos.Input) {
			in.RevocableIOBytes = st.bytes * mib
			in.Containers[0].Syncs, in.Containers[0].SyncP99, in.Containers[0].SampledAt = 400, st.p99, in.Now
		}, st.want, st.reason})
	}
	runIOSteps(t, qos.NewDiskIO(reactiveConfig()), io)
}

// TestDiskIOFloorFraction: the floor is FloorFraction of the node's disk
// rate when it is given (it wins over the learned one), never below
// FloorBytesPerSecond, and FloorBytesPerSecond alone while no rate is known.
func TestDiskIOFloorFraction(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name     string
		disk     float64 // Node.DiskBytesPerSecond
		fraction float64
		limit    float64 // the applied cap
		want     string
	}{
		{"no rate known: the fixed floor", 0, 0.35, 1.5 * mib, "throttle 1.0"},
		{"the node's rate: 35% of it", 200 * mib, 0.35, 100 * mib, "throttle 70.0"},
		{"at the node's floor: nothing", 200 * mib, 0.35, 70 * mib, ""},
		{"a fraction below the fixed floor: the fixed floor", 2 * mib, 0.1, 1.5 * mib, "throttle 1.0"},
		{"fraction 0: the fixed floor", 200 * mib, 0, 1.5 * mib, "throttle 1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := reactiveConfig()
			cfg.FloorFraction = tt.fraction
			c := qos.NewDiskIO(cfg)
			in := ioScene()
			in.Now, in.Node.DiskBytesPerSecond, in.RevocableIOLimit = at(0), tt.disk, tt.limit
			in.Containers[0].IOPressureSome10 = 50
			var got []string
			for _, corr := range c.Evaluate(in) {
				got = append(got, fmt.Sprintf("%s %.1f", corr.Kind, corr.IOLimit/mib))
			}
			if strings.Join(got, "; ") != tt.want {
				t.Errorf("got %q, want %q", strings.Join(got, "; "), tt.want)
			}
		})
	}
	cfg := reactiveConfig()
	cfg.FloorFraction = 1
	if _, err := qos.NewSet([]string{"diskio"}, func() qos.Config { c := qos.DefaultConfig(); c.DiskIO = cfg; return c }()); err == nil || !strings.Contains(err.Error(), "floor fraction") {
		t.Errorf("floor fraction 1: %v, want an error naming it", err)
	}
}

// TestDiskIOBlockLatency: a guaranteed container's own block requests'
// p99 (eBPF) throttles where fsyncs and io.pressure show nothing, over
// enough requests only, calm below half the threshold; revocable work's
// slow requests are no signal.
func TestDiskIOBlockLatency(t *testing.T) {
	t.Parallel()
	s, ms := time.Second, time.Millisecond
	blk := func(n uint64, p99 time.Duration, sampled time.Duration) func(in *qos.Input) {
		return func(in *qos.Input) {
			in.Containers[0].BlockIOs, in.Containers[0].BlockP99, in.Containers[0].SampledAt = n, p99, at(sampled)
		}
	}
	steps := []ioStep{
		{0, blk(300, 2*ms, 0), "", ""},
		{s, blk(9, 90*ms, s), "", ""}, // too few requests (and no stall: <= 100 ms)
		{2 * s, blk(300, 35*ms, 2*s), "throttle 128.0", "web-1 block I/O p99 35ms over 300 requests > 20ms; revocable disk I/O cap 128.0 MiB/s, requests <= 32 KiB"},
		{4 * s, blk(300, 12*ms, 4*s), "", ""}, // under enter, over calm (10 ms): hold
		{5 * s, blk(300, 3*ms, 5*s), "", ""},  // calm begins
		{10 * s, func(in *qos.Input) {
			in.Containers[0].BlockP99, in.Containers[0].SampledAt = 3*ms, at(10*s)
			in.Containers[2].BlockIOs, in.Containers[2].BlockP99 = 400, 2*s // revocable work's own requests are no signal
		}, "unthrottle 153.6", "guaranteed I/O calm for 5s"},
	}
	runIOSteps(t, qos.NewDiskIO(reactiveConfig()), steps)
}

// TestDiskIOStall: an fsync or block request p99 over StallEnter (100 ms)
// is a signal however few completed (a stall lets too few complete for the
// counted signals, MinSyncs and MinBlockIOs), and it sends the cap to the
// floor at once where the floor is a share of a known rate; where no rate
// is known it halves from the start as any signal does. The colocation
// bench's first seconds: uncapped writers, 1.1-1.5 s fsyncs, 3 a second.
func TestDiskIOStall(t *testing.T) {
	t.Parallel()
	s, ms := time.Second, time.Millisecond
	const mib = 1 << 20
	step := func(bytes uint64, syncs uint64, p99 time.Duration, sampled time.Duration) func(in *qos.Input) {
		return func(in *qos.Input) {
			in.RevocableIOBytes = bytes * mib
			in.Containers[0].Syncs, in.Containers[0].SyncP99, in.Containers[0].SampledAt = syncs, p99, at(sampled)
		}
	}
	runIOSteps(t, qos.NewDiskIO(reactiveConfig()), []ioStep{
		{0, step(100, 200, 3*ms, 0), "", ""},
		{s, step(196, 200, 3*ms, s), "", ""}, // 96 MiB/s uncapped: learned
		{2 * s, step(290, 3, 1200*ms, 2*s), "throttle 33.6",
			"web-1 fsync p99 1.2s over 3 > 100ms (a stall); revocable disk I/O cap 33.6 MiB/s (the floor: 35% of the highest rate revocable I/O reached 96.0 MiB/s), requests <= 32 KiB"},
		{3 * s, step(324, 2, 900*ms, 3*s), "", ""}, // at the floor: nothing more
	})
	// Block requests likewise; no rate known yet: halving from the start.
	runIOSteps(t, qos.NewDiskIO(reactiveConfig()), []ioStep{
		{0, func(in *qos.Input) {
			in.Containers[0].BlockIOs, in.Containers[0].BlockP99, in.Containers[0].SampledAt = 2, 400*ms, at(0)
		}, "throttle 128.0",
			"web-1 block I/O p99 400ms over 2 requests > 100ms (a stall); revocable disk I/O cap 128.0 MiB/s, requests <= 32 KiB"},
	})
	// Off (0): a handful of slow fsyncs is no signal.
	cfg := reactiveConfig()
	cfg.StallEnter = 0
	runIOSteps(t, qos.NewDiskIO(cfg), []ioStep{{0, step(100, 3, 1200*ms, 0), "", ""}})
}

// TestDiskIOQuietSyncRatio: the controller learns each guaranteed
// container's fsync p99 over intervals in which revocable work wrote
// nothing (its counter did not move) and delays revocable I/O when the p99
// exceeds twice that (never under 2 ms), well under the absolute 20 ms;
// calm is below 1.5 times it. A counter at 0 teaches nothing, and a
// container that leaves is forgotten.
func TestDiskIOQuietSyncRatio(t *testing.T) {
	t.Parallel()
	s, ms, us := time.Second, time.Millisecond, time.Microsecond
	const mib = 1 << 20
	step := func(bytes uint64, p99 time.Duration) func(in *qos.Input) {
		return func(in *qos.Input) {
			in.RevocableIOBytes = bytes * mib
			in.Containers[0].Syncs, in.Containers[0].SyncP99, in.Containers[0].SampledAt = 400, p99, in.Now
		}
	}
	steps := []ioStep{
		{0, step(0, 900*us), "", ""},
		{s, step(0, 900*us), "", ""},     // a counter at 0: nothing learned
		{2 * s, step(100, 3*ms), "", ""}, // writing, nothing known yet: 3 ms < 20 ms
		{3 * s, step(100, 1*ms), "", ""}, // wrote nothing since 2 s: quiet p99 1 ms
		{4 * s, step(100, 2*ms), "", ""}, // quiet: 1 + 0.25 x (2 - 1) = 1.25 ms; 2 ms is no signal
		{5 * s, step(200, 3*ms), "throttle 50.0", "web-1 fsync p99 3ms over 400 > 2 x 1.25ms (its p99 while revocable work wrote nothing); revocable disk I/O cap 50.0 MiB/s, requests <= 32 KiB"},
		{7 * s, step(290, 2200*us), "", ""}, // under 2.5 ms, over calm (1.5 x 1.25 = 1.875, raised to 2 ms): hold
		{8 * s, step(340, 1500*us), "", ""}, // calm begins
		{13 * s, step(590, 1500*us), "unthrottle 60.0", "guaranteed I/O calm for 5s"},
		{14 * s, func(in *qos.Input) { // web-1 leaves: its quiet p99 is forgotten
			step(640, 0)(in)
			in.Containers[0].ID, in.Containers[0].Syncs = "web-2", 0
		}, "unthrottle 70.0", ""},
		{15 * s, func(in *qos.Input) { in.Containers[0].ID = "web-1"; step(690, 3*ms)(in) }, "unthrottle 80.0", ""}, // back: 3 ms judged by 20 ms only
	}
	runIOSteps(t, qos.NewDiskIO(reactiveConfig()), steps)

	// The relative threshold is never under SyncP99Min: a quiet p99 of
	// 0.4 ms and 1.5 ms beside a writer (3.75x) is no signal.
	small := []ioStep{
		{0, step(100, 400*us), "", ""},
		{s, step(100, 400*us), "", ""},
		{2 * s, step(200, 1500*us), "", ""},
		{3 * s, step(300, 2100*us), "throttle 50.0", ""},
	}
	runIOSteps(t, qos.NewDiskIO(reactiveConfig()), small)

	// SyncRatioEnter 0 turns the relative signal off.
	off := reactiveConfig()
	off.SyncRatioEnter = 0
	runIOSteps(t, qos.NewDiskIO(off), []ioStep{
		{0, step(100, 1*ms), "", ""},
		{s, step(100, 1*ms), "", ""},
		{2 * s, step(200, 5*ms), "", ""},
	})

	for _, tc := range []struct {
		edit func(*qos.DiskIOConfig)
		want string
	}{
		{func(c *qos.DiskIOConfig) { c.SyncRatioEnter = 0.8 }, "sync ratio enter must be over 1"},
		{func(c *qos.DiskIOConfig) { c.SyncP99Min = -ms }, "sync p99 min must not be negative"},
		{func(c *qos.DiskIOConfig) { c.SyncQuietWeight = 0 }, "sync quiet weight must be in (0, 1]"},
	} {
		cfg := qos.DefaultConfig()
		tc.edit(&cfg.DiskIO)
		if _, err := qos.NewSet([]string{"diskio"}, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSet: %v, want an error containing %q", err, tc.want)
		}
	}
}

// TestDiskIOQuietSyncsOverLimit: the quiet fsync p99 table keeps at most
// 4096 containers; each container not learned because it is full is
// counted, once per quiet evaluation, through the controller and through
// a set holding it. Containers that leave free room for others.
func TestDiskIOQuietSyncsOverLimit(t *testing.T) {
	t.Parallel()
	const limit = 4096
	containers := func(n int) []qos.Container {
		cs := make([]qos.Container, n)
		for i := range cs {
			cs[i] = qos.Container{ID: fmt.Sprintf("web-%d", i), Syncs: 400, SyncP99: time.Millisecond}
		}
		return cs
	}
	for _, tc := range []struct {
		name    string
		n       []int // containers at each evaluation, the first one not quiet
		want    uint64
		through string // "controller" or "set"
	}{
		{"under the bound", []int{limit - 1, limit - 1, limit - 1}, 0, "controller"},
		{"at the bound", []int{limit, limit, limit}, 0, "controller"},
		{"one over, twice quiet", []int{limit + 1, limit + 1, limit + 1}, 2, "controller"},
		{"ten over, once quiet", []int{limit + 10, limit + 10}, 10, "set"},
		{"not quiet: nothing learned, nothing counted", []int{limit + 10}, 0, "set"},
		{"room freed by leavers", []int{limit + 3, limit + 3, limit - 5, limit}, 3, "set"},
		{"room freed, then over again", []int{limit + 3, limit + 3, limit - 5, limit + 3}, 6, "set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := qos.NewDiskIO(reactiveConfig())
			var c qos.Controller = d
			if tc.through == "set" {
				var err error
				if c, err = qos.NewSet([]string{"cpuset", "diskio"}, qos.DefaultConfig()); err != nil {
					t.Fatal(err)
				}
			}
			for i, n := range tc.n {
				// The revocable counter never moves: every evaluation
				// after the first is quiet.
				c.Evaluate(qos.Input{Now: at(time.Duration(i) * time.Second), Node: qos.Node{CPUs: 2, DiskIO: true},
					RevocableIOBytes: 1 << 20, Containers: containers(n)})
			}
			if got := qos.QuietSyncsOverLimit(c); got != tc.want {
				t.Errorf("QuietSyncsOverLimit = %d, want %d", got, tc.want)
			}
			if tc.through == "controller" && d.QuietSyncsOverLimit() != tc.want {
				t.Errorf("controller's QuietSyncsOverLimit = %d, want %d", d.QuietSyncsOverLimit(), tc.want)
			}
		})
	}
	if got := qos.QuietSyncsOverLimit(qos.Noop{}); got != 0 {
		t.Errorf("QuietSyncsOverLimit(Noop) = %d, want 0", got)
	}
}

// TestDiskIORequestSize: every Throttle and every Unthrottle that keeps a
// cap carries RequestKiB (the disk's requests cut short while revocable
// I/O is capped); the Unthrottle that removes the cap carries 0 (the
// device's own size back) and says so; RequestKiB 0 leaves the size alone
// throughout; a RequestKiB below a page is refused.
func TestDiskIORequestSize(t *testing.T) {
	t.Parallel()
	s, ms := time.Second, time.Millisecond
	const mib = 1 << 20
	type step struct {
		offset time.Duration
		bytes  uint64 // the revocable subtree's counter, MiB
		p99    time.Duration
	}
	steps := []step{
		{0, 100, 2 * ms},
		{s, 200, 2 * ms},       // 100 MiB/s uncapped: learned
		{2 * s, 300, 40 * ms},  // throttle 50
		{4 * s, 400, 40 * ms},  // throttle 35 (the floor)
		{5 * s, 435, 3 * ms},   // calm begins
		{10 * s, 610, 3 * ms},  // unthrottle 45
		{11 * s, 655, 3 * ms},  // 55
		{12 * s, 710, 3 * ms},  // 65
		{13 * s, 775, 3 * ms},  // 75
		{14 * s, 850, 3 * ms},  // 85
		{15 * s, 935, 3 * ms},  // 95
		{16 * s, 1030, 3 * ms}, // the cap removed
	}
	for _, tt := range []struct {
		request uint64
		want    string
		last    string // the reason of the correction that removes the cap
	}{
		{32, "throttle 50.0/32; throttle 35.0/32; unthrottle 45.0/32; unthrottle 55.0/32; unthrottle 65.0/32; unthrottle 75.0/32; unthrottle 85.0/32; unthrottle 95.0/32; unthrottle 0.0/0",
			"guaranteed I/O calm for 11s; the disk's own request size back"},
		{0, "throttle 50.0/0; throttle 35.0/0; unthrottle 45.0/0; unthrottle 55.0/0; unthrottle 65.0/0; unthrottle 75.0/0; unthrottle 85.0/0; unthrottle 95.0/0; unthrottle 0.0/0",
			"guaranteed I/O calm for 11s"},
	} {
		t.Run(fmt.Sprint(tt.request), func(t *testing.T) {
			t.Parallel()
			cfg := reactiveConfig()
			cfg.RequestKiB = tt.request
			c := qos.NewDiskIO(cfg)
			in := ioScene()
			var got []string
			var last qos.Correction
			for _, st := range steps {
				in.Now = at(st.offset)
				in.RevocableIOBytes = st.bytes * mib
				in.Containers[0].Syncs, in.Containers[0].SyncP99, in.Containers[0].SampledAt = 400, st.p99, in.Now
				for _, corr := range c.Evaluate(in) {
					got = append(got, fmt.Sprintf("%s %.1f/%d", corr.Kind, corr.IOLimit/mib, corr.IORequestKiB))
					in.RevocableIOLimit, last = corr.IOLimit, corr
				}
			}
			if g := strings.Join(got, "; "); g != tt.want {
				t.Errorf("got  %s\nwant %s", g, tt.want)
			}
			if last.Reason != tt.last {
				t.Errorf("last reason %q, want %q", last.Reason, tt.last)
			}
		})
	}
	cfg := qos.DefaultConfig()
	cfg.DiskIO.RequestKiB = 2
	if _, err := qos.NewSet([]string{"diskio"}, cfg); err == nil || !strings.Contains(err.Error(), "request KiB") {
		t.Errorf("RequestKiB 2: err %v, want one naming request KiB", err)
	}
}

// TestDiskIOGuardedStart: on a node whose guaranteed work does disk I/O,
// revocable I/O starts capped (GuardedStartFraction of the disk rate)
// before any signal, so no backlog forms before a first throttle; the cap
// rises only while guaranteed I/O is calm and revocable I/O uses the cap,
// stops at the disk's rate instead of going, and a cap taken off from
// outside comes back at most once per DecreaseInterval.
func TestDiskIOGuardedStart(t *testing.T) {
	t.Parallel()
	s, ms := time.Second, time.Millisecond
	const mib = 1 << 20
	// io sets the revocable counter (MiB) and web-1's fsyncs over its
	// latest interval (2 ms p99 each: calm).
	io := func(bytes, syncs uint64) func(in *qos.Input) {
		return func(in *qos.Input) {
			in.RevocableIOBytes = bytes * mib
			in.Containers[0].Syncs, in.Containers[0].SampledAt = syncs, in.Now
			in.Containers[0].SyncP99 = 0
			if syncs > 0 {
				in.Containers[0].SyncP99 = 2 * ms
			}
		}
	}
	lifted := func(bytes, syncs uint64) func(in *qos.Input) {
		return func(in *qos.Input) { io(bytes, syncs)(in); in.RevocableIOLimit = 0 }
	}
	runIOSteps(t, qos.NewDiskIO(qos.DefaultDiskIOConfig()), []ioStep{
		{0, io(100, 0), "", ""},
		{s, io(200, 0), "", ""}, // 100 MiB/s uncapped, guaranteed work does no I/O: no cap
		{2 * s, io(200, 400), "throttle 35.0", "web-1 does disk I/O (400 fsyncs, 0 block requests in its latest interval); revocable disk I/O starts capped at 35.0 MiB/s (35% of the highest rate revocable I/O reached 100.0 MiB/s), requests <= 32 KiB"},
		{3 * s, io(235, 400), "", ""}, // calm begins, the cap used
		{7 * s, io(375, 400), "", ""}, // calm for 4 s
		{8 * s, io(410, 400), "unthrottle 45.0", "guaranteed I/O calm for 5s"},
		{9 * s, io(455, 400), "unthrottle 55.0", ""},
		{10 * s, io(455, 400), "", ""}, // writers frozen: calm, but the cap was not tested
		{11 * s, io(470, 400), "", ""}, // 15 MiB/s: under half of the cap, still untested
		{12 * s, io(525, 400), "unthrottle 65.0", ""},
		{13 * s, io(590, 400), "unthrottle 75.0", ""},
		{14 * s, io(665, 400), "unthrottle 85.0", ""},
		{15 * s, io(750, 400), "unthrottle 95.0", ""},
		{16 * s, io(845, 400), "unthrottle 100.0", "guaranteed I/O calm for 13s; the disk's rate, kept while guaranteed work does disk I/O"},
		{17 * s, io(945, 400), "", ""}, // at the disk's rate: kept, not removed
		{18 * s, lifted(1045, 400), "throttle 35.0", ""},
		{18*s + 500*ms, lifted(1062, 400), "", ""}, // taken off again: back once per DecreaseInterval
		{19 * s, lifted(1110, 400), "", ""},
		{20 * s, lifted(1160, 400), "throttle 35.0", ""},
		{21 * s, func(in *qos.Input) { io(1195, 400)(in); in.Containers[0].SyncP99 = 40 * ms }, "", ""}, // a signal within DecreaseInterval of the start cap
		{22 * s, func(in *qos.Input) { io(1230, 400)(in); in.Containers[0].SyncP99 = 40 * ms }, "", ""}, // and after it: at the floor already
		{23 * s, func(in *qos.Input) {
			io(1265, 400)(in)
			in.Containers[0].SyncP99 = 40 * ms
			in.RevocableIOLimit = 80 * mib
		}, "throttle 40.0", ""},
	})

	// Guaranteed work's I/O is remembered for GuardedIOWindow: within it
	// the cap stops at the disk's rate, after it the rise removes the cap.
	cfg := qos.DefaultDiskIOConfig()
	cfg.GuardedIOWindow, cfg.CalmPeriod, cfg.IncreaseFraction = 10*s, s, 0.5
	runIOSteps(t, qos.NewDiskIO(cfg), []ioStep{
		{0, io(100, 0), "", ""},
		{s, io(200, 0), "", ""},
		{2 * s, io(200, 10), "throttle 35.0", ""},
		{3 * s, io(235, 0), "", ""}, // calm begins; the last guaranteed I/O at 2 s
		{4 * s, io(270, 0), "unthrottle 85.0", ""},
		{5 * s, io(355, 0), "unthrottle 100.0", ""},
		{6 * s, io(455, 0), "", ""},
		{11 * s, io(955, 0), "", ""},
		{12 * s, io(1055, 0), "unthrottle 0.0", "guaranteed I/O calm for 9s; the disk's own request size back"}, // 10 s without guaranteed I/O
		{13 * s, io(1155, 0), "", ""}, // uncapped, and no guaranteed I/O: stays so
		{14 * s, io(1255, 3), "throttle 35.0", ""},
	})

	// No rate known: the start cap is a fraction of StartBytesPerSecond,
	// and what revocable I/O reaches under it teaches the disk's rate
	// (a lower bound), so that a stall's floor is a share of it.
	runIOSteps(t, qos.NewDiskIO(qos.DefaultDiskIOConfig()), []ioStep{
		{0, io(100, 5), "throttle 89.6", ""},
		{s, io(180, 5), "", ""},     // 80 MiB/s under the cap: learned
		{2 * s, io(580, 5), "", ""}, // 400 MiB/s (a burst): 89.6 at most
		{3 * s, func(in *qos.Input) { io(600, 5)(in); in.Containers[0].SyncP99 = 300 * ms }, "throttle 31.4",
			"web-1 fsync p99 300ms over 5 > 100ms (a stall); revocable disk I/O cap 31.4 MiB/s (the floor: 35% of the highest rate revocable I/O reached 89.6 MiB/s), requests <= 32 KiB"},
	})
}

// TestDiskIOGuardedStartEdges: what counts as guaranteed disk I/O, and
// what the start cap is a fraction of.
func TestDiskIOGuardedStartEdges(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name   string
		cfg    func(*qos.DiskIOConfig)
		edit   func(in *qos.Input)
		want   string
		reason string
	}{
		{"no rate known: a fraction of the start value", nil, func(in *qos.Input) { in.Containers[0].Syncs = 5 }, "throttle 89.6",
			"web-1 does disk I/O (5 fsyncs, 0 block requests in its latest interval); revocable disk I/O starts capped at 89.6 MiB/s (35% of the start value 256.0 MiB/s), requests <= 32 KiB"},
		{"the configured disk rate", func(c *qos.DiskIOConfig) { c.DiskBytesPerSecond = 200 * mib }, func(in *qos.Input) { in.Node.DiskBytesPerSecond = 100 * mib; in.Containers[0].Syncs = 5 }, "throttle 70.0",
			"web-1 does disk I/O (5 fsyncs, 0 block requests in its latest interval); revocable disk I/O starts capped at 70.0 MiB/s (35% of the configured disk rate 200.0 MiB/s), requests <= 32 KiB"},
		{"the node's disk rate", nil, func(in *qos.Input) { in.Node.DiskBytesPerSecond = 100 * mib; in.Containers[0].Syncs = 5 }, "throttle 35.0", ""},
		{"block requests count", nil, func(in *qos.Input) { in.Containers[0].BlockIOs = 2 }, "throttle 89.6",
			"web-1 does disk I/O (0 fsyncs, 2 block requests in its latest interval); revocable disk I/O starts capped at 89.6 MiB/s (35% of the start value 256.0 MiB/s), requests <= 32 KiB"},
		{"a protected service's I/O counts", nil, func(in *qos.Input) { in.Containers[1].Syncs = 1 }, "throttle 89.6", ""},
		{"revocable work's own I/O does not", nil, func(in *qos.Input) { in.Containers[2].Syncs, in.Containers[2].BlockIOs = 100, 100 }, "", ""},
		{"under the floor: the floor", func(c *qos.DiskIOConfig) { c.GuardedStartFraction, c.FloorFraction = 0.1, 0.2 },
			func(in *qos.Input) { in.Node.DiskBytesPerSecond = 100 * mib; in.Containers[0].Syncs = 5 }, "throttle 20.0",
			"web-1 does disk I/O (5 fsyncs, 0 block requests in its latest interval); revocable disk I/O starts capped at 20.0 MiB/s (the floor: 20% of the node's disk rate 100.0 MiB/s), requests <= 32 KiB"},
		{"off", func(c *qos.DiskIOConfig) { c.GuardedStartFraction = 0 }, func(in *qos.Input) { in.Containers[0].Syncs = 5 }, "", ""},
		{"a cap on already: nothing", nil, func(in *qos.Input) { in.RevocableIOLimit = 40 * mib; in.Containers[0].Syncs = 5 }, "", ""},
		{"a signal wins: halving from the start", nil, func(in *qos.Input) { in.Containers[0].Syncs, in.Containers[0].SyncP99 = 50, 30*time.Millisecond }, "throttle 128.0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := qos.DefaultDiskIOConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			in := ioScene()
			in.Now = at(0)
			tt.edit(&in)
			var got []string
			for _, corr := range qos.NewDiskIO(cfg).Evaluate(in) {
				got = append(got, fmt.Sprintf("%s %.1f", corr.Kind, corr.IOLimit/(1<<20)))
				if tt.reason != "" && corr.Reason != tt.reason {
					t.Errorf("reason %q, want %q", corr.Reason, tt.reason)
				}
			}
			if strings.Join(got, "; ") != tt.want {
				t.Errorf("got %q, want %q", strings.Join(got, "; "), tt.want)
			}
		})
	}
	for _, tc := range []struct {
		edit func(*qos.DiskIOConfig)
		want string
	}{
		{func(c *qos.DiskIOConfig) { c.GuardedStartFraction = 1.5 }, "guarded start fraction must be in [0, 1]"},
		{func(c *qos.DiskIOConfig) { c.GuardedIOWindow = 0 }, "guarded I/O window must be positive"},
		{func(c *qos.DiskIOConfig) { c.IncreaseUseFraction = -0.1 }, "increase use fraction must be in [0, 1]"},
		{func(c *qos.DiskIOConfig) { c.DiskBytesPerSecond = -1 }, "disk bytes per second must not be negative"},
	} {
		cfg := qos.DefaultConfig()
		tc.edit(&cfg.DiskIO)
		if _, err := qos.NewSet([]string{"diskio"}, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want one naming %q", err, tc.want)
		}
	}
}
