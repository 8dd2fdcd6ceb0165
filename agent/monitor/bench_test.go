package monitor

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// BenchmarkSample measures one sampling pass over 50 containers and the
// node: on fake trees of both layouts (with a fake eBPF source, whose cost
// is not the monitor's) where eBPF says the containers are idle (their
// cpu.stat is read once a second) or running (read every pass), and on
// real cgroups of this host when root.
//
//	go test -run '^$' -bench Sample -benchmem ./agent/monitor/
//	sudo go test -run '^$' -bench Sample -benchmem ./agent/monitor/   # adds real-cgroups
func BenchmarkSample(b *testing.B) {
	const n = 50
	for _, l := range layouts {
		for _, running := range []bool{false, true} {
			name := "fake-" + l.mode + "-50-idle"
			if running {
				name = "fake-" + l.mode + "-50-running"
			}
			b.Run(name, func(b *testing.B) {
				dir := b.TempDir()
				ebpf := &fakeEBPF{}
				m := newTestMonitor(b, l.mode, dir, ebpf, 600)
				var rels []string
				for i := range n {
					rel := fmt.Sprintf("slackline/guaranteed/c%d", i)
					l.write(b, filepath.Join(dir, "cgroup"), rel, uint64(i)*1000)
					rels = append(rels, rel)
					buckets := make([]uint64, 32)
					buckets[10] = uint64(i)
					ebpf.set(uint64(i+1), EBPFStats{OnCPU: time.Second, RunqBuckets: buckets, Running: running, Sched: true})
				}
				m.SetTargets(benchmarkTargets(rels))
				benchSample(b, m)
			})
		}
	}
	// eBPF that knows what moved (EBPFChanges, as the agent's adapter of
	// the bpf package's changed marks): idle containers are repeated, not
	// sampled, but for their files' refreshes (#29).
	for _, l := range layouts {
		b.Run("fake-"+l.mode+"-50-idle-changes", func(b *testing.B) {
			dir := b.TempDir()
			ebpf := staticEBPF{&fakeEBPF{}}
			m := newTestMonitor(b, l.mode, dir, ebpf, 600)
			var rels []string
			for i := range n {
				rel := fmt.Sprintf("slackline/guaranteed/c%d", i)
				l.write(b, filepath.Join(dir, "cgroup"), rel, uint64(i)*1000)
				rels = append(rels, rel)
				buckets := make([]uint64, 32)
				buckets[10] = uint64(i)
				ebpf.set(uint64(i+1), EBPFStats{OnCPU: time.Second, RunqBuckets: buckets, Sched: true})
			}
			m.SetTargets(benchmarkTargets(rels))
			benchSample(b, m)
		})
	}
	b.Run("real-node-only", func(b *testing.B) {
		m, err := New(Config{Mode: "hybrid", Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		benchSample(b, m)
	})
	b.Run("real-cgroups-50", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("needs root: real cgroups")
		}
		layout, rels := realCgroups(b, "monbench", n)
		m, err := New(Config{Mode: string(layout.Mode), Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		m.SetTargets(benchmarkTargets(rels))
		benchSample(b, m)
	})
}

// staticEBPF is a fakeEBPF whose figures never change once set, and that
// says so (EBPFChanges) at no cost of its own.
type staticEBPF struct{ *fakeEBPF }

func (staticEBPF) BeginPass() error      { return nil }
func (staticEBPF) Unchanged(uint64) bool { return true }

func benchSample(b *testing.B, m *Monitor) {
	now := t0
	if err := m.Sample(now); err != nil { // opens the files
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpuBefore := processCPU(b)
	b.ResetTimer()
	for range b.N {
		now = now.Add(100 * time.Millisecond)
		if err := m.Sample(now); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// CPU time (user + system, GC included) rather than wall time, which a
	// busy machine inflates; and the share of one core at 100 ms sampling.
	cpuPerPass := float64(processCPU(b)-cpuBefore) / float64(b.N)
	b.ReportMetric(cpuPerPass, "cpu-ns/op")
	b.ReportMetric(cpuPerPass/100e6*100, "%core@100ms")
}

// processCPU returns the CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCollect measures a /metrics scrape of 50 containers with eBPF
// figures.
func BenchmarkCollect(b *testing.B) {
	dir := b.TempDir()
	ebpf := &fakeEBPF{}
	m := newTestMonitor(b, "v2", dir, ebpf, 10)
	var rels []string
	for i := range 50 {
		rel := fmt.Sprintf("slackline/guaranteed/c%d", i)
		v2Container(b, filepath.Join(dir, "cgroup"), rel, 1000)
		rels = append(rels, rel)
		buckets := make([]uint64, 24)
		buckets[12] = 100
		ebpf.set(uint64(i+1), EBPFStats{RunqBuckets: buckets})
	}
	m.SetTargets(benchmarkTargets(rels))
	if err := m.Sample(t0); err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
