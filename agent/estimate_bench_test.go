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

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/resources"
)

// BenchmarkEstimateInput: one pass of the estimate loop's input over 50
// containers whose monitor keeps 600 points each (a minute at the default
// 100 ms), after one new monitor pass (not timed).
func BenchmarkEstimateInput(b *testing.B) {
	dir := b.TempDir()
	write := func(rel, content string) {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write("proc/stat", "cpu  100 0 100 5000 0 0 0 0 0 0\ncpu0 50 0 50 2500 0 0 0 0 0 0\n")
	write("proc/meminfo", "MemTotal:       8000000 kB\nMemFree:        1000000 kB\nMemAvailable:   6000000 kB\n")
	write("proc/loadavg", "0.50 0.25 0.10 1/100 1234\n")
	m, err := monitor.New(monitor.Config{Mode: "v2", CgroupMountpoint: filepath.Join(dir, "cgroup"),
		ProcRoot: filepath.Join(dir, "proc"), History: 600, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
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
	l := newEstimateLoop(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Monitor: m, Containerizer: cz},
		resources.Resources{}, nil, nil)
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
