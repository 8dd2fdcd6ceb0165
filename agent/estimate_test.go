package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// TestEstimateInputIncremental: the estimate loop's input, built from the
// points new since its last pass, equals the monitor's whole history
// converted afresh, pass after pass, while the ring wraps and containers
// come and go; samples of a gone container are not kept.
func TestEstimateInputIncremental(t *testing.T) {
	const limit = 4
	m, write := fakeMonitorNode(t, limit)
	container := func(id string, usec int) {
		write("cgroup/r/"+id+"/cpu.stat", fmt.Sprintf("usage_usec %d\n", usec))
		write("cgroup/r/"+id+"/memory.current", fmt.Sprint(1000*usec))
	}
	cz := newFakeContainerizer()
	l := newEstimateLoop(Config{Logger: quietLog(), Monitor: m, Containerizer: cz}, resources.Resources{}, nil, nil)

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var points []monitor.Point
	for pass := range 9 {
		if pass == 0 || pass == 6 { // b arrives, then a leaves
			var targets []monitor.Target
			if pass == 0 {
				_, _ = cz.Launch(context.Background(), containerizer.Spec{ContainerID: "a"})
			} else {
				_ = cz.Destroy("a")
			}
			_, _ = cz.Launch(context.Background(), containerizer.Spec{ContainerID: "b"})
			for _, c := range cz.Containers() {
				targets = append(targets, monitor.Target{ID: c.ID, CgroupPath: "r/" + c.ID})
			}
			m.SetTargets(targets)
		}
		for _, id := range []string{"a", "b"} {
			container(id, pass*(pass+1)*10_000)
		}
		if err := m.Sample(t0.Add(time.Duration(pass) * 100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		var in estimator.Input
		in, points = l.input(t0.Add(time.Duration(pass)*100*time.Millisecond), points)
		for _, c := range in.Containers {
			var want []estimator.Sample
			for _, p := range m.History(nil, c.ID) {
				want = append(want, estimator.Sample{Time: p.Time, CPU: p.CPURate, MemBytes: p.MemRSS, NetTx: p.NetTxMbps})
			}
			if diff := cmp.Diff(want, c.History); diff != "" {
				t.Fatalf("pass %d, container %s: history (-whole +incremental):\n%s", pass, c.ID, diff)
			}
			if !c.HistoryChecked {
				t.Fatalf("pass %d, container %s: history not marked checked", pass, c.ID)
			}
			if len(c.History) > limit {
				t.Fatalf("pass %d, container %s: %d samples, more than the monitor's %d", pass, c.ID, len(c.History), limit)
			}
		}
		if len(in.Containers) != len(l.samples) {
			t.Fatalf("pass %d: %d containers but samples kept for %d", pass, len(in.Containers), len(l.samples))
		}
	}
	if _, ok := l.samples["a"]; ok {
		t.Error("samples of container a kept after it left")
	}
}

// fakeMonitorNode returns a v2 monitor over a fake node (procfs and cgroup
// files under a temporary directory) keeping history points per container,
// and a function writing a file of that node (relative to its root: proc/...,
// cgroup/...).
func fakeMonitorNode(tb testing.TB, history int) (*monitor.Monitor, func(rel, content string)) {
	tb.Helper()
	dir := tb.TempDir()
	write := func(rel, content string) {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	write("proc/stat", "cpu  100 0 100 5000 0 0 0 0 0 0\ncpu0 50 0 50 2500 0 0 0 0 0 0\ncpu1 50 0 50 2500 0 0 0 0 0 0\n")
	write("proc/meminfo", "MemTotal:       8000000 kB\nMemFree:        1000000 kB\nMemAvailable:   6000000 kB\n")
	write("proc/loadavg", "0.50 0.25 0.10 1/100 1234\n")
	m, err := monitor.New(monitor.Config{Mode: "v2", CgroupMountpoint: filepath.Join(dir, "cgroup"),
		ProcRoot: filepath.Join(dir, "proc"), History: history, Logger: quietLog()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m, write
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
