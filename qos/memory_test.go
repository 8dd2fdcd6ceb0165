package qos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slackline/slackline/qos"
)

const mib = 1 << 20

// memScene: a 16 GiB node (threshold max(256 MiB, 5%) = 819 MiB) with web-1
// and three revocable containers of different sizes and ages.
func memScene(now time.Duration, available uint64) qos.Input {
	return qos.Input{
		Now:  at(now),
		Node: qos.Node{CPUs: 8, MemTotal: 16 << 30, MemAvailable: available},
		Containers: []qos.Container{
			{ID: "web-1", TaskID: "web-1-task", MemBytes: 4 << 30, StartedAt: at(-time.Hour)},
			{ID: "batch-1", TaskID: "batch-1-task", Revocable: true, MemBytes: 1 << 30, StartedAt: at(-3 * time.Minute)},
			{ID: "batch-2", TaskID: "batch-2-task", Revocable: true, MemBytes: 3 << 30, StartedAt: at(-2 * time.Minute)},
			{ID: "batch-3", TaskID: "batch-3-task", Revocable: true, MemBytes: 1 << 30, StartedAt: at(-1 * time.Minute)},
		},
	}
}

func newMemory(t *testing.T) qos.Controller {
	t.Helper()
	c, err := qos.NewSet([]string{"memory"}, qos.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMemoryTable(t *testing.T) {
	tests := []struct {
		name string
		edit func(in *qos.Input)
		want []qos.Correction
	}{
		{name: "enough memory", edit: func(in *qos.Input) {}},
		{name: "unknown MemTotal", edit: func(in *qos.Input) { in.Node = qos.Node{} }},
		{
			name: "short of memory: largest revocable container",
			edit: func(in *qos.Input) { in.Node.MemAvailable = 500 * mib },
			want: []qos.Correction{{Kind: qos.Kill, ContainerID: "batch-2", TaskID: "batch-2-task", Controller: "memory", Signal: at(0),
				Reason: "node MemAvailable 500 MiB < 819 MiB; batch-2 is the largest revocable container (3072 MiB)"}},
		},
		{
			name: "the 256 MiB minimum on a 4 GiB node",
			edit: func(in *qos.Input) { in.Node.MemTotal, in.Node.MemAvailable = 4<<30, 200*mib },
			want: []qos.Correction{{Kind: qos.Kill, ContainerID: "batch-2", TaskID: "batch-2-task", Controller: "memory", Signal: at(0),
				Reason: "node MemAvailable 200 MiB < 256 MiB; batch-2 is the largest revocable container (3072 MiB)"}},
		},
		{
			// 1.5 × 5% of 2 GiB: the line scales with a small node's
			// memory, as the reclaim controller's do.
			name: "a 2 GiB node: 200 MiB is above its 153 MiB line",
			edit: func(in *qos.Input) { in.Node.MemTotal, in.Node.MemAvailable = 2<<30, 200*mib },
		},
		{
			name: "a 2 GiB node: below its 153 MiB line",
			edit: func(in *qos.Input) { in.Node.MemTotal, in.Node.MemAvailable = 2<<30, 150*mib },
			want: []qos.Correction{{Kind: qos.Kill, ContainerID: "batch-2", TaskID: "batch-2-task", Controller: "memory", Signal: at(0),
				Reason: "node MemAvailable 150 MiB < 153 MiB; batch-2 is the largest revocable container (3072 MiB)"}},
		},
		{
			name: "equal sizes: newest first",
			edit: func(in *qos.Input) {
				in.Node.MemAvailable = 500 * mib
				in.Containers[2].MemBytes = 1 << 30
			},
			want: []qos.Correction{{Kind: qos.Kill, ContainerID: "batch-3", TaskID: "batch-3-task", Controller: "memory", Signal: at(0),
				Reason: "node MemAvailable 500 MiB < 819 MiB; batch-3 is the largest revocable container (1024 MiB)"}},
		},
		{
			name: "guaranteed memory pressure full",
			edit: func(in *qos.Input) {
				in.Containers[0].MemPressureFull10 = 23.5
				in.Containers[0].SampledAt = at(-20 * ms)
			},
			want: []qos.Correction{{Kind: qos.Kill, ContainerID: "batch-2", TaskID: "batch-2-task", Controller: "memory", Signal: at(-20 * ms),
				Reason: "web-1 memory pressure full avg10 23.5% > 10%; batch-2 is the largest revocable container (3072 MiB)"}},
		},
		{
			name: "revocable containers' own pressure is their business",
			edit: func(in *qos.Input) { in.Containers[1].MemPressureFull10 = 90 },
		},
		{
			name: "some pressure is ignored by default",
			edit: func(in *qos.Input) { in.Containers[0].MemPressureSome10 = 90 },
		},
		{
			name: "nothing revocable to kill",
			edit: func(in *qos.Input) {
				in.Node.MemAvailable = 100 * mib
				in.Containers = in.Containers[:1]
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := memScene(0, 8<<30)
			tt.edit(&in)
			if diff := cmp.Diff(tt.want, newMemory(t).Evaluate(in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestMemoryKillsOneAtATime: with memory short for a while, the controller
// kills largest first, one per KillCooldown, waiting while a victim that is
// still being killed would lift MemAvailable over the line; it asks again
// for a victim that has not gone after KillRetry.
func TestMemoryKillsOneAtATime(t *testing.T) {
	c := newMemory(t)
	var got []timed
	gone := map[string]bool{}
	for i := range 150 {
		now := time.Duration(i) * 100 * ms
		in := memScene(now, 500*mib)
		var live []qos.Container
		for _, ct := range in.Containers {
			if !gone[ct.ID] {
				live = append(live, ct)
			}
		}
		in.Containers = live
		for _, corr := range c.Evaluate(in) {
			got = append(got, timed{now, corr})
			// batch-2 dies at once; batch-3 hangs (D state) and never goes.
			if corr.ContainerID == "batch-2" {
				gone["batch-2"] = true
			}
		}
	}
	// batch-2 (3 GiB) first; after KillCooldown batch-3 (1 GiB like batch-1,
	// but newer). batch-3 then hangs: its 1 GiB would lift 500 MiB over
	// 819 MiB, so nothing else is killed until KillRetry (10 s) gives up on
	// it and asks again.
	want := "0s kill batch-2\n1s kill batch-3\n11s kill batch-3\n"
	if diff := cmp.Diff(want, kinds(got)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestMemoryPressureWaitsForAvg10(t *testing.T) {
	c := newMemory(t)
	var got []timed
	for i := range 250 {
		now := time.Duration(i) * 100 * ms
		in := memScene(now, 8<<30)
		in.Containers[0].MemPressureFull10 = 30 // avg10 decays slowly: still high
		var live []qos.Container
		for _, ct := range in.Containers {
			killed := false
			for _, g := range got {
				killed = killed || g.c.ContainerID == ct.ID
			}
			if !killed {
				live = append(live, ct)
			}
		}
		in.Containers = live
		for _, corr := range c.Evaluate(in) {
			got = append(got, timed{now, corr})
		}
	}
	want := "0s kill batch-2\n10s kill batch-3\n20s kill batch-1\n"
	if diff := cmp.Diff(want, kinds(got)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestMemoryLineScalesWithTheNode: the memory controller's kill line is
// max(256 MiB, 5%) on nodes of 3.4 GiB and more and at most 1.5 times its
// fraction below (115 MiB on a 1.5 GiB node: the reclaim controller's
// critical line there, not a sixth of the node), and a line set in bytes
// (fraction 0, --qos-memory-min-available) is kept as set (#28).
func TestMemoryLineScalesWithTheNode(t *testing.T) {
	t.Parallel()
	operator := qos.DefaultConfig()
	operator.Memory.MinAvailableBytes, operator.Memory.MinAvailableFraction = 300*mib, 0
	unbounded := qos.DefaultConfig()
	unbounded.Memory.ByteLineCap = 0
	for _, tc := range []struct {
		name       string
		cfg        qos.Config
		total      uint64
		avail      uint64
		wantReason string // "": no kill
	}{
		{"16 GiB: 5% line, below", qos.DefaultConfig(), 16 << 30, 818 * mib, "< 819 MiB"},
		{"16 GiB: 5% line, above", qos.DefaultConfig(), 16 << 30, 820 * mib, ""},
		{"3.5 GiB keeps 256 MiB", qos.DefaultConfig(), 3584 * mib, 255 * mib, "< 256 MiB"},
		{"1.5 GiB: 200 MiB is no shortage", qos.DefaultConfig(), 1536 * mib, 200 * mib, ""},
		{"1.5 GiB: below 115 MiB", qos.DefaultConfig(), 1536 * mib, 114 * mib, "< 115 MiB"},
		{"operator's 300 MiB on 1.5 GiB", operator, 1536 * mib, 290 * mib, "< 300 MiB"},
		{"cap 0 keeps 256 MiB on 1.5 GiB", unbounded, 1536 * mib, 200 * mib, "< 256 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := qos.NewSet([]string{"memory"}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := memScene(0, tc.avail)
			in.Node.MemTotal = tc.total
			got := c.Evaluate(in)
			if tc.wantReason == "" {
				if len(got) != 0 {
					t.Fatalf("MemAvailable %d MiB of %d MiB: corrections %v, want none", tc.avail/mib, tc.total/mib, got)
				}
				return
			}
			if len(got) != 1 || got[0].Kind != qos.Kill || !strings.Contains(got[0].Reason, tc.wantReason) {
				t.Fatalf("MemAvailable %d MiB of %d MiB: corrections %v, want a kill naming %q", tc.avail/mib, tc.total/mib, got, tc.wantReason)
			}
		})
	}
}
