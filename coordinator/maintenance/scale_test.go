package maintenance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestIndexAgreesWithOverlaps checks the index against the definition
// (Machine.overlaps) over every machine of a small universe, for schedules
// in several orders.
func TestIndexAgreesWithOverlaps(t *testing.T) {
	t.Parallel()
	var universe []Machine
	for _, h := range []string{"", "a", "b"} {
		for _, ip := range []string{"", "10.0.0.1", "10.0.0.2"} {
			if h != "" || ip != "" {
				universe = append(universe, Machine{h, ip})
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		indexed := slices.Clone(universe)
		rng.Shuffle(len(indexed), func(i, j int) { indexed[i], indexed[j] = indexed[j], indexed[i] })
		indexed = indexed[:1+rng.IntN(len(indexed))]
		var x machineIndex
		for _, m := range indexed {
			x.add(m)
		}
		for _, m := range universe {
			var want []Machine
			for _, o := range indexed {
				if o.overlaps(m) {
					want = append(want, o)
				}
			}
			want = want[:min(2, len(want))]
			if got := x.overlapping(m, 2); !slices.Equal(got, want) {
				t.Errorf("round %d: overlapping(%v) in %v = %v, want %v", round, m, indexed, got, want)
			}
		}
	}
}

// bigSchedule is n machines, ten per window, each with a hostname and an
// ip, and every tenth window's machines by hostname only.
func bigSchedule(n int) *slacklinev1.Schedule {
	var windows []*slacklinev1.Window
	for i := 0; i < n; i += 10 {
		var ids []*slacklinev1.MachineID
		for j := i; j < min(i+10, n); j++ {
			id := &slacklinev1.MachineID{Hostname: fmt.Sprintf("host-%d", j)}
			if (i/10)%10 != 0 {
				id.Ip = fmt.Sprintf("10.%d.%d.%d", j>>16&255, j>>8&255, j&255)
			}
			ids = append(ids, id)
		}
		windows = append(windows, window(t0, time.Hour, ids...))
	}
	return schedule(windows...)
}

// TestLargeSchedule validates a 20,000-machine schedule, finds its
// machines and refuses one machine added twice under another name (it
// validated 40,000, most of the package's time; BenchmarkUpdateSchedule
// keeps that size and shows the growth).
func TestLargeSchedule(t *testing.T) {
	t.Parallel()
	const n = 20000
	s := mustUpdate(t, New(), bigSchedule(n))
	if got := len(s.Machines()); got != n {
		t.Fatalf("%d machines scheduled, want %d", got, n)
	}
	if m, ok := s.Lookup("HOST-12345", "10.0.48.57"); !ok || m.Hostname != "host-12345" {
		t.Errorf("Lookup(host-12345) = %v, %v", m, ok)
	}
	bad := bigSchedule(n)
	bad.Windows = append(bad.Windows, window(t0, time.Hour, &slacklinev1.MachineID{Ip: "10.0.48.57"}))
	if _, _, err := New().UpdateSchedule(bad); err == nil {
		t.Error("a machine in two windows (by hostname and ip, then by ip) was accepted")
	}
}

// BenchmarkUpdateSchedule measures validating and installing a schedule;
// the ratio between the sizes shows the growth (O(n log n) at worst).
func BenchmarkUpdateSchedule(b *testing.B) {
	for _, n := range []int{4000, 40000} {
		sched := bigSchedule(n)
		b.Run(fmt.Sprintf("machines=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := New().UpdateSchedule(sched); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
