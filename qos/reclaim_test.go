package qos_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/qos"
)

const gib = 1 << 30

// reclaimScene: a 16 GiB node (pressure below max(512 MiB, 10%) = 1638 MiB
// of MemAvailable, critical below 819 MiB, calm above 1638 + 327 MiB) with
// memory.high and a freezer, web-1 (guaranteed), db (a protected service)
// and three revocable containers holding 5 GiB together.
func reclaimScene() qos.Input {
	return qos.Input{
		Node: qos.Node{CPUs: 8, MemTotal: 16 * gib, MemAvailable: 4 * gib, MemoryHigh: true, Freeze: true},
		Containers: []qos.Container{
			{ID: "web-1", TaskID: "web-1-task", MemBytes: 6 * gib, StartedAt: at(-time.Hour)},
			{ID: "protected:db", Protected: true, Revocable: true, MemBytes: gib, StartedAt: at(-time.Minute / 2)},
			{ID: "batch-1", TaskID: "batch-1-task", Revocable: true, MemBytes: 1 * gib, StartedAt: at(-3 * time.Minute)},
			{ID: "batch-2", TaskID: "batch-2-task", Revocable: true, MemBytes: 3 * gib, StartedAt: at(-2 * time.Minute)},
			{ID: "batch-3", TaskID: "batch-3-task", Revocable: true, MemBytes: 1 * gib, StartedAt: at(-1 * time.Minute)},
		},
	}
}

// reclaimStep is one evaluation of a reclaim transcript: at offset, with the
// scene edited, the corrections wanted (kind, target, memory.high, words
// of the reason), formatted by show.
type reclaimStep struct {
	offset time.Duration
	edit   func(in *qos.Input)
	want   []string
}

// show formats a correction for a transcript: "reclaim 4608 MiB (words)".
func show(c qos.Correction) string {
	var b strings.Builder
	b.WriteString(c.Kind.String())
	if c.ContainerID != "" {
		b.WriteString(" " + c.ContainerID)
	}
	if c.Kind == qos.Reclaim || c.Kind == qos.Release {
		fmt.Fprintf(&b, " %d MiB", c.MemoryHigh>>20)
	}
	return b.String()
}

// runTranscript evaluates a fresh reclaim controller (through NewSet, as
// the agent does) over the steps. The scene carries the applied state
// (memory.high, frozen) from one step to the next, as the agent's
// cgroups would, and kills remove the container at the next step.
func runTranscript(t *testing.T, cfg qos.Config, steps []reclaimStep, reasons map[int]string) {
	t.Helper()
	c, err := qos.NewSet([]string{"reclaim"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := reclaimScene()
	for i, s := range steps {
		in.Now = at(s.offset)
		if s.edit != nil {
			s.edit(&in)
		}
		got := c.Evaluate(in)
		var shown []string
		for _, corr := range got {
			shown = append(shown, show(corr))
			if corr.Controller != "reclaim" {
				t.Errorf("step %d: controller %q", i, corr.Controller)
			}
			switch corr.Kind {
			case qos.Reclaim, qos.Release:
				in.RevocableMemoryHigh = corr.MemoryHigh
			case qos.Freeze:
				in.RevocableFrozen = true
			case qos.Thaw:
				in.RevocableFrozen = false
			case qos.Kill:
				for j := range in.Containers {
					if in.Containers[j].ID == corr.ContainerID && (!in.Containers[j].Revocable || in.Containers[j].Protected) {
						t.Fatalf("step %d: killed %s, which is not revocable work", i, corr.ContainerID)
					}
				}
			}
			if want, ok := reasons[i]; ok && !strings.Contains(corr.Reason, want) {
				t.Errorf("step %d (%s): reason %q does not say %q", i, s.offset, corr.Reason, want)
			}
		}
		if strings.Join(shown, "; ") != strings.Join(s.want, "; ") {
			t.Errorf("step %d (%s): got [%s], want [%s]", i, s.offset, strings.Join(shown, "; "), strings.Join(s.want, "; "))
		}
	}
}

func short(in *qos.Input)  { in.Node.MemAvailable = gib }
func plenty(in *qos.Input) { in.Node.MemAvailable = 4 * gib }
func drop(id string) func(in *qos.Input) {
	return func(in *qos.Input) {
		for i := range in.Containers {
			if in.Containers[i].ID == id {
				in.Containers = append(in.Containers[:i], in.Containers[i+1:]...)
				return
			}
		}
	}
}

// TestReclaimEpisode: reclaim, then freeze, then kill the newest, then thaw
// and release step by step once calm.
func TestReclaimEpisode(t *testing.T) {
	t.Parallel()
	s := time.Second
	runTranscript(t, qos.DefaultConfig(), []reclaimStep{
		{offset: 0, want: nil}, // 0: calm, nothing applied
		{offset: s, edit: short, want: []string{"reclaim 4608 MiB"}}, // 1: 5 GiB - 10%
		{offset: s + s/2, want: nil},                                 // 2: within StepInterval
		{offset: 2 * s, want: []string{"reclaim 4096 MiB"}},
		{offset: 3 * s, want: []string{"reclaim 3584 MiB"}},
		{offset: 11 * s, want: []string{"freeze"}}, // 5: FreezeAfter past the first step
		{offset: 13 * s, want: nil},                // 6: frozen, KillAfter not yet
		{offset: 16 * s, want: []string{"kill batch-3"}},
		{offset: 17 * s, edit: drop("batch-3"), want: nil},                                         // 8: cooldown
		{offset: 26 * s, want: []string{"kill batch-2"}},                                           // 9: cooldown over, the next newest
		{offset: 27 * s, edit: func(in *qos.Input) { drop("batch-2")(in); plenty(in) }, want: nil}, // 10: calm begins
		{offset: 36 * s, want: nil},
		{offset: 37 * s, want: []string{"thaw"}}, // 12: calm for CalmPeriod
		{offset: 37*s + s/2, want: nil},
		{offset: 38 * s, want: []string{"release 3942 MiB"}}, // 14: 3584 + max(32 MiB, 10% of 3584 MiB)
		{offset: 39 * s, want: []string{"release 4336 MiB"}},
		// 16: batch-1 (1 GiB) + 4 GiB available: a limit above 5 GiB no longer binds.
		{offset: 40 * s, want: []string{"release 4770 MiB"}},
		{offset: 41 * s, want: []string{"release 0 MiB"}},
		{offset: 42 * s, want: nil},
	}, map[int]string{
		1:  "node MemAvailable 1024 MiB < 1638 MiB; revocable work holds 5120 MiB",
		5:  "for 10s",
		7:  "batch-3 is the newest revocable container (1024 MiB)",
		9:  "batch-2 is the newest revocable container",
		12: "calm for 10s",
	})
}

// TestReclaimShortcuts: what skips steps, and what never happens.
func TestReclaimShortcuts(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name    string
		cfg     func(*qos.Config)
		steps   []reclaimStep
		reasons map[int]string
	}{{
		name: "critical MemAvailable freezes at once",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.Node.MemAvailable = 500 << 20 }, want: []string{"freeze"}},
			{offset: 4 * s, want: nil},
			{offset: 5 * s, want: []string{"kill batch-3"}},
		},
		reasons: map[int]string{0: "node MemAvailable 500 MiB < 819 MiB (critical)"},
	}, {
		name: "cgroup v1 (no memory.high): freeze at once, kill after KillAfter",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { short(in); in.Node.MemoryHigh = false }, want: []string{"freeze"}},
			{offset: 5 * s, want: []string{"kill batch-3"}},
		},
		reasons: map[int]string{0: "no memory.high: cgroup v1"},
	}, {
		name: "no memory.high and no freezer: kill after KillAfter",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { short(in); in.Node.MemoryHigh, in.Node.Freeze = false, false }, want: nil},
			{offset: 4 * s, want: nil},
			{offset: 5 * s, want: []string{"kill batch-3"}},
		},
		reasons: map[int]string{2: "reclaimed (no freezer)"},
	}, {
		name: "memory.high at the floor freezes",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { short(in); in.RevocableMemoryHigh = 64 << 20 }, want: []string{"freeze"}},
		},
		reasons: map[int]string{0: "memory.high at its floor 64 MiB"},
	}, {
		name: "the floor bounds the steps",

		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) {
				short(in)
				in.Containers = append(in.Containers[:2], qos.Container{ID: "tiny", Revocable: true, MemBytes: 80 << 20})
			}, want: []string{"reclaim 64 MiB"}},
			{offset: s, want: []string{"freeze"}},
		},
	}, {
		name: "guaranteed memory pressure reclaims; guaranteed work is never killed",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.Containers[0].MemPressureFull10 = 5 }, want: []string{"reclaim 4608 MiB"}},
		},
		reasons: map[int]string{0: "web-1 memory pressure full avg10 5.0% > 2%"},
	}, {
		name: "a protected service's pressure counts too",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.Containers[1].MemPressureSome10 = 30 }, want: []string{"reclaim 4608 MiB"}},
		},
		reasons: map[int]string{0: "protected:db memory pressure some avg10 30.0% > 10%"},
	}, {
		name: "revocable work's own pressure is not a signal",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.Containers[3].MemPressureFull10 = 90 }, want: nil},
		},
	}, {
		name: "node PSI above its own threshold",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.Node.MemPressureSome10 = 30 }, want: nil},
			{offset: s, edit: func(in *qos.Input) { in.Node.MemPressureSome10 = 45 }, want: []string{"reclaim 4608 MiB"}},
		},
		reasons: map[int]string{1: "node memory pressure some avg10 45.0% > 40%"},
	}, {
		name: "a freeze by someone else is not thawed",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.RevocableFrozen = true }, want: nil},
			{offset: time.Minute, want: nil},
		},
	}, {
		name: "under pressure with the subtree frozen by someone else: freeze it as its own, then kill",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.RevocableFrozen = true; in.Node.MemAvailable = 500 << 20 }, want: []string{"freeze"}},
			{offset: 5 * s, want: []string{"kill batch-3"}},
			{offset: 6 * s, edit: plenty, want: nil},
			{offset: 16 * s, want: []string{"thaw"}},
		},
	}, {
		// Freezing frees nothing: a thaw by someone else every 2 s (a
		// benchmark's slices) must not keep the kill from ever coming.
		name: "thawed by someone else under pressure: frozen again, the kill clock kept",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.Node.MemAvailable = 500 << 20 }, want: []string{"freeze"}},
			{offset: 2 * s, edit: func(in *qos.Input) { in.RevocableFrozen = false }, want: []string{"freeze"}},
			{offset: 4 * s, edit: func(in *qos.Input) { in.RevocableFrozen = false }, want: []string{"freeze"}},
			{offset: 5 * s, want: []string{"kill batch-3"}},
			{offset: 6 * s, edit: func(in *qos.Input) { drop("batch-3")(in); in.RevocableFrozen = false }, want: []string{"freeze"}},
			{offset: 15 * s, want: []string{"kill batch-2"}}, // KillCooldown after the first kill
			{offset: 16 * s, edit: func(in *qos.Input) { drop("batch-2")(in); plenty(in) }, want: nil},
			{offset: 26 * s, want: []string{"thaw"}},
		},
		reasons: map[int]string{1: "again (thawed by someone else; frozen first 2s ago)", 3: "batch-3 is the newest"},
	}, {
		name: "no revocable work: nothing, even critical",
		steps: []reclaimStep{
			{offset: 0, edit: func(in *qos.Input) { in.Node.MemAvailable = 100 << 20; in.Containers = in.Containers[:2] }, want: nil},
			{offset: time.Minute, want: nil},
		},
	}, {
		name: "between the thresholds nothing is undone",
		steps: []reclaimStep{
			{offset: 0, edit: short, want: []string{"reclaim 4608 MiB"}},
			// 1843 MiB: above the 1638 MiB line, below the 1965 MiB calm line.
			{offset: s, edit: func(in *qos.Input) { in.Node.MemAvailable = 1843 << 20 }, want: nil},
			{offset: time.Minute, want: nil},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := qos.DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			runTranscript(t, cfg, tt.steps, tt.reasons)
		})
	}
}

func TestReclaimConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	cfg := qos.DefaultConfig()
	cfg.Reclaim.FreezeAfter = 0
	cfg.Reclaim.SomeEnter = 120
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "reclaim freeze after") || !strings.Contains(err.Error(), "reclaim some enter") {
		t.Fatalf("Validate() = %v, want errors naming reclaim freeze after and reclaim some enter", err)
	}
}

// TestReclaimLinesScaleWithTheNode: the MemAvailable lines where reclaim
// starts (Reclaim) and where it freezes at once (Freeze) are today's
// max(512 MiB, 10%) and max(256 MiB, 5%) on nodes of 3.4 GiB and more, and
// on a smaller (bounded) node at most 1.5 times their fraction: on a
// 1.5 GiB node 230 and 115 MiB, not a third and a sixth of it. A line an
// operator sets in bytes (fraction 0) is kept as set.
func TestReclaimLinesScaleWithTheNode(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	operator := qos.DefaultConfig()
	operator.Reclaim.LowAvailableBytes, operator.Reclaim.LowAvailableFraction = 600*mib, 0
	for _, tc := range []struct {
		name       string
		cfg        qos.Config
		total      uint64
		avail      uint64
		want       string // "" (nothing), "reclaim" or "freeze"
		wantReason string
	}{
		{"16 GiB: 10% line, just below", qos.DefaultConfig(), 16 * gib, 1638*mib - mib, "reclaim", "< 1638 MiB"},
		{"16 GiB: 10% line, above", qos.DefaultConfig(), 16 * gib, 1640 * mib, "", ""},
		{"16 GiB: 5% critical", qos.DefaultConfig(), 16 * gib, 800 * mib, "freeze", ""},
		{"4 GiB keeps 512 MiB", qos.DefaultConfig(), 4 * gib, 500 * mib, "reclaim", "< 512 MiB"},
		{"4 GiB keeps 256 MiB critical", qos.DefaultConfig(), 4 * gib, 250 * mib, "freeze", "< 256 MiB"},
		{"3.5 GiB keeps 512 MiB", qos.DefaultConfig(), 3584 * mib, 500 * mib, "reclaim", "< 512 MiB"},
		{"2.5 GiB: 384 MiB", qos.DefaultConfig(), 2560 * mib, 383 * mib, "reclaim", "< 384 MiB"},
		{"2.5 GiB: 400 MiB is no pressure", qos.DefaultConfig(), 2560 * mib, 400 * mib, "", ""},
		{"1.5 GiB: 400 MiB is no pressure", qos.DefaultConfig(), 1536 * mib, 400 * mib, "", ""},
		{"1.5 GiB: below 230 MiB", qos.DefaultConfig(), 1536 * mib, 229 * mib, "reclaim", "< 230 MiB"},
		{"1.5 GiB: 200 MiB is not critical", qos.DefaultConfig(), 1536 * mib, 200 * mib, "reclaim", ""},
		{"1.5 GiB: critical below 115 MiB", qos.DefaultConfig(), 1536 * mib, 114 * mib, "freeze", "< 115 MiB"},
		{"operator's 600 MiB on 1.5 GiB", operator, 1536 * mib, 590 * mib, "reclaim", "< 600 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := qos.NewSet([]string{"reclaim"}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := reclaimScene()
			in.Node.MemTotal, in.Node.MemAvailable = tc.total, tc.avail
			in.Now = at(0)
			got := c.Evaluate(in)
			kind, reason := "", ""
			if len(got) > 0 {
				kind, reason = strings.ToLower(got[0].Kind.String()), got[0].Reason
			}
			if kind != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Fatalf("MemAvailable %d MiB of %d MiB: corrections %v, want %q naming %q", tc.avail/mib, tc.total/mib, got, tc.want, tc.wantReason)
			}
		})
	}
}

// TestKeepFree: what a set of controllers needs kept available is the
// largest of its members' needs: the reclaim controller's low line plus
// its calm margin (on 16 GiB 1638 + 327 MiB; on 1.5 GiB the scaled 230 +
// 46 MiB), the memory controller's kill line; 0 for a set that does not
// act on MemAvailable (#28).
func TestKeepFree(t *testing.T) {
	t.Parallel()
	part := func(f float64, total uint64) uint64 { return uint64(f * float64(total)) }
	operator := qos.DefaultConfig()
	operator.Reclaim.LowAvailableBytes, operator.Reclaim.LowAvailableFraction = 600<<20, 0
	operator.Memory.MinAvailableBytes, operator.Memory.MinAvailableFraction = 700<<20, 0
	for _, tc := range []struct {
		name  string
		names []string
		cfg   qos.Config
		total uint64
		want  uint64
	}{
		{"reclaim, 16 GiB", []string{"reclaim"}, qos.DefaultConfig(), 16 * gib, part(0.10, 16*gib) + part(0.02, 16*gib)},
		{"reclaim, 4 GiB: 512 MiB + the scaled margin", []string{"reclaim"}, qos.DefaultConfig(), 4 * gib, 512<<20 + part(1.5*0.02, 4*gib)},
		{"reclaim, 1.5 GiB: 230 + 46 MiB", []string{"reclaim"}, qos.DefaultConfig(), 1536 << 20, part(1.5*0.10, 1536<<20) + part(1.5*0.02, 1536<<20)},
		{"memory, 1.5 GiB: 115 MiB", []string{"memory"}, qos.DefaultConfig(), 1536 << 20, part(1.5*0.05, 1536<<20)},
		{"default set, 1.5 GiB", strings.Split(qos.DefaultControllers, ","), qos.DefaultConfig(), 1536 << 20, part(1.5*0.10, 1536<<20) + part(1.5*0.02, 1536<<20)},
		{"no memory controller", []string{"cpuset", "interference"}, qos.DefaultConfig(), 16 * gib, 0},
		{"noop", []string{"noop"}, qos.DefaultConfig(), 16 * gib, 0},
		{"operator's lines: the memory line is higher", []string{"reclaim", "memory"}, operator, 1536 << 20, 700 << 20},
		{"operator's reclaim line plus the scaled margin", []string{"reclaim"}, operator, 1536 << 20, 600<<20 + part(1.5*0.02, 1536<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := qos.NewSet(tc.names, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			k, ok := c.(qos.MemoryKeeper)
			if !ok {
				t.Fatalf("the set %v is no MemoryKeeper", tc.names)
			}
			if got := k.KeepFree(tc.total); got != tc.want {
				t.Fatalf("KeepFree(%d MiB) = %d bytes (%d MiB), want %d (%d MiB)", tc.total>>20, got, got>>20, tc.want, tc.want>>20)
			}
		})
	}
}

// TestKeepFreeIsTheCalmLine: with MemAvailable at KeepFree the reclaim
// controller is calm (it releases memory.high after CalmPeriod) and a MiB
// below it is not: KeepFree is the controller's own line, not a second
// figure that could drift from it.
func TestKeepFreeIsTheCalmLine(t *testing.T) {
	t.Parallel()
	cfg := qos.DefaultConfig()
	for _, total := range []uint64{1536 << 20, 3 * gib, 4 * gib, 16 * gib, 256 * gib} {
		for _, below := range []uint64{0, 1 << 20} {
			c := qos.NewMemoryReclaim(cfg.Reclaim, cfg.KillRetry)
			in := reclaimScene()
			in.Node.MemTotal = total
			in.Node.MemAvailable = c.KeepFree(total) - below
			in.RevocableMemoryHigh = 1 * gib
			var got []qos.Correction
			for _, offset := range []time.Duration{0, cfg.Reclaim.CalmPeriod} {
				in.Now = at(offset)
				got = c.Evaluate(in)
			}
			released := len(got) == 1 && got[0].Kind == qos.Release
			if released != (below == 0) {
				t.Errorf("%d MiB node, MemAvailable %d MiB (KeepFree less %d MiB): corrections %v; want a release only at KeepFree",
					total>>20, in.Node.MemAvailable>>20, below>>20, got)
			}
		}
	}
}
