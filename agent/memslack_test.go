package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/settings"
	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

// TestMemorySlackLeavesTheReclaimLineFree (#28): with the agent's default
// estimator and QoS controllers, on a 1536 MiB node allocated whole to a
// server that works on 384 MiB, with 60 MiB held outside the containers,
// revocable work that takes exactly the memory slack offered leaves the
// node's MemAvailable where the reclaim controller is calm: it neither
// reclaims, freezes nor kills, and releases memory.high after its calm
// period. The old estimate (allocation less the working set and a 3%
// margin, ~1106 MiB) left the node less than nothing; in the colocation
// bench, 141 MiB against the 230 MiB line, and reclaim froze and killed
// in every run.
func TestMemorySlackLeavesTheReclaimLineFree(t *testing.T) {
	t.Parallel()
	const (
		mib       = 1 << 20
		nodeMiB   = 1536
		serverMiB = 384
		otherMiB  = 60
	)
	m, write := fakeMonitorNode(t, 600)
	availMiB := nodeMiB - serverMiB - otherMiB
	write("proc/meminfo", fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n", nodeMiB*1024, availMiB*1024, availMiB*1024))
	ctl, err := settings.Default().NewControllers()
	if err != nil {
		t.Fatal(err)
	}
	cz := newFakeContainerizer()
	if _, err := cz.Launch(context.Background(), containerizer.Spec{ContainerID: "server", Resources: resources.MustParse("cpus:1;mem:1536")}); err != nil {
		t.Fatal(err)
	}
	m.SetTargets([]monitor.Target{{ID: "server", CgroupPath: "r/server"}})
	l := newEstimateLoop(Config{Logger: quietLog(), Monitor: m, Containerizer: cz, Estimator: ctl.Estimator, QoS: ctl.QoS},
		resources.MustParse("cpus:2;mem:1536"), nil, nil)

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var (
		e      *estimate
		points []monitor.Point
		now    time.Time
	)
	for pass := range 300 { // 30 s at 100 ms: past every window's warm-up
		now = t0.Add(time.Duration(pass) * 100 * time.Millisecond)
		write("cgroup/r/server/cpu.stat", fmt.Sprintf("usage_usec %d\n", pass*50_000))
		write("cgroup/r/server/memory.current", fmt.Sprint(serverMiB*mib))
		// Its working set: anonymous memory and active page cache.
		write("cgroup/r/server/memory.stat", fmt.Sprintf("anon %d\nfile %d\nactive_file %d\ninactive_file 0\n", 100*mib, 284*mib, 284*mib))
		if err := m.Sample(now); err != nil {
			t.Fatal(err)
		}
		e, points = l.estimate(now, points)
	}
	offered := e.revocable.Mem()
	t.Logf("revocable mem offered: %.1f MiB", offered)
	if offered < 500 {
		t.Fatalf("revocable mem %.0f MiB: want the slack offered, less what the node keeps free (~770 MiB)", offered)
	}

	// Revocable work takes exactly what was offered.
	left := max(0, float64(availMiB)-offered)
	cfg := settings.Default().QoSConfig()
	reclaim := qos.NewMemoryReclaim(cfg.Reclaim, cfg.KillRetry)
	in := qos.Input{
		Node: qos.Node{MemTotal: nodeMiB * mib, MemAvailable: uint64(left * mib), MemoryHigh: true, Freeze: true},
		Containers: []qos.Container{
			{ID: "server", TaskID: "server", MemBytes: serverMiB * mib, StartedAt: t0},
			{ID: "batch", TaskID: "batch", Revocable: true, MemBytes: uint64(offered * mib), StartedAt: now},
		},
		RevocableMemoryHigh: uint64(offered*mib) + 64*mib,
	}
	for _, offset := range []time.Duration{0, cfg.Reclaim.CalmPeriod / 2, cfg.Reclaim.CalmPeriod} {
		in.Now = now.Add(offset)
		got := reclaim.Evaluate(in)
		calmEnough := offset == cfg.Reclaim.CalmPeriod
		if calmEnough && (len(got) != 1 || got[0].Kind != qos.Release) || !calmEnough && len(got) != 0 {
			t.Fatalf("revocable work holding the %.0f MiB offered leaves MemAvailable %d of %d MiB: at +%v reclaim corrects %v, want it calm",
				offered, in.Node.MemAvailable/mib, nodeMiB, offset, got)
		}
	}
}
