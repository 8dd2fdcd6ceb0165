package qos_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slackline/slackline/qos"
)

var update = flag.Bool("update", false, "regenerate testdata traces and golden files from the model plant")

// The trace format: JSON Lines, one sample per line, in the units a person
// reads (ms, µs, MiB, percent). It is what the agent's monitor would record.
type traceSample struct {
	TMs        float64          `json:"t_ms"`
	Node       traceNode        `json:"node"`
	Limit      float64          `json:"revocable_limit"`
	Containers []traceContainer `json:"containers"`
	Events     []traceEvent     `json:"events,omitempty"`
}

type traceNode struct {
	CPUs        float64 `json:"cpus"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemAvailMiB uint64  `json:"mem_available_mib"`
	Load5       float64 `json:"load5,omitempty"`
	Load15      float64 `json:"load15,omitempty"`
}

type traceContainer struct {
	ID          string           `json:"id"`
	Revocable   bool             `json:"revocable,omitempty"`
	Protected   bool             `json:"protected,omitempty"`
	Alloc       float64          `json:"cpu_allocated"`
	CPU         float64          `json:"cpu"`
	MemMiB      uint64           `json:"mem_mib"`
	StartedMs   float64          `json:"started_ms"`
	RunqP99Us   int64            `json:"runq_p99_us,omitempty"`
	RunqP50Us   int64            `json:"runq_p50_us,omitempty"`
	CPUPSI      float64          `json:"cpu_psi_some10,omitempty"`
	MemPSIFull  float64          `json:"mem_psi_full10,omitempty"`
	DelayedByUs map[string]int64 `json:"delayed_by_us,omitempty"`
}

type traceEvent struct {
	TMs       float64 `json:"t_ms"`
	Victim    string  `json:"victim"`
	Culprit   string  `json:"culprit,omitempty"`
	LatencyUs int64   `json:"latency_us"`
}

func msSince(t time.Time) float64 { return float64(t.Sub(t0)) / float64(time.Millisecond) }
func fromMs(v float64) time.Time  { return t0.Add(time.Duration(v * float64(time.Millisecond))) }

func toTrace(in qos.Input) traceSample {
	s := traceSample{
		TMs: msSince(in.Now), Limit: in.RevocableLimit,
		Node: traceNode{CPUs: in.Node.CPUs, MemTotalMiB: in.Node.MemTotal >> 20, MemAvailMiB: in.Node.MemAvailable >> 20, Load5: in.Node.Load5, Load15: in.Node.Load15},
	}
	for _, c := range in.Containers {
		tc := traceContainer{
			ID: c.ID, Revocable: c.Revocable, Protected: c.Protected, Alloc: c.CPUAllocated, CPU: round3(c.CPU),
			MemMiB: c.MemBytes >> 20, StartedMs: msSince(c.StartedAt), RunqP99Us: c.RunqP99.Microseconds(),
			RunqP50Us: c.RunqP50.Microseconds(), CPUPSI: c.CPUPressureSome10, MemPSIFull: round3(c.MemPressureFull10),
		}
		for culprit, d := range c.DelayedBy {
			if tc.DelayedByUs == nil {
				tc.DelayedByUs = make(map[string]int64)
			}
			tc.DelayedByUs[culprit] = d.Microseconds()
		}
		s.Containers = append(s.Containers, tc)
	}
	for _, e := range in.Events {
		s.Events = append(s.Events, traceEvent{TMs: msSince(e.Time), Victim: e.Container, Culprit: e.Culprit, LatencyUs: e.Latency.Microseconds()})
	}
	return s
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func fromTrace(s traceSample) qos.Input {
	in := qos.Input{
		Now: fromMs(s.TMs), RevocableLimit: s.Limit,
		Node: qos.Node{CPUs: s.Node.CPUs, MemTotal: s.Node.MemTotalMiB << 20, MemAvailable: s.Node.MemAvailMiB << 20, Load5: s.Node.Load5, Load15: s.Node.Load15},
	}
	for _, tc := range s.Containers {
		c := qos.Container{
			ID: tc.ID, TaskID: tc.ID + "-task", Revocable: tc.Revocable, Protected: tc.Protected, CPUAllocated: tc.Alloc, CPU: tc.CPU,
			MemBytes: tc.MemMiB << 20, StartedAt: fromMs(tc.StartedMs), RunqP99: time.Duration(tc.RunqP99Us) * time.Microsecond,
			RunqP50: time.Duration(tc.RunqP50Us) * time.Microsecond, CPUPressureSome10: tc.CPUPSI, MemPressureFull10: tc.MemPSIFull,
		}
		for culprit, us := range tc.DelayedByUs {
			if c.DelayedBy == nil {
				c.DelayedBy = make(map[string]time.Duration)
			}
			c.DelayedBy[culprit] = time.Duration(us) * time.Microsecond
		}
		in.Containers = append(in.Containers, c)
	}
	for _, e := range s.Events {
		in.Events = append(in.Events, qos.Event{Time: fromMs(e.TMs), Container: e.Victim, Culprit: e.Culprit, Latency: time.Duration(e.LatencyUs) * time.Microsecond})
	}
	return in
}

// traceScenarios produce the traces from the model plant, closed around the
// default controllers (interference,memory) as they were when recorded.
var traceScenarios = map[string]func(p *plant, c qos.Controller) []step{
	// web-1 steps from 1 to 5 cores at 10 s and back to 1 at 40 s, beside
	// two 2-core hogs.
	"step": func(p *plant, c qos.Controller) []step {
		p.noise = 50 * time.Microsecond
		p.guaranteed = 1
		p.addHog("batch-1", 2, -10*time.Minute)
		p.addHog("batch-2", 2, -5*time.Minute)
		return p.run(c, 0, 50*time.Second, func(now time.Duration) {
			switch now {
			case 10 * time.Second:
				p.guaranteed = 5
			case 40 * time.Second:
				p.guaranteed = 1
			}
		})
	},
	// The subtree is limited to 3 cores and web-1's p99 is 300 µs ± 350 µs:
	// it crosses the 500 µs exit threshold about one sample in five and never
	// reaches the 1 ms enter threshold.
	"noise": func(p *plant, c qos.Controller) []step {
		p.noise = 350 * time.Microsecond
		p.baseP99 = 300 * time.Microsecond
		p.limit = 3 // left by an earlier episode
		p.guaranteed = 2
		p.addHog("batch-1", 2, -10*time.Minute)
		p.addHog("batch-2", 2, -5*time.Minute)
		return p.run(c, 0, 30*time.Second, nil)
	},
	// batch-2 starts thrashing web-1's caches at 5 s; throttling cannot
	// help.
	"thrasher": func(p *plant, c qos.Controller) []step {
		p.guaranteed = 1
		p.addHog("batch-1", 2, -10*time.Minute)
		thrasher := p.addHog("batch-2", 1, -20*time.Minute)
		p.addHog("batch-3", 2, -time.Minute)
		return p.run(c, 0, 30*time.Second, func(now time.Duration) {
			if now == 5*time.Second {
				thrasher.thrash = 2 * time.Millisecond
			}
		})
	},
	// batch-2 leaks 400 MiB/s from 5 s; batch-1 is steady at 6 GiB.
	"memleak": func(p *plant, c qos.Controller) []step {
		p.guaranteed = 1
		steady := p.addHog("batch-1", 1, -10*time.Minute)
		steady.mem = 6 << 30
		leaker := p.addHog("batch-2", 1, -5*time.Minute)
		return p.run(c, 0, 25*time.Second, func(now time.Duration) {
			if now == 5*time.Second {
				leaker.memRate = 400 << 20
			}
		})
	},
}

// traceControllers is the set the traces' plant answered when they were
// recorded (the default then): a trace is an input sequence shaped by
// those corrections, so it replays against them; the reclaim controller,
// which freezes before killing, has its own transcripts (reclaim_test.go).
const traceControllers = "cpuset,interference,memory"

func defaultSet(t *testing.T) qos.Controller {
	t.Helper()
	c, err := qos.NewSet(qos.ParseNames(traceControllers), qos.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeTrace(t *testing.T, path string, steps []step) {
	t.Helper()
	var b strings.Builder
	for _, s := range steps {
		line, err := json.Marshal(toTrace(s.in))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTrace(t *testing.T, path string) []qos.Input {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ins []qos.Input
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s traceSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("%s:%d: %v", path, len(ins)+1, err)
		}
		ins = append(ins, fromTrace(s))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ins
}

// replay feeds a recorded trace to the default controllers. It is open
// loop: the recorded signals do not respond to the replayed corrections;
// only the revocable limit is the replayed one (starting from the recorded
// one), and a container killed by
// the replay disappears from the following samples.
func replay(c qos.Controller, ins []qos.Input) []timed {
	var out []timed
	limit := ins[0].RevocableLimit
	killed := map[string]bool{}
	for _, in := range ins {
		in.RevocableLimit = limit
		var live []qos.Container
		for _, ct := range in.Containers {
			if !killed[ct.ID] {
				live = append(live, ct)
			}
		}
		in.Containers = live
		for _, corr := range c.Evaluate(in) {
			out = append(out, timed{in.Now.Sub(t0), corr})
			switch {
			case corr.Kind == qos.Kill:
				killed[corr.ContainerID] = true
			case corr.ContainerID == "":
				limit = corr.CPULimit
			}
		}
	}
	return out
}

func render(ts []timed) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "%v %v\n", t.at, t.c)
	}
	return b.String()
}

func TestTraces(t *testing.T) {
	checks := map[string]func(t *testing.T, got []timed){
		"step": func(t *testing.T, got []timed) {
			if len(got) == 0 || got[0].at != 10*time.Second || got[0].c.Kind != qos.Throttle {
				t.Errorf("first correction %v, want a throttle at 10 s", got)
			}
			last := got[len(got)-1]
			if last.c.Kind != qos.Unthrottle || last.c.CPULimit != 0 {
				t.Errorf("last correction %v, want the limit removed", last)
			}
			for _, g := range got {
				if g.c.Kind == qos.Kill {
					t.Errorf("kill in the step trace: %v", g)
				}
			}
		},
		"noise": func(t *testing.T, got []timed) {
			if len(got) != 0 {
				t.Errorf("noise below the enter threshold caused corrections:\n%s", render(got))
			}
		},
		"thrasher": func(t *testing.T, got []timed) {
			var kills []timed
			for _, g := range got {
				if g.c.Kind == qos.Kill {
					kills = append(kills, g)
				}
			}
			if len(kills) != 1 || kills[0].c.ContainerID != "batch-2" {
				t.Errorf("kills %v, want only batch-2", kills)
			}
		},
		"memleak": func(t *testing.T, got []timed) {
			if len(got) != 1 || got[0].c.Kind != qos.Kill || got[0].c.ContainerID != "batch-2" || got[0].c.Controller != "memory" {
				t.Errorf("got %v, want one kill of the leaking batch-2 by memory (batch-1 is larger when the leak starts)", got)
			}
		},
	}
	for name, scenario := range traceScenarios {
		t.Run(name, func(t *testing.T) {
			tracePath := filepath.Join("testdata", name+".jsonl")
			goldenPath := filepath.Join("testdata", name+".golden")
			if *update {
				writeTrace(t, tracePath, scenario(newPlant(), defaultSet(t)))
			}
			got := replay(defaultSet(t), readTrace(t, tracePath))
			if *update {
				if err := os.WriteFile(goldenPath, []byte(render(got)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), render(got)); diff != "" {
				t.Errorf("corrections differ from %s (-want +got); if intended, rerun with -update and review:\n%s", goldenPath, diff)
			}
			checks[name](t, got)
		})
	}
}
