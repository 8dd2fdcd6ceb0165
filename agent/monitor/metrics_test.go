package monitor

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ebpf := &fakeEBPF{}
	m := newTestMonitor(t, "v2", dir, ebpf, 10)
	cg := filepath.Join(dir, "cgroup")
	v2Container(t, cg, "r/guaranteed/g", 2_000_000)
	v2Container(t, cg, "r/revocable/b", 2_000_000)
	buckets := make([]uint64, 21)
	buckets[3], buckets[10], buckets[20] = 5, 90, 5 // [8,16) ns, [1024,2048) ns, [2^20,2^21) ns
	ebpf.set(1, EBPFStats{RunqBuckets: buckets, RunqSum: 10 * time.Millisecond, Wakeups: 100,
		NetRxBytes: 1000, NetRxPackets: 10, NetTxBytes: 2000, NetTxPackets: 20,
		DelayedByRevocable: 250 * time.Millisecond, ReclaimStall: 30 * time.Millisecond})
	m.SetTargets([]Target{
		{ID: "g", TaskID: "web-1", CgroupPath: "r/guaranteed/g", CgroupID: 1},
		{ID: "b", TaskID: "batch-1", Revocable: true, CgroupPath: "r/revocable/b", CgroupID: 2}, // not tracked by eBPF
	})
	if err := m.Sample(t0); err == nil {
		t.Fatal("want the eBPF error of container b")
	}

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m.Collector()); err != nil {
		t.Fatal(err)
	}
	values := gatherValues(t, reg)
	for series, want := range map[string]float64{
		`container_cpu_usage_seconds_total{container_id="b",revocable="true",task_id="batch-1"}`:                     2,
		`container_cpu_usage_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:                      2,
		`container_cpu_user_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:                       1.5,
		`container_cpu_system_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:                     0.5,
		`container_cpu_cfs_periods_total{container_id="g",revocable="false",task_id="web-1"}`:                        40,
		`container_cpu_cfs_throttled_periods_total{container_id="g",revocable="false",task_id="web-1"}`:              7,
		`container_cpu_cfs_throttled_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:              0.35,
		`container_memory_rss{container_id="g",revocable="false",task_id="web-1"}`:                                   52428800,
		`container_memory_cache{container_id="g",revocable="false",task_id="web-1"}`:                                 41943040,
		`container_memory_usage_bytes{container_id="g",revocable="false",task_id="web-1"}`:                           104857600,
		`container_spec_memory_limit_bytes{container_id="g",revocable="false",task_id="web-1"}`:                      268435456,
		`container_oom_events_total{container_id="g",revocable="false",task_id="web-1"}`:                             2,
		`container_network_receive_bytes_total{container_id="g",revocable="false",task_id="web-1"}`:                  1000,
		`container_network_transmit_bytes_total{container_id="g",revocable="false",task_id="web-1"}`:                 2000,
		`container_network_receive_packets_total{container_id="g",revocable="false",task_id="web-1"}`:                10,
		`container_network_transmit_packets_total{container_id="g",revocable="false",task_id="web-1"}`:               20,
		`container_pressure_cpu_waiting_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:           3,
		`container_pressure_cpu_stalled_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:           1.5,
		`container_pressure_memory_waiting_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:        0.2,
		`container_pressure_memory_stalled_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:        0.1,
		`container_pressure_io_waiting_seconds_total{container_id="g",revocable="false",task_id="web-1"}`:            0.7,
		`container_pressure_io_stalled_seconds_total{container_id="b",revocable="true",task_id="batch-1"}`:           0.6,
		`slackline_container_delayed_by_revocable_seconds_total{container_id="g",revocable="false",task_id="web-1"}`: 0.25,
		`slackline_container_memory_reclaim_stall_seconds_total{container_id="g",revocable="false",task_id="web-1"}`: 0.03,
		`slackline_node_memory_available_bytes{}`:                                                                    6144000000,
		`slackline_node_load1{}`:            1.5,
		`slackline_node_load5{}`:            0.75,
		`slackline_node_load15{}`:           0.25,
		`slackline_monitor_samples_total{}`: 1,
		`slackline_monitor_containers{}`:    2,
	} {
		got, ok := values[series]
		if !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v (present: %v), want %v", series, got, ok, want)
		}
	}
	// Without eBPF figures there are no eBPF series (rather than zeros).
	for series := range values {
		if strings.Contains(series, `container_id="b"`) && (strings.Contains(series, "network") || strings.Contains(series, "slackline_container_")) {
			t.Errorf("eBPF series %s exported for a container without eBPF figures", series)
		}
	}

	// Every advertised name is exported, the cAdvisor ones included.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
	}
	for _, name := range []string{
		"container_cpu_usage_seconds_total", "container_cpu_user_seconds_total", "container_cpu_system_seconds_total",
		"container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total", "container_cpu_cfs_throttled_seconds_total",
		"container_memory_rss", "container_memory_cache", "container_memory_usage_bytes", "container_spec_memory_limit_bytes",
		"container_oom_events_total", "container_network_receive_bytes_total", "container_network_transmit_bytes_total",
		"container_network_receive_packets_total", "container_network_transmit_packets_total",
		"container_pressure_cpu_waiting_seconds_total", "container_pressure_cpu_stalled_seconds_total",
		"container_pressure_memory_waiting_seconds_total", "container_pressure_memory_stalled_seconds_total",
		"container_pressure_io_waiting_seconds_total", "container_pressure_io_stalled_seconds_total",
		"slackline_container_runqueue_latency_seconds", "slackline_container_delayed_by_revocable_seconds_total",
		"slackline_container_memory_reclaim_stall_seconds_total",
		"slackline_node_memory_available_bytes", "slackline_node_load1", "slackline_node_load5", "slackline_node_load15",
		"slackline_monitor_sample_duration_seconds", "slackline_monitor_samples_total", "slackline_monitor_containers",
	} {
		if !got[name] {
			t.Errorf("metric %s not exported", name)
		}
	}

	// The histogram: only for the container with eBPF figures.
	for _, f := range families {
		if f.GetName() != "slackline_container_runqueue_latency_seconds" {
			continue
		}
		if len(f.Metric) != 1 {
			t.Fatalf("runqueue histogram for %d containers, want 1 (g)", len(f.Metric))
		}
		h := f.Metric[0].GetHistogram()
		if h.GetSampleCount() != 100 || h.GetSampleSum() != 0.01 {
			t.Errorf("count %d sum %v, want 100 and the measured 0.01", h.GetSampleCount(), h.GetSampleSum())
		}
		cum := map[float64]uint64{}
		for _, b := range h.Bucket {
			cum[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		for bound, want := range map[float64]uint64{1024e-9: 5, 2048e-9: 95, float64(1<<20) * 1e-9: 95, float64(1<<21) * 1e-9: 100} {
			if cum[bound] != want {
				t.Errorf("bucket le=%g: %d, want %d", bound, cum[bound], want)
			}
		}
	}
}

func TestRunqHistogram(t *testing.T) {
	t.Parallel()
	counts := make([]uint64, 40)
	counts[0], counts[12], counts[36] = 1, 2, 4 // below the first bound, inside, above the last
	count, sum, buckets := runqHistogram(counts, 0)
	if count != 7 {
		t.Errorf("count = %d, want 7", count)
	}
	wantSum := (1.5*1 + 2*1.5*4096 + 4*1.5*math.Ldexp(1, 36)) / 1e9
	if math.Abs(sum-wantSum) > 1e-12 {
		t.Errorf("estimated sum = %v, want %v (bucket midpoints)", sum, wantSum)
	}
	if len(buckets) != maxRunqBound-minRunqBound+1 {
		t.Errorf("%d buckets, want %d", len(buckets), maxRunqBound-minRunqBound+1)
	}
	want := map[float64]uint64{}
	for k := minRunqBound; k <= maxRunqBound; k++ {
		n := uint64(1)
		if k > 12 {
			n = 3
		}
		want[math.Ldexp(1, k)/1e9] = n
	}
	if diff := cmp.Diff(want, buckets); diff != "" {
		t.Errorf("buckets (-want +got):\n%s", diff)
	}
}

// gatherValues returns every counter and gauge of reg as
// "name{label="value",...}" -> value, labels sorted by name.
func gatherValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			}
		}
	}
	return out
}
