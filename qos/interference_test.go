package qos_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slackline/slackline/qos"
)

const ms = time.Millisecond

// scene is a hand-built node for table tests: web-1 guaranteed, a protected
// service, and three revocable containers with 1 core allocated each.
func scene(now time.Duration, webP99 time.Duration, limit float64) qos.Input {
	return qos.Input{
		Now:  at(now),
		Node: qos.Node{CPUs: 8, MemTotal: 16 << 30, MemAvailable: 8 << 30},
		Containers: []qos.Container{
			{ID: "web-1", CPUAllocated: 4, CPU: 3, RunqP99: webP99, StartedAt: at(-time.Hour)},
			{ID: "sshd", Protected: true, CPU: 0.1, RunqP99: 100 * time.Microsecond},
			{ID: "batch-1", Revocable: true, CPUAllocated: 1, CPU: 1, StartedAt: at(-3 * time.Minute)},
			{ID: "batch-2", Revocable: true, CPUAllocated: 1, CPU: 1, StartedAt: at(-2 * time.Minute)},
			{ID: "batch-3", Revocable: true, CPUAllocated: 1, CPU: 1, StartedAt: at(-1 * time.Minute)},
		},
		RevocableLimit: limit,
	}
}

// loop feeds a controller a series of inputs, applying the subtree limits
// it asks for to the next input's RevocableLimit, and returns the
// corrections with the time they were asked for.
type timed struct {
	at time.Duration
	c  qos.Correction
}

func loop(c qos.Controller, inputs []qos.Input) []timed {
	var out []timed
	limit := inputs[0].RevocableLimit
	for _, in := range inputs {
		in.RevocableLimit = limit
		for _, corr := range c.Evaluate(in) {
			out = append(out, timed{in.Now.Sub(t0), corr})
			if corr.ContainerID == "" && corr.Kind != qos.Kill {
				limit = corr.CPULimit
			}
		}
	}
	return out
}

// series builds inputs every 100 ms from `from` for `n` samples, with web-1's
// p99 given by p99(i).
func series(from time.Duration, n int, limit float64, p99 func(i int) time.Duration) []qos.Input {
	var ins []qos.Input
	for i := range n {
		ins = append(ins, scene(from+time.Duration(i)*100*ms, p99(i), limit))
	}
	return ins
}

// kinds renders corrections one per line: "500ms throttle 0.75",
// "5s unthrottle none", "12s kill batch-2".
func kinds(ts []timed) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "%v %v ", t.at, t.c.Kind)
		switch {
		case t.c.Kind == qos.Kill:
			b.WriteString(t.c.ContainerID)
		case t.c.CPULimit == 0:
			b.WriteString("none")
		default:
			b.WriteString(strconv.FormatFloat(t.c.CPULimit, 'f', -1, 64))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestInterferenceTable(t *testing.T) {
	calm := func(int) time.Duration { return 200 * time.Microsecond }
	tests := []struct {
		name   string
		limit  float64
		inputs []qos.Input
		want   string // corrections, one per line: time kind target-or-limit
	}{
		{
			name:   "calm and unlimited: nothing",
			inputs: series(0, 50, 0, calm),
		},
		{
			name:   "first violation throttles at once, from what revocable work uses",
			inputs: series(0, 1, 0, func(int) time.Duration { return 4 * ms }),
			want:   "0s throttle 1.5\n", // 3 cores used * 0.5
		},
		{
			name:   "decreases wait DecreaseInterval for fresh evidence",
			inputs: series(0, 11, 0, func(int) time.Duration { return 4 * ms }),
			want:   "0s throttle 1.5\n500ms throttle 0.75\n1s throttle 0.375\n",
		},
		{
			name: "hysteresis: p99 between exit and enter holds the limit",
			inputs: series(0, 100, 2, func(i int) time.Duration {
				return []time.Duration{600 * time.Microsecond, 950 * time.Microsecond, 700 * time.Microsecond}[i%3]
			}),
		},
		{
			name: "noise around the exit threshold never raises (calm must last CalmPeriod)",
			inputs: series(0, 100, 2, func(i int) time.Duration {
				if i%20 == 19 {
					return 550 * time.Microsecond // one noisy sample every 2 s resets the calm period
				}
				return 300 * time.Microsecond
			}),
		},
		{
			name:   "calm for CalmPeriod raises by a step every IncreaseInterval, removes the limit at the allocation",
			inputs: series(0, 100, 2, calm),
			// step = max(0.1, 5% of 8) = 0.4; allocation 3 cores
			want: "3s unthrottle 2.4\n4s unthrottle 2.8\n5s unthrottle none\n",
		},
		{
			name: "noise around the enter threshold only ever lowers the limit",
			inputs: series(0, 30, 2, func(i int) time.Duration {
				if i%2 == 0 {
					return 1100 * time.Microsecond
				}
				return 900 * time.Microsecond
			}),
			want: "0s throttle 1\n600ms throttle 0.5\n1.2s throttle 0.25\n1.8s throttle 0.16\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kinds(loop(newInterference(t, qos.DefaultConfig()), tt.inputs))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("corrections (-want +got):\n%s", diff)
			}
		})
	}
}

// atFloor returns inputs every 100 ms with the subtree already at the floor
// (0.16 cores on 8 CPUs) and web-1 violating, each altered by edit.
func atFloor(n int, edit func(in *qos.Input)) []qos.Input {
	ins := series(0, n, 0.16, func(int) time.Duration { return 3 * ms })
	for i := range ins {
		if edit != nil {
			edit(&ins[i])
		}
	}
	return ins
}

func TestInterferenceKillsOnlyAfterThrottleFailed(t *testing.T) {
	cfg := qos.DefaultConfig()
	cfg.Interference.KillAfter = 5 * time.Second
	cfg.Interference.KillCooldown = 2 * time.Second

	t.Run("above the floor never kills", func(t *testing.T) {
		// The agent fails to apply the throttles (the limit stays at 2
		// cores): violations go on, but the subtree never reached the floor,
		// so throttling has not been tried out and nothing is killed.
		c := newInterference(t, cfg)
		for i := range 200 {
			in := scene(time.Duration(i)*100*ms, 3*ms, 2)
			for _, corr := range c.Evaluate(in) {
				if corr.Kind == qos.Kill {
					t.Fatalf("%v: kill while the limit is 2 cores, above the floor", in.Now.Sub(t0))
				}
			}
		}
	})
	t.Run("at the floor kills after KillAfter, then one per KillCooldown", func(t *testing.T) {
		got := kinds(loop(newInterference(t, cfg), atFloor(100, nil)))
		// All equally innocent (no attribution): newest first.
		want := "5s kill batch-3\n7s kill batch-2\n9s kill batch-1\n"
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("calm at the floor restarts the KillAfter clock", func(t *testing.T) {
		ins := atFloor(100, nil)
		ins[40].Containers[0].RunqP99 = 200 * time.Microsecond // one calm sample at 4 s
		got := kinds(loop(newInterference(t, cfg), ins))
		// 4.1 s + 5 s; the calm sample does not last CalmPeriod, no raise.
		if want := "9.1s kill batch-3\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("a hold between the thresholds does not restart it", func(t *testing.T) {
		ins := atFloor(60, nil)
		ins[40].Containers[0].RunqP99 = 700 * time.Microsecond
		got := kinds(loop(newInterference(t, cfg), ins))
		if want := "5s kill batch-3\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("protected services and guaranteed work are never victims", func(t *testing.T) {
		ins := atFloor(200, func(in *qos.Input) {
			in.Containers = in.Containers[:2] // web-1 and sshd only
		})
		if got := loop(newInterference(t, cfg), ins); len(got) != 0 {
			t.Errorf("corrections without any revocable container: %v", got)
		}
	})
}

func TestInterferenceVictimChoice(t *testing.T) {
	cfg := qos.DefaultConfig()
	tests := []struct {
		name string
		edit func(in *qos.Input)
		want string
	}{
		{
			name: "no attribution: newest first",
			want: "batch-3",
		},
		{
			name: "who-delayed-whom picks the worst culprit, whatever its age",
			edit: func(in *qos.Input) {
				in.Containers[0].DelayedBy = map[string]time.Duration{"batch-1": 80 * ms, "batch-2": 20 * ms}
			},
			want: "batch-1",
		},
		{
			name: "delays to several guaranteed containers add up",
			edit: func(in *qos.Input) {
				in.Containers[0].DelayedBy = map[string]time.Duration{"batch-1": 50 * ms, "batch-2": 40 * ms}
				in.Containers[1].DelayedBy = map[string]time.Duration{"batch-2": 20 * ms}
			},
			want: "batch-2",
		},
		{
			name: "equal attribution: newest first",
			edit: func(in *qos.Input) {
				in.Containers[0].DelayedBy = map[string]time.Duration{"batch-1": 50 * ms, "batch-2": 50 * ms}
			},
			want: "batch-2",
		},
		{
			name: "same start time and attribution: lowest id, never random",
			edit: func(in *qos.Input) {
				for i := range in.Containers {
					in.Containers[i].StartedAt = t0
				}
			},
			want: "batch-1",
		},
		{
			name: "without who-delayed-whom, threshold events name the culprit",
			edit: func(in *qos.Input) {
				in.Events = []qos.Event{{Time: in.Now, Container: "web-1", Culprit: "batch-1", Latency: 3 * ms}}
			},
			want: "batch-1",
		},
		{
			name: "revocable work delaying another revocable container does not count",
			edit: func(in *qos.Input) {
				in.Containers[3].DelayedBy = map[string]time.Duration{"batch-1": time.Second}
			},
			want: "batch-3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := loop(newInterference(t, cfg), atFloor(51, tt.edit))
			if len(got) != 1 || got[0].c.Kind != qos.Kill {
				t.Fatalf("got %v, want one kill", got)
			}
			if got[0].c.ContainerID != tt.want {
				t.Errorf("victim %s, want %s (reason %q)", got[0].c.ContainerID, tt.want, got[0].c.Reason)
			}
		})
	}
}

func TestInterferenceSignals(t *testing.T) {
	cfg := qos.DefaultConfig()
	calmP99 := 200 * time.Microsecond
	burst := func(now time.Time, n int, victim string) []qos.Event {
		var evs []qos.Event
		for i := range n {
			evs = append(evs, qos.Event{Time: now.Add(-time.Duration(n-i) * ms), Container: victim, Culprit: "batch-2", Latency: 2 * ms})
		}
		return evs
	}
	tests := []struct {
		name       string
		edit       func(in *qos.Input)
		wantReason string // "" = no correction
		wantSignal time.Time
	}{
		{
			name:       "run-queue p99",
			edit:       func(in *qos.Input) { in.Containers[0].RunqP99 = 4200 * time.Microsecond },
			wantReason: "web-1 run-queue p99 4.2 ms > 1 ms",
			wantSignal: at(0),
		},
		{
			name: "sample time is the signal time",
			edit: func(in *qos.Input) {
				in.Containers[0].RunqP99 = 2 * ms
				in.Containers[0].SampledAt = at(-40 * ms)
			},
			wantReason: "web-1 run-queue p99 2 ms > 1 ms",
			wantSignal: at(-40 * ms),
		},
		{
			name:       "protected service",
			edit:       func(in *qos.Input) { in.Containers[1].RunqP99 = 1500 * time.Microsecond },
			wantReason: "sshd run-queue p99 1.5 ms > 1 ms",
			wantSignal: at(0),
		},
		{
			name:       "cpu pressure",
			edit:       func(in *qos.Input) { in.Containers[0].CPUPressureSome10 = 31.5 },
			wantReason: "web-1 cpu pressure some avg10 31.5% > 25%",
			wantSignal: at(0),
		},
		{
			name:       "a burst of threshold events, before any percentile shows it",
			edit:       func(in *qos.Input) { in.Events = burst(in.Now, 5, "web-1") },
			wantReason: "web-1: 5 wakeups waited over 1 ms within 250 ms (worst 2 ms behind batch-2)",
			wantSignal: at(-5 * ms),
		},
		{
			name: "fewer events than EventCount",
			edit: func(in *qos.Input) { in.Events = burst(in.Now, 4, "web-1") },
		},
		{
			name: "events from containers the agent does not list",
			edit: func(in *qos.Input) { in.Events = burst(in.Now, 10, "kworker") },
		},
		{
			name: "events from revocable victims",
			edit: func(in *qos.Input) { in.Events = burst(in.Now, 10, "batch-1") },
		},
		{
			name: "revocable containers' own latency",
			edit: func(in *qos.Input) { in.Containers[2].RunqP99 = 50 * ms },
		},
		{
			name: "guaranteed work interfered but no revocable work to throttle",
			edit: func(in *qos.Input) {
				in.Containers = in.Containers[:2]
				in.Containers[0].RunqP99 = 5 * ms
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := scene(0, calmP99, 0)
			tt.edit(&in)
			got := newInterference(t, cfg).Evaluate(in)
			if tt.wantReason == "" {
				if len(got) != 0 {
					t.Fatalf("got %v, want nothing", got)
				}
				return
			}
			if len(got) != 1 || got[0].Kind != qos.Throttle || got[0].ContainerID != "" || got[0].Controller != "interference" {
				t.Fatalf("got %v, want one throttle of the subtree by interference", got)
			}
			if got[0].Reason != tt.wantReason || !got[0].Signal.Equal(tt.wantSignal) {
				t.Errorf("reason %q at %v, want %q at %v", got[0].Reason, got[0].Signal.Sub(t0), tt.wantReason, tt.wantSignal.Sub(t0))
			}
		})
	}
}

func TestInterferenceStaleSamplesDoNotDecreaseTwice(t *testing.T) {
	c := newInterference(t, qos.DefaultConfig())
	in := scene(0, 4*ms, 0)
	if got := c.Evaluate(in); len(got) != 1 {
		t.Fatalf("got %v, want a throttle", got)
	}
	// 600 ms later, the same (old) sample again: no new evidence.
	stale := scene(600*ms, 4*ms, 1.5)
	stale.Containers[0].SampledAt = at(0)
	if got := c.Evaluate(stale); len(got) != 0 {
		t.Errorf("decrease on a sample taken before the last change: %v", got)
	}
	fresh := scene(700*ms, 4*ms, 1.5)
	if got := c.Evaluate(fresh); len(got) != 1 || got[0].CPULimit != 0.75 {
		t.Errorf("fresh sample: got %v, want a throttle to 0.75", got)
	}
}

func TestInterferenceFailedProbeIsUndone(t *testing.T) {
	// Calm at 2 cores long enough to raise to 2.4, then a violation right
	// after the raise: back to 2, not halved to 1.2, and 2.4 is not tried
	// again for ProbeBackoff.
	cfg := qos.DefaultConfig()
	ins := series(0, 400, 2, func(i int) time.Duration {
		if i == 31 { // 3.1 s, just after the raise at 3 s
			return 2 * ms
		}
		return 200 * time.Microsecond
	})
	got := kinds(loop(newInterference(t, cfg), ins))
	want := "3s unthrottle 2.4\n3.1s throttle 2\n" + // the probe and its undoing
		"33.1s unthrottle 2.4\n34.1s unthrottle 2.8\n35.1s unthrottle none\n" // after the 30 s backoff
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// With eBPF attribution, a guaranteed container that suffers from itself
// (no delay by revocable containers) triggers no throttle; the same signal
// with revocable delay does.
func TestInterferenceNeedsAttribution(t *testing.T) {
	cfg := qos.DefaultConfig()
	now := time.Unix(1000, 0)
	input := func(delayed map[string]time.Duration) qos.Input {
		return qos.Input{Now: now, Node: qos.Node{CPUs: 2}, Containers: []qos.Container{
			{ID: "web", CPUAllocated: 2, CPU: 1.9, RunqP99: 5 * time.Millisecond, DelayedBy: delayed, SampledAt: now},
			{ID: "hog", Revocable: true, CPUAllocated: 0.5, CPU: 0.5, StartedAt: now.Add(-time.Minute), SampledAt: now},
		}}
	}
	c := qos.NewInterference(cfg.Interference, cfg.KillRetry)
	if got := c.Evaluate(input(map[string]time.Duration{})); len(got) != 0 {
		t.Fatalf("self-inflicted latency: corrections %v, want none", got)
	}
	got := c.Evaluate(input(map[string]time.Duration{"hog": 3 * time.Millisecond}))
	if len(got) != 1 || got[0].Kind != qos.Throttle {
		t.Fatalf("latency caused by the hog: corrections %v, want one throttle", got)
	}
	// Without attribution data (no eBPF) the signal alone counts.
	c = qos.NewInterference(cfg.Interference, cfg.KillRetry)
	if got := c.Evaluate(input(nil)); len(got) != 1 || got[0].Kind != qos.Throttle {
		t.Fatalf("no attribution data: corrections %v, want one throttle", got)
	}
}

// TestInterferenceNeedsAShare: with the container's total run-queue wait
// known, revocable work must have caused MinAttributedShare of it; a few
// milliseconds of preemption latency among a server's own waiting do not
// make the server's latency best-effort work's doing. Threshold events
// count only when revocable work held the CPU for that share of the wait.
func TestInterferenceNeedsAShare(t *testing.T) {
	cfg := qos.DefaultConfig()
	now := time.Unix(1000, 0)
	input := func(delayed, wait time.Duration, events ...qos.Event) qos.Input {
		return qos.Input{Now: now, Node: qos.Node{CPUs: 2}, Events: events, Containers: []qos.Container{
			{ID: "web", CPUAllocated: 2, CPU: 0.5, RunqP99: 5 * time.Millisecond, SampledAt: now,
				DelayedBy: map[string]time.Duration{"hog": delayed}, RunqWait: wait},
			{ID: "hog", Revocable: true, CPUAllocated: 1, CPU: 1, StartedAt: now.Add(-time.Minute), SampledAt: now},
		}}
	}
	tests := []struct {
		name string
		in   qos.Input
		want int // throttles
	}{
		{"3 ms of 100 ms of waiting: not the hog's doing", input(3*ms, 100*ms), 0},
		{"3 ms of 6 ms: the hog's doing", input(3*ms, 6*ms), 1},
		{"total wait unknown: the absolute threshold alone", input(3*ms, 0), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := qos.NewInterference(cfg.Interference, cfg.KillRetry).Evaluate(tt.in)
			if len(got) != tt.want {
				t.Errorf("corrections %v, want %d throttle(s)", got, tt.want)
			}
		})
	}
	t.Run("events whose wait the hog held for a small part do not count", func(t *testing.T) {
		var events []qos.Event
		for i := range 10 {
			events = append(events, qos.Event{Time: now.Add(-time.Duration(i) * ms), Container: "web", Culprit: "hog",
				Latency: 4 * ms, Delayed: 100 * time.Microsecond})
		}
		in := input(0, 100*ms, events...)
		in.Containers[0].RunqP99 = 200 * time.Microsecond
		if got := qos.NewInterference(cfg.Interference, cfg.KillRetry).Evaluate(in); len(got) != 0 {
			t.Errorf("corrections %v, want none", got)
		}
		for i := range events {
			events[i].Delayed = 3 * ms
		}
		in = input(0, 100*ms, events...)
		in.Containers[0].RunqP99 = 200 * time.Microsecond
		if got := qos.NewInterference(cfg.Interference, cfg.KillRetry).Evaluate(in); len(got) != 1 {
			t.Errorf("corrections %v, want a throttle", got)
		}
	})
}
