package qos_test

import (
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
			name: "the 256 MiB minimum on a small node",
			edit: func(in *qos.Input) { in.Node.MemTotal, in.Node.MemAvailable = 2<<30, 200*mib },
			want: []qos.Correction{{Kind: qos.Kill, ContainerID: "batch-2", TaskID: "batch-2-task", Controller: "memory", Signal: at(0),
				Reason: "node MemAvailable 200 MiB < 256 MiB; batch-2 is the largest revocable container (3072 MiB)"}},
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
