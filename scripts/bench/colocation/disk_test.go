package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDiskModel(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	type cmd struct {
		at    float64 // ms after t0
		bytes int     // -1: a flush
		done  float64 // ms after t0
	}
	// 1 MiB/s: a KiB holds the device for 1000/1024 ms; 0.1 ms per command.
	for _, tc := range []struct {
		name  string
		flush time.Duration
		cmds  []cmd
	}{
		{"idle device: op plus bytes", 0, []cmd{{0, 1024, 0.1 + 1000.0/1024}}},
		{"FIFO: a small write waits for the large one ahead", 0, []cmd{
			{0, 128 << 10, 0.1 + 125}, {1, 4096, 0.1 + 125 + 0.1 + 1000.0/256}}},
		{"a command after the queue drained starts at once", 0, []cmd{
			{0, 1024, 0.1 + 1000.0/1024}, {500, 1024, 500 + 0.1 + 1000.0/1024}}},
		{"a flush waits for the commands ahead, then its cost", 5 * time.Millisecond, []cmd{
			{0, 128 << 10, 125.1}, {10, -1, 130.1}, {11, 0, 130.2}}},
		{"a free flush on an idle device completes at once", 0, []cmd{{3, -1, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &diskModel{rate: 1 << 20, op: 100 * time.Microsecond, flush: tc.flush}
			for i, c := range tc.cmds {
				var got time.Time
				if c.bytes < 0 {
					got = d.sync(ms(c.at))
				} else {
					got = d.transfer(ms(c.at), c.bytes)
				}
				if diff := got.Sub(ms(c.done)); diff < -time.Microsecond || diff > time.Microsecond {
					t.Errorf("command %d: done at %v, want %v", i, got.Sub(t0), ms(c.done).Sub(t0))
				}
			}
		})
	}
}

func TestDiskOptionsValidate(t *testing.T) {
	t.Parallel()
	good := diskOptions{kind: "loop", rate: 128 << 20, op: 20 * time.Microsecond, size: 2 << 30, requestKiB: 1280, layout: layoutSplit, scheduler: "none"}
	if err := good.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bfq := good
	bfq.scheduler, bfq.iosched = "bfq", []string{"slice_idle=0", "low_latency=1"}
	if err := bfq.validate(); err != nil {
		t.Fatalf("bfq with tunables: %v", err)
	}
	for name, o := range map[string]diskOptions{
		"kind":      {kind: "nbd", rate: 1, size: 2 << 30, requestKiB: 1280, layout: layoutShared},
		"rate":      {kind: "loop", rate: 0, size: 2 << 30, requestKiB: 1280, layout: layoutShared},
		"op":        {kind: "loop", rate: 1, op: -1, size: 2 << 30, requestKiB: 1280, layout: layoutShared},
		"size":      {kind: "loop", rate: 1, size: 1 << 20, requestKiB: 1280, layout: layoutShared},
		"request":   {kind: "loop", rate: 1, size: 2 << 30, requestKiB: 2, layout: layoutShared},
		"layout":    {kind: "loop", rate: 1, size: 2 << 30, requestKiB: 1280, layout: "lvm"},
		"rt":        {kind: "loop", rate: 1, size: 2 << 30, requestKiB: 1280, rtPriority: 100, layout: layoutShared},
		"scheduler": {kind: "loop", rate: 1, size: 2 << 30, requestKiB: 1280, layout: layoutShared, scheduler: "cfq"},
		"tunable":   {kind: "loop", rate: 1, size: 2 << 30, requestKiB: 1280, layout: layoutShared, scheduler: "bfq", iosched: []string{"slice_idle"}},
		"path":      {kind: "loop", rate: 1, size: 2 << 30, requestKiB: 1280, layout: layoutShared, scheduler: "bfq", iosched: []string{"../rotational=1"}},
		"none":      {kind: "loop", rate: 1, size: 2 << 30, requestKiB: 1280, layout: layoutShared, scheduler: "none", iosched: []string{"slice_idle=0"}},
	} {
		if err := o.validate(); err == nil {
			t.Errorf("%s: invalid options accepted", name)
		}
	}
	if err := (diskOptions{kind: "host"}).validate(); err != nil {
		t.Errorf("host: %v", err)
	}
}

func TestCleanupStack(t *testing.T) {
	t.Parallel()
	var c cleanupStack
	var ran []string
	c.push(func() { ran = append(ran, "outer") })
	mark := c.mark()
	c.push(func() { ran = append(ran, "a") })
	c.push(func() { ran = append(ran, "b") })
	c.unwind(mark)
	if want := []string{"b", "a"}; !slices.Equal(ran, want) {
		t.Fatalf("unwind to the mark ran %v, want %v", ran, want)
	}
	c.unwind(mark) // nothing left above the mark: nothing runs twice
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.unwind(0)
	c.push(func() { ran = append(ran, "late") }) // after a signal's unwind: at once
	if want := []string{"b", "a", "outer", "late"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
}

// TestCleanupStep: a step runs and its undo is on the stack when it
// returns; once a signal's unwinding has begun, no step runs.
func TestCleanupStep(t *testing.T) {
	t.Parallel()
	var c cleanupStack
	var ran []string
	c.beforeStep = func(name string) { ran = append(ran, "begin "+name) }
	if err := c.step("made", func() error {
		c.push(func() { ran = append(ran, "undo made") })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.stepMu.Lock() // as the signal handler does
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.unwind(0)
	c.stepMu.Unlock()
	if err := c.step("late", func() error { ran = append(ran, "late ran"); return nil }); !errors.Is(err, errInterrupted) {
		t.Errorf("step after the signal's unwinding: %v, want %v", err, errInterrupted)
	}
	if want := []string{"begin made", "undo made"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
}

func TestLateReplies(t *testing.T) {
	t.Parallel()
	due := time.Unix(1000, 0)
	var r lateReplies
	for i, tc := range []struct {
		late    time.Duration
		logged  bool
		counted bool
	}{
		{0, false, false},
		{lateThreshold - time.Microsecond, false, false},
		{lateThreshold, true, true},
		{150 * time.Millisecond, true, true},
		{-time.Millisecond, false, false}, // answered early (a clock step): on time
	} {
		before := r.Late
		line := r.note(due, due.Add(tc.late))
		if (line != "") != tc.logged || (r.Late > before) != tc.counted {
			t.Errorf("reply %d, %v late: line %q, late count %d -> %d; want logged %v, counted %v", i, tc.late, line, before, r.Late, tc.logged, tc.counted)
		}
	}
	if r.Commands != 5 || r.Late != 2 || r.Worst != 150*time.Millisecond {
		t.Errorf("record %+v: want 5 commands, 2 late, worst 150ms", r)
	}
	// Past the limit: one line saying so, then counted only.
	var lines []string
	for range lateLogLimit + 10 {
		if line := r.note(due, due.Add(time.Second)); line != "" {
			lines = append(lines, line)
		}
	}
	if want := lateLogLimit - 2 + 1; len(lines) != want {
		t.Errorf("%d lines logged past the first two, want %d (up to the limit, then one saying so)", len(lines), want)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "only counted") {
		t.Errorf("last line %q does not say the rest are only counted", last)
	}
	if r.Late != 2+lateLogLimit+10 {
		t.Errorf("late %d, want %d: every late reply counted", r.Late, 2+lateLogLimit+10)
	}
}
