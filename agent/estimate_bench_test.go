package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/resources"
)

// BenchmarkEstimateInput: one pass of the estimate loop's input over 50
// containers whose monitor keeps 600 points each (a minute at the default
// 100 ms), after one new monitor pass (not timed).
func BenchmarkEstimateInput(b *testing.B) {
	m, write := fakeMonitorNode(b, 600)
	cz := newFakeContainerizer()
	var targets []monitor.Target
	for i := range 50 {
		id := fmt.Sprintf("c%02d", i)
		_, _ = cz.Launch(context.Background(), containerizer.Spec{ContainerID: id})
		targets = append(targets, monitor.Target{ID: id, CgroupPath: "r/" + id})
		write("cgroup/r/"+id+"/cpu.stat", "usage_usec 1000\n")
		write("cgroup/r/"+id+"/memory.current", "1000000\n")
	}
	m.SetTargets(targets)
	l := newEstimateLoop(Config{Logger: quietLog(), Monitor: m, Containerizer: cz}, resources.Resources{}, nil, nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pass := 0
	sample := func() {
		if err := m.Sample(t0.Add(time.Duration(pass) * 100 * time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		pass++
	}
	var points []monitor.Point
	for range 600 {
		sample()
	}
	_, points = l.input(t0, points)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		sample()
		b.StartTimer()
		_, points = l.input(t0, points)
	}
}
