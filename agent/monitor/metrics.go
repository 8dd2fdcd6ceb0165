package monitor

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Run-queue latency histogram bounds: 2^minRunqBound ns (about 1 µs) to
// 2^maxRunqBound ns (about 2.1 s), doubling. They coincide with the eBPF
// log2 bucket edges, so cumulative counts are exact; latencies below the
// first bound count in it, those above the last only in +Inf. The last
// bound is 2^31 ns because the bpf package's last bucket (31) is open-ended.
const (
	minRunqBound = 10
	maxRunqBound = 31
)

// collector exports the latest samples at scrape time. It holds no state of
// its own besides the descriptors.
type collector struct {
	m *Monitor

	cpuUsage, cpuUser, cpuSystem                   *prometheus.Desc
	cfsPeriods, cfsThrottledPeriods, cfsThrottled  *prometheus.Desc
	memRSS, memCache, memUsage, memLimit, oom      *prometheus.Desc
	memWorkingSet                                  *prometheus.Desc
	netRxBytes, netTxBytes, netRxPkts, netTxPkts   *prometheus.Desc
	cpuWaiting, cpuStalled, memWaiting, memStalled *prometheus.Desc
	ioWaiting, ioStalled                           *prometheus.Desc
	runq, delayedByRevocable, reclaimStall         *prometheus.Desc
	diskSync                                       *prometheus.Desc
	tcpRTT, tcpRetransmits                         *prometheus.Desc

	nodeMemAvailable, nodeLoad1, nodeLoad5, nodeLoad15 *prometheus.Desc
	passDuration, passes, containers                   *prometheus.Desc
	repeated                                           *prometheus.Desc
}

var containerLabels = []string{"container_id", "task_id", "revocable"}

func newCollector(m *Monitor) *collector {
	ctr := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, containerLabels, nil)
	}
	return &collector{
		m:                   m,
		cpuUsage:            ctr("container_cpu_usage_seconds_total", "Cumulative CPU time consumed, in seconds (cgroup cpu.stat / cpuacct)."),
		cpuUser:             ctr("container_cpu_user_seconds_total", "Cumulative user CPU time consumed, in seconds."),
		cpuSystem:           ctr("container_cpu_system_seconds_total", "Cumulative system CPU time consumed, in seconds."),
		cfsPeriods:          ctr("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals."),
		cfsThrottledPeriods: ctr("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals."),
		cfsThrottled:        ctr("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled, in seconds."),
		memRSS:              ctr("container_memory_rss", "Anonymous memory (RSS) in bytes (v2 anon, v1 total_rss)."),
		memCache:            ctr("container_memory_cache", "Page cache in bytes (v2 file, v1 total_cache)."),
		memWorkingSet:       ctr("container_memory_working_set_bytes", "Working set in bytes: anonymous memory plus active page cache (v2 anon + active_file, v1 total_rss + total_active_file)."),
		memUsage:            ctr("container_memory_usage_bytes", "Memory charged to the cgroup in bytes (memory.current / memory.usage_in_bytes)."),
		memLimit:            ctr("container_spec_memory_limit_bytes", "Memory limit in bytes (0: none)."),
		oom:                 ctr("container_oom_events_total", "Count of OOM kills in the container."),
		netRxBytes:          ctr("container_network_receive_bytes_total", "Cumulative bytes received by the container's sockets (eBPF cgroup_skb)."),
		netTxBytes:          ctr("container_network_transmit_bytes_total", "Cumulative bytes sent by the container's sockets (eBPF cgroup_skb)."),
		netRxPkts:           ctr("container_network_receive_packets_total", "Cumulative packets received by the container's sockets (eBPF cgroup_skb)."),
		netTxPkts:           ctr("container_network_transmit_packets_total", "Cumulative packets sent by the container's sockets (eBPF cgroup_skb)."),
		cpuWaiting:          ctr("container_pressure_cpu_waiting_seconds_total", "Total time some tasks were stalled waiting for CPU (PSI some)."),
		cpuStalled:          ctr("container_pressure_cpu_stalled_seconds_total", "Total time all non-idle tasks were stalled waiting for CPU (PSI full)."),
		memWaiting:          ctr("container_pressure_memory_waiting_seconds_total", "Total time some tasks were stalled waiting for memory (PSI some)."),
		memStalled:          ctr("container_pressure_memory_stalled_seconds_total", "Total time all non-idle tasks were stalled waiting for memory (PSI full)."),
		ioWaiting:           ctr("container_pressure_io_waiting_seconds_total", "Total time some tasks were stalled waiting for I/O (PSI some)."),
		ioStalled:           ctr("container_pressure_io_stalled_seconds_total", "Total time all non-idle tasks were stalled waiting for I/O (PSI full)."),
		tcpRTT:              ctr("slackline_container_tcp_rtt_seconds", "Round-trip times of the container's TCP connections (eBPF sock_ops, one sample per acknowledgement that measures one; log2 buckets, sum from bucket midpoints)."),
		tcpRetransmits:      ctr("slackline_container_tcp_retransmits_total", "TCP segments the container's connections retransmitted (eBPF tcp_retransmit_skb)."),
		runq:                ctr("slackline_container_runqueue_latency_seconds", "Run-queue (wakeup-to-run) latency of the container's tasks (eBPF, log2 buckets; sum estimated from bucket midpoints unless measured)."),
		delayedByRevocable:  ctr("slackline_container_delayed_by_revocable_seconds_total", "Time the container's tasks were runnable while a revocable task held their CPU (eBPF)."),
		reclaimStall:        ctr("slackline_container_memory_reclaim_stall_seconds_total", "Time the container's tasks spent in direct memory reclaim (eBPF)."),
		diskSync:            ctr("slackline_container_fsync_latency_seconds", "Latency of the container's synchronous writes: fsync, fdatasync, O_SYNC writes on ext4 (eBPF, log2 buckets)."),
		nodeMemAvailable:    prometheus.NewDesc("slackline_node_memory_available_bytes", "MemAvailable from /proc/meminfo.", nil, nil),
		nodeLoad1:           prometheus.NewDesc("slackline_node_load1", "1-minute load average.", nil, nil),
		nodeLoad5:           prometheus.NewDesc("slackline_node_load5", "5-minute load average.", nil, nil),
		nodeLoad15:          prometheus.NewDesc("slackline_node_load15", "15-minute load average.", nil, nil),
		passDuration:        prometheus.NewDesc("slackline_monitor_sample_duration_seconds", "Duration of the monitor's latest sampling pass.", nil, nil),
		passes:              prometheus.NewDesc("slackline_monitor_samples_total", "Sampling passes the monitor completed.", nil, nil),
		containers:          prometheus.NewDesc("slackline_monitor_containers", "Containers with a current sample.", nil, nil),
		repeated: prometheus.NewDesc("slackline_monitor_samples_repeated_total",
			"Container samples repeated from the previous pass without reading anything: idle containers whose eBPF figures did not move and none of whose files was due (#29).", nil, nil),
	}
}

// Collector returns the Prometheus collector of the agent's container and
// node metrics, computed at scrape time from the latest samples. Register
// it once (it is the same value on every call).
func (m *Monitor) Collector() prometheus.Collector { return m.metrics }

// Describe sends every descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.cpuUsage, c.cpuUser, c.cpuSystem, c.cfsPeriods, c.cfsThrottledPeriods, c.cfsThrottled,
		c.memRSS, c.memCache, c.memUsage, c.memLimit, c.oom, c.memWorkingSet,
		c.netRxBytes, c.netTxBytes, c.netRxPkts, c.netTxPkts,
		c.cpuWaiting, c.cpuStalled, c.memWaiting, c.memStalled, c.ioWaiting, c.ioStalled,
		c.runq, c.delayedByRevocable, c.reclaimStall, c.diskSync, c.tcpRTT, c.tcpRetransmits,
		c.nodeMemAvailable, c.nodeLoad1, c.nodeLoad5, c.nodeLoad15,
		c.passDuration, c.passes, c.containers, c.repeated,
	} {
		ch <- d
	}
}

// Collect sends the latest sample of every container and of the node.
// eBPF-only series (network, run queue, delayed-by-revocable, reclaim
// stall) are sent only for samples that have eBPF figures; pressure series
// only where the kernel reports PSI.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	usages := c.m.usages(false)
	node := c.m.Node()
	c.m.mu.RLock()
	pass, passes, repeated := c.m.lastPass, c.m.passes, c.m.repeated
	c.m.mu.RUnlock()

	for _, u := range usages {
		st := u.Stats
		labels := []string{u.ContainerID, u.TaskID, strconv.FormatBool(u.Revocable)}
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		counter(c.cpuUsage, st.CpusUsageSecs)
		counter(c.cpuUser, st.CpusUserTimeSecs)
		counter(c.cpuSystem, st.CpusSystemTimeSecs)
		counter(c.cfsPeriods, float64(st.CpusNrPeriods))
		counter(c.cfsThrottledPeriods, float64(st.CpusNrThrottled))
		counter(c.cfsThrottled, st.CpusThrottledTimeSecs)
		gauge(c.memRSS, float64(st.MemRssBytes))
		gauge(c.memCache, float64(st.MemCacheBytes))
		gauge(c.memUsage, float64(u.MemUsage))
		gauge(c.memWorkingSet, float64(st.MemWorkingSetBytes))
		gauge(c.memLimit, float64(st.MemLimitBytes))
		counter(c.oom, float64(st.OomEvents))
		if p := st.CpuPressure; p != nil {
			counter(c.cpuWaiting, p.SomeTotalSecs)
			counter(c.cpuStalled, p.FullTotalSecs)
		}
		if p := st.MemoryPressure; p != nil {
			counter(c.memWaiting, p.SomeTotalSecs)
			counter(c.memStalled, p.FullTotalSecs)
		}
		if p := st.IoPressure; p != nil {
			counter(c.ioWaiting, p.SomeTotalSecs)
			counter(c.ioStalled, p.FullTotalSecs)
		}
		if !u.EBPF {
			continue
		}
		counter(c.netRxBytes, float64(st.NetRxBytes))
		counter(c.netTxBytes, float64(st.NetTxBytes))
		counter(c.netRxPkts, float64(st.NetRxPackets))
		counter(c.netTxPkts, float64(st.NetTxPackets))
		counter(c.delayedByRevocable, st.DelayedByRevocableSecs)
		counter(c.reclaimStall, st.MemReclaimStallSecs)
		if ds := st.DiskSync; ds != nil {
			count, sum, buckets := runqHistogram(ds.BucketsLog2Ns, ds.TotalSecs)
			ch <- prometheus.MustNewConstHistogram(c.diskSync, count, sum, buckets, labels...)
		}
		if st.Runqueue != nil {
			count, sum, buckets := runqHistogram(st.Runqueue.BucketsLog2Ns, u.runqSum.Seconds())
			ch <- prometheus.MustNewConstHistogram(c.runq, count, sum, buckets, labels...)
		}
		if st.Tcp != nil {
			count, sum, buckets := rttHistogram(st.Tcp.RttBucketsLog2Us)
			ch <- prometheus.MustNewConstHistogram(c.tcpRTT, count, sum, buckets, labels...)
			counter(c.tcpRetransmits, float64(st.Tcp.Retransmits))
		}
	}

	if st := node.Stats; st != nil {
		ch <- prometheus.MustNewConstMetric(c.nodeMemAvailable, prometheus.GaugeValue, float64(st.MemAvailableBytes))
		ch <- prometheus.MustNewConstMetric(c.nodeLoad1, prometheus.GaugeValue, st.LoadAvg_1)
		ch <- prometheus.MustNewConstMetric(c.nodeLoad5, prometheus.GaugeValue, st.LoadAvg_5)
		ch <- prometheus.MustNewConstMetric(c.nodeLoad15, prometheus.GaugeValue, st.LoadAvg_15)
	}
	ch <- prometheus.MustNewConstMetric(c.passDuration, prometheus.GaugeValue, pass.Seconds())
	ch <- prometheus.MustNewConstMetric(c.passes, prometheus.CounterValue, float64(passes))
	ch <- prometheus.MustNewConstMetric(c.containers, prometheus.GaugeValue, float64(len(usages)))
	ch <- prometheus.MustNewConstMetric(c.repeated, prometheus.CounterValue, float64(repeated))
}

// TCP round-trip histogram bounds: 2^minRTTBound µs (8 µs) to
// 2^maxRTTBound µs (about 16.8 s), doubling, on the eBPF log2 buckets.
const (
	minRTTBound = 3
	maxRTTBound = 24
)

// rttHistogram converts log2 bucket counts (bucket i: [2^i, 2^(i+1)) µs)
// to a Prometheus histogram in seconds, its sum estimated from the bucket
// midpoints.
func rttHistogram(counts []uint64) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, maxRTTBound-minRTTBound+1)
	next := 0
	for k := minRTTBound; k <= maxRTTBound; k++ {
		for ; next < k && next < len(counts); next++ {
			count += counts[next]
		}
		buckets[math.Ldexp(1, k)/1e6] = count
	}
	for ; next < len(counts); next++ {
		count += counts[next]
	}
	for i, n := range counts {
		sum += float64(n) * 1.5 * math.Ldexp(1, i) / 1e6
	}
	return count, sum, buckets
}

// runqHistogram converts log2 bucket counts (bucket i: [2^i, 2^(i+1)) ns)
// to a Prometheus histogram: cumulative counts at upper bounds 2^k ns,
// k = minRunqBound..maxRunqBound, in seconds. sum is the measured sum in
// seconds; 0 estimates it from the bucket midpoints (1.5 * 2^i ns).
func runqHistogram(counts []uint64, sum float64) (count uint64, _ float64, buckets map[float64]uint64) {
	estimate := sum == 0
	buckets = make(map[float64]uint64, maxRunqBound-minRunqBound+1)
	next := 0 // next log2 bucket not yet added to count
	for k := minRunqBound; k <= maxRunqBound; k++ {
		// Buckets i < k lie entirely below 2^k ns.
		for ; next < k && next < len(counts); next++ {
			count += counts[next]
		}
		buckets[math.Ldexp(1, k)/1e9] = count
	}
	for ; next < len(counts); next++ {
		count += counts[next]
	}
	if estimate {
		for i, n := range counts {
			sum += float64(n) * 1.5 * math.Ldexp(1, i) / 1e9
		}
	}
	return count, sum, buckets
}
