package allocator

import (
	"fmt"
	"testing"
	"time"

	"github.com/slackline/slackline/resources"
)

// The benchmarks follow Mesos's HierarchicalAllocator_BENCHMARK_Test
// .DeclineOffers: agents with cpus:24;mem:4096;disk:4096;ports:[31000-32000],
// frameworks that decline every offer with a one hour filter. Run them with
//
//	go test -run XXX -bench . -benchmem ./coordinator/allocator/

var benchAgent = resources.MustParse("cpus:24;mem:4096;disk:4096;ports:[31000-32000]")

type benchSize struct{ agents, frameworks, roles int }

func (s benchSize) String() string {
	return fmt.Sprintf("agents=%d/frameworks=%d/roles=%d", s.agents, s.frameworks, s.roles)
}

var declineSizes = []benchSize{
	{10000, 1000, 1},
	{10000, 1000, 4},
	{2000, 2000, 1},
}

// newBench returns an allocator with s.agents agents and s.frameworks
// active frameworks spread round-robin over s.roles roles ("*" when one).
func newBench(s benchSize) *Allocator {
	a := New(Config{})
	for i := range s.agents {
		a.AddAgent(fmt.Sprintf("agent-%05d", i), benchAgent)
	}
	for i := range s.frameworks {
		role := DefaultRole
		if s.roles > 1 {
			role = fmt.Sprintf("role-%d", i%s.roles)
		}
		a.AddFramework(fmt.Sprintf("framework-%05d", i), []string{role}, true)
	}
	return a
}

// declineRound runs one full pass and declines every offer with a one hour
// filter. It returns the number of offers.
func declineRound(a *Allocator, now time.Time) int {
	allocs := a.Allocate(now, nil)
	for _, al := range allocs {
		a.Release(al.FrameworkID, al.Role, al.AgentID, al.Resources, time.Hour, now)
	}
	return len(allocs)
}

// saturated caches, per size, an allocator in which every framework has
// declined every agent (building one takes seconds).
var saturated = map[benchSize]*Allocator{}

func saturatedBench(b *testing.B, s benchSize) *Allocator {
	if a, ok := saturated[s]; ok {
		return a
	}
	a := newBench(s)
	now := t0
	offers := 0
	for {
		n := declineRound(a, now)
		if n == 0 {
			break
		}
		offers += n
		now = now.Add(time.Millisecond)
	}
	if want := s.agents * s.frameworks; offers != want {
		b.Fatalf("saturation after %d offers, want %d", offers, want)
	}
	saturated[s] = a
	return a
}

// BenchmarkDeclineOffers measures a full allocation pass once every
// framework has declined every agent: every agent is filtered for every
// framework, so the pass offers nothing.
func BenchmarkDeclineOffers(b *testing.B) {
	for _, s := range declineSizes {
		b.Run(s.String(), func(b *testing.B) {
			a := saturatedBench(b, s)
			now := t0.Add(time.Minute)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if allocs := a.Allocate(now, nil); len(allocs) != 0 {
					b.Fatalf("saturated cluster got %d offers", len(allocs))
				}
			}
		})
	}
}

// BenchmarkDeclineOffersRevocable is BenchmarkDeclineOffers with a
// revocable pool on every agent and every framework capable, every regular
// and revocable offer declined with a one hour filter: the pass skips each
// pool with a few word operations, as it skips the agent.
func BenchmarkDeclineOffersRevocable(b *testing.B) {
	s := benchSize{2000, 1000, 1}
	a := newBench(s)
	for i := range s.agents {
		a.SetAgentRevocable(fmt.Sprintf("agent-%05d", i), resources.MustParse("cpus:8;mem:1024"))
	}
	for i := range s.frameworks {
		a.SetFrameworkRevocable(fmt.Sprintf("framework-%05d", i), true)
	}
	now := t0
	offers := 0
	for {
		allocs := a.Allocate(now, nil)
		if len(allocs) == 0 {
			break
		}
		for _, al := range allocs {
			if al.Revocable {
				a.ReleaseRevocable(al.FrameworkID, al.Role, al.AgentID, al.Resources, time.Hour, now)
			} else {
				a.Release(al.FrameworkID, al.Role, al.AgentID, al.Resources, time.Hour, now)
			}
		}
		offers += len(allocs)
		now = now.Add(time.Millisecond)
	}
	if want := 2 * s.agents * s.frameworks; offers != want {
		b.Fatalf("saturation after %d offers, want %d", offers, want)
	}
	now = now.Add(time.Minute)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if allocs := a.Allocate(now, nil); len(allocs) != 0 {
			b.Fatalf("saturated cluster got %d offers", len(allocs))
		}
	}
}

// BenchmarkDeclineOffersWarmup measures the whole cycle from an empty
// cluster to saturation: a full pass, every offer declined with a filter,
// again, until a pass offers nothing (frameworks+1 rounds). It reports the
// time per round (pass plus declines) besides the total.
func BenchmarkDeclineOffersWarmup(b *testing.B) {
	for _, s := range declineSizes {
		b.Run(s.String(), func(b *testing.B) {
			b.ReportAllocs()
			rounds := 0
			for b.Loop() {
				b.StopTimer()
				a := newBench(s)
				b.StartTimer()
				now := t0
				for declineRound(a, now) > 0 {
					rounds++
					now = now.Add(time.Millisecond)
				}
				rounds++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds), "ns/round")
			b.ReportMetric(float64(rounds)/float64(b.N), "rounds/op")
		})
	}
}

// BenchmarkEventDrivenPass measures a pass over one agent (what an agent
// event or a decline triggers) with 1,000 frameworks in a 10,000-agent
// cluster, half of the frameworks filtered on that agent: the pass offers
// the agent to the first unfiltered framework, which then releases it
// (refuse 0, so the next pass can offer it again).
func BenchmarkEventDrivenPass(b *testing.B) {
	a := newBench(benchSize{10000, 1000, 1})
	now := t0
	ids := []string{"agent-00000"}
	// Half the frameworks decline agent-00000 with a long filter.
	for range 500 {
		for _, al := range a.Allocate(now, ids) {
			a.Release(al.FrameworkID, al.Role, al.AgentID, al.Resources, time.Hour, now)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		allocs := a.Allocate(now, ids)
		if len(allocs) != 1 {
			b.Fatalf("got %d offers", len(allocs))
		}
		al := allocs[0]
		a.Release(al.FrameworkID, al.Role, al.AgentID, al.Resources, 0, now)
	}
}

// BenchmarkRelease measures declining an offer with a filter (Release with
// refuse > 0) in a 10,000 agent x 1,000 framework cluster.
func BenchmarkRelease(b *testing.B) {
	a := newBench(benchSize{10000, 1000, 1})
	now := t0
	var pending []Allocation
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if len(pending) == 0 {
			b.StopTimer()
			pending = a.Allocate(now, nil)
			if len(pending) == 0 { // saturated: start over
				for i := range 1000 {
					a.Revive(fmt.Sprintf("framework-%05d", i), nil)
				}
				pending = a.Allocate(now, nil)
			}
			b.StartTimer()
		}
		al := pending[0]
		pending = pending[1:]
		a.Release(al.FrameworkID, al.Role, al.AgentID, al.Resources, time.Hour, now)
	}
}
