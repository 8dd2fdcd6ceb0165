package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/slackline/slackline/bpf"

	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

func TestQoSSchedule(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// Following a 100 ms monitor at 250 ms: the first pass evaluates, then
	// every third (passes end with a few ms of jitter), never two closer
	// than 250 ms less a quarter pass.
	s := qosSchedule{follow: true, min: 250 * ms, sample: 100 * ms}
	var evaluated []time.Duration
	for k := range 10 {
		end := time.Duration(k)*100*ms + time.Duration(k%3)*ms // jitter
		if s.sampled(at(end), false) {
			s.evaluated(at(end))
			evaluated = append(evaluated, end)
		}
	}
	want := []time.Duration{0, 300 * ms, 600 * ms, 900 * ms}
	if len(evaluated) != len(want) {
		t.Fatalf("evaluated at %v, want %v", evaluated, want)
	}
	for i := range want {
		if evaluated[i].Truncate(10*ms) != want[i] {
			t.Fatalf("evaluated at %v, want %v", evaluated, want)
		}
	}
	// A pass that ends a little early (jitter) still evaluates.
	s = qosSchedule{follow: true, min: 200 * ms, sample: 100 * ms, last: at(0)}
	if !s.sampled(at(199*ms), false) {
		t.Error("a pass 1 ms short of the interval did not evaluate")
	}
	if s.sampled(at(150*ms), false) {
		t.Error("a pass 50 ms short of the interval evaluated")
	}

	for _, c := range []struct {
		name    string
		s       qosSchedule
		now     time.Duration
		pending bool
		want    time.Duration
	}{
		{"own timer: the interval after the last", qosSchedule{min: 250 * ms, last: at(0)}, 10 * ms, false, 240 * ms},
		{"own timer before any evaluation", qosSchedule{min: 250 * ms}, 10 * ms, false, 250 * ms},
		{"following: a stalled monitor's grace", qosSchedule{follow: true, min: 250 * ms, sample: 100 * ms, last: at(0)}, 10 * ms, false, 440 * ms},
		{"following, events pending: at last + interval", qosSchedule{follow: true, min: 250 * ms, sample: 100 * ms, last: at(0)}, 10 * ms, true, 240 * ms},
		{"overdue: at once", qosSchedule{min: 250 * ms, last: at(0)}, time.Second, true, 0},
		{"following, deferring: the grace after the deferral", qosSchedule{follow: true, min: 250 * ms, sample: 100 * ms, quiet: time.Second, last: at(0), deferring: true}, 300 * ms, false, 900 * ms},
		{"deferring, events pending: at last + interval", qosSchedule{follow: true, min: 250 * ms, sample: 100 * ms, quiet: time.Second, last: at(0), deferring: true}, 300 * ms, true, 0},
	} {
		if got := c.s.wait(at(c.now), c.pending); got != c.want {
			t.Errorf("%s: wait %v, want %v", c.name, got, c.want)
		}
	}

	// Events evaluate at once only QoSIntervalMin after the last evaluation.
	s = qosSchedule{min: 250 * ms}
	if !s.events(at(0)) {
		t.Error("events before any evaluation waited")
	}
	s.evaluated(at(0))
	if s.events(at(249 * ms)) {
		t.Error("events 249 ms after an evaluation evaluated at once")
	}
	if !s.events(at(250 * ms)) {
		t.Error("events 250 ms after an evaluation waited")
	}
	// Quiet passes (every container idle, the node not sampled) defer an
	// evaluation up to quiet after the last; a pass that is not quiet
	// evaluates at once, and an evaluation ends the deferral.
	s = qosSchedule{follow: true, min: 250 * ms, sample: 100 * ms, quiet: time.Second}
	var got []string
	for k := range 25 {
		end := time.Duration(k) * 100 * ms
		quiet := k != 0 && k != 14 // the first pass, and one at 1.4 s, changed something
		if s.sampled(at(end), quiet) {
			s.evaluated(at(end))
			got = append(got, fmt.Sprint(end))
		} else if s.deferring {
			got = append(got, fmt.Sprint("defer ", end))
		}
	}
	if wantText := "[0s defer 300ms defer 400ms defer 500ms defer 600ms defer 700ms defer 800ms defer 900ms 1s defer 1.3s 1.4s defer 1.7s defer 1.8s defer 1.9s defer 2s defer 2.1s defer 2.2s defer 2.3s 2.4s]"; fmt.Sprint(got) != wantText {
		t.Errorf("quiet passes: got %v, want %v", got, wantText)
	}
	// Without a quiet bound, quiet passes evaluate as any other.
	s = qosSchedule{follow: true, min: 250 * ms, sample: 100 * ms, last: at(0)}
	if !s.sampled(at(300*ms), true) || s.deferring {
		t.Error("a quiet pass deferred an evaluation with no quiet bound")
	}

	// Not following, passes never evaluate.
	if (&qosSchedule{min: 250 * ms}).sampled(at(time.Hour), false) {
		t.Error("a pass evaluated while not following the monitor")
	}
}

// TestQoSSampleTakenEvaluatesOnlyWhenDue: the monitor's end-of-pass call
// evaluates, on its own goroutine, before the loop's first evaluation and
// at passes at or after qosSchedule.next, not at the passes in between,
// and never while Run is not running; each evaluation arms Run's timer
// for the stalled monitor's grace after it.
func TestQoSSampleTakenEvaluatesOnlyWhenDue(t *testing.T) {
	t.Parallel()
	evaluations := 0
	l := newQoSLoop(Config{Logger: slog.New(slog.DiscardHandler), Containerizer: newFakeContainerizer(),
		QoS: qos.ControllerFunc(func(qos.Input) []qos.Correction { evaluations++; return nil })},
		resources.Resources{}, nil, nil, nil)
	l.sampleTaken()
	if evaluations != 0 {
		t.Fatal("a pass evaluated while Run was not running")
	}
	// As Run sets them up, following a 100 ms monitor at 250 ms.
	l.sched = qosSchedule{follow: true, min: 250 * time.Millisecond, sample: 100 * time.Millisecond}
	l.timer = time.NewTimer(time.Hour)
	defer l.timer.Stop()
	l.sampleTaken()
	if evaluations != 1 {
		t.Fatalf("no evaluation yet: the pass made %d, want 1", evaluations)
	}
	if armed := l.due.Sub(l.sched.last); armed != 450*time.Millisecond {
		t.Errorf("timer armed %v after the evaluation, want 450 ms (250 ms + two passes)", armed)
	}
	// The next evaluation is due 225 ms after the first: a pass right
	// away does not evaluate.
	l.sampleTaken()
	if evaluations != 1 {
		t.Errorf("a pass before the next evaluation was due evaluated (%d evaluations)", evaluations)
	}
	// The last evaluation an hour ago: due.
	l.sched.last = time.Now().Add(-time.Hour)
	l.nextEval.Store(1)
	l.sampleTaken()
	if evaluations != 2 {
		t.Errorf("a pass after the next evaluation was due made %d evaluations in all, want 2", evaluations)
	}
}

// TestQoSEventsOfLateEBPF (#29): the QoS loop reads the threshold events
// of an eBPF monitor loaded after it started from the monitor's own
// channel (lateEBPF relays nothing), and evaluates with them.
func TestQoSEventsOfLateEBPF(t *testing.T) {
	t.Parallel()
	late := newLateEBPF()
	got := make(chan []qos.Event, 16)
	l := newQoSLoop(Config{Logger: slog.New(slog.DiscardHandler), Containerizer: newFakeContainerizer(), EBPF: late,
		QoS: qos.ControllerFunc(func(in qos.Input) []qos.Correction {
			if len(in.Events) > 0 {
				got <- slices.Clone(in.Events)
			}
			return nil
		})},
		resources.Resources{}, &observer{}, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	m := newFakeMonitor()
	if err := late.done(m, nil, nil); err != nil {
		t.Fatal(err)
	}
	go func() { _ = late.Run(ctx) }()
	m.events <- bpf.ThresholdEvent{Cgroup: 3, Latency: 5 * time.Millisecond}
	select {
	case events := <-got:
		if len(events) != 1 || events[0].Latency != 5*time.Millisecond {
			t.Errorf("evaluated with events %+v, want the one sent", events)
		}
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(time.Minute): // a backstop, not a timing assertion
		t.Fatal("no evaluation with the event")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled", err)
	}
}

// TestQoSQuietPassDefers (#29): following a monitor whose pass was quiet
// (its containers idle for quietSettle), a due evaluation waits (counted
// once) and Run's timer is pushed past the deferral; a pending event or a
// pass that is not quiet evaluates. The deferral's bound is a minute, so
// that a stall of the test on a loaded machine cannot end it.
func TestQoSQuietPassDefers(t *testing.T) {
	t.Parallel()
	m, _ := fakeMonitorNode(t, 100)
	evaluations := 0
	l := newQoSLoop(Config{Logger: slog.New(slog.DiscardHandler), Containerizer: newFakeContainerizer(), Monitor: m, QuietDeferMax: time.Minute,
		QoS: qos.ControllerFunc(func(qos.Input) []qos.Correction { evaluations++; return nil })},
		resources.Resources{}, nil, nil, nil)
	l.sched = qosSchedule{follow: true, min: 250 * time.Millisecond, sample: 100 * time.Millisecond, quiet: l.quietMax}
	l.timer = time.NewTimer(time.Hour)
	defer l.timer.Stop()
	// Passes on the wall clock (sampleTaken reads it), long enough ago
	// that the containers (none) have settled.
	t0 := time.Now().Truncate(time.Second).Add(-10 * time.Second)
	pass := func(at time.Duration) {
		t.Helper()
		if err := m.Sample(t0.Add(at)); err != nil {
			t.Fatal(err)
		}
		l.sampleTaken()
	}
	pass(0) // the first evaluation (the pass sampled the node)
	if evaluations != 1 {
		t.Fatalf("%d evaluations after the first pass, want 1", evaluations)
	}
	last := l.sched.last
	l.sched.last = last.Add(-300 * time.Millisecond) // the next is due
	l.nextEval.Store(1)
	pass(100 * time.Millisecond) // quiet
	if evaluations != 1 || l.deferred.Load() != 1 {
		t.Fatalf("a quiet pass: %d evaluations, %d deferred, want 1 and 1", evaluations, l.deferred.Load())
	}
	if armed := l.due.Sub(l.sched.last); armed != time.Minute+200*time.Millisecond {
		t.Errorf("timer armed %v after the last evaluation, want 1 min 200 ms (the deferral + two passes)", armed)
	}
	pass(200 * time.Millisecond) // quiet again: the same deferral
	if evaluations != 1 || l.deferred.Load() != 1 {
		t.Fatalf("a second quiet pass: %d evaluations, %d deferred, want 1 and 1", evaluations, l.deferred.Load())
	}
	l.pending = append(l.pending, qos.Event{Container: "c"})
	pass(300 * time.Millisecond) // quiet, but an event waits
	if evaluations != 2 {
		t.Fatalf("a quiet pass with an event pending: %d evaluations, want 2", evaluations)
	}
	l.sched.last = l.sched.last.Add(-300 * time.Millisecond)
	l.nextEval.Store(1)
	pass(time.Second) // the node's second: not quiet
	if evaluations != 3 {
		t.Fatalf("a pass that sampled the node: %d evaluations, want 3", evaluations)
	}
}
