package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// EBPF is the monitor's view of the eBPF programs: cumulative figures per
// cgroup. The agent adapts the bpf package to it; a nil EBPF in Config
// means the monitor runs on cgroupfs, PSI and procfs alone.
//
// Stats is called once per container per pass, from the sampling goroutine
// only. It returns an error for a cgroup it does not account (yet); the
// monitor then leaves the container's eBPF fields unset for that pass and
// reports the error from Sample. The monitor copies what it keeps: the
// returned RunqBuckets may be reused by the implementation afterwards.
type EBPF interface {
	Stats(cgroupID uint64) (EBPFStats, error)
}

// EBPFFunc adapts a function to EBPF.
type EBPFFunc func(cgroupID uint64) (EBPFStats, error)

// Stats calls f.
func (f EBPFFunc) Stats(cgroupID uint64) (EBPFStats, error) { return f(cgroupID) }

// EBPFStats are one cgroup's cumulative eBPF figures since it was first
// accounted.
type EBPFStats struct {
	// OnCPU is the time the cgroup's tasks ran (sched_switch).
	OnCPU time.Duration
	// Wakeups counts wakeups whose run-queue latency was measured.
	Wakeups uint64
	// RunqBuckets is the run-queue (wakeup-to-run) latency histogram:
	// RunqBuckets[i] counts latencies in [2^i, 2^(i+1)) nanoseconds since
	// the cgroup was first accounted (each bucket is a counter; buckets
	// are not cumulative over i).
	RunqBuckets []uint64
	// RunqSum is the sum of the measured latencies, if the programs keep
	// it; 0 means unknown and the exported histogram's sum is estimated
	// from the bucket midpoints.
	RunqSum time.Duration
	// DelayedByRevocable is the time the cgroup's tasks were runnable while
	// a revocable task held their CPU.
	DelayedByRevocable time.Duration
	// Network traffic of the cgroup's sockets (cgroup_skb ingress/egress).
	NetRxBytes, NetRxPackets, NetTxBytes, NetTxPackets uint64
	// ReclaimStall is time spent in direct reclaim (vmscan tracepoints).
	ReclaimStall time.Duration
	// OOMKills counts OOM kills in the cgroup.
	OOMKills uint64
	// TCPRTTBuckets is the histogram of the round trips of the cgroup's
	// TCP connections: TCPRTTBuckets[i] counts round trips in
	// [2^i, 2^(i+1)) µs (nil: not measured). TCPRTTCount is their number.
	TCPRTTBuckets []uint64
	TCPRTTCount   uint64
	// TCPRetransmits counts the cgroup's retransmitted TCP segments.
	TCPRetransmits uint64
}

// Target is a container to measure, as the agent knows it.
type Target struct {
	// ID is the container id (the metrics' container_id label).
	ID string
	// TaskID is the task running in it (the metrics' task_id label).
	TaskID string
	// Revocable reports that the container runs on revocable resources.
	Revocable bool
	// CgroupPath is the container's cgroup relative to every hierarchy, as
	// containerizer.Container.CgroupPath reports it
	// ("slackline/guaranteed/<id>").
	CgroupPath string
	// CgroupID is the id (inode number) of the container's v2 cgroup, the
	// key of the eBPF maps; 0 lets the monitor find it.
	CgroupID uint64
	// CPULimit is the container's cpus (reported as cpus_limit).
	CPULimit float64
	// MemLimit is the container's memory limit in bytes, reported when the
	// cgroup itself has no limit (0: none).
	MemLimit uint64
}

// Config configures a Monitor. Zero values take the documented defaults.
type Config struct {
	// Mode is the host's cgroup layout, "v2" or "hybrid" (as the
	// containerizer reports it); empty detects it under CgroupMountpoint.
	Mode string
	// CgroupMountpoint is where the cgroup hierarchies are mounted (default
	// /sys/fs/cgroup).
	CgroupMountpoint string
	// ProcRoot is where procfs is mounted (default /proc).
	ProcRoot string
	// Interval is Run's sampling period (default 1s, at least 10ms).
	Interval time.Duration
	// NodeInterval is the least time between two samples of the node's
	// procfs figures (default the larger of Interval and 1s): load averages
	// and PSI averages change every few seconds, and /proc/stat and friends
	// cost as much to read and parse as a dozen containers.
	NodeInterval time.Duration
	// History is how many points (compact samples, see Point) are kept per
	// container (default 600: 10 minutes at 1s, 1 minute at 100ms).
	History int
	// EBPF supplies the eBPF figures; nil runs without them.
	EBPF EBPF
	// Now is the clock Run stamps samples with (default time.Now).
	Now func() time.Time
	// Logger receives the monitor's logs (default slog.Default()).
	Logger *slog.Logger
}

// Usage is one sample of a container (or of the node).
type Usage struct {
	// ContainerID and TaskID identify the container; empty for the node.
	ContainerID, TaskID string
	// Revocable is the container's class.
	Revocable bool
	// Time is when the sample was taken (the time passed to Sample).
	Time time.Time
	// Stats holds every figure; cumulative fields are since the cgroup was
	// created (cgroupfs, PSI) or first accounted (eBPF). It is shared and
	// must not be modified.
	Stats *slacklinev1.ResourceStatistics
	// CPURate is CPU usage in cores between the previous sample and this
	// one (0 on a container's first sample); also Stats.CpusRate.
	CPURate float64
	// RunqP50 and RunqP99 are run-queue latency percentiles over the same
	// interval, from the eBPF histogram (0 without eBPF, on the first
	// sample, or when no wakeup happened); also in Stats.Runqueue.
	RunqP50, RunqP99 time.Duration
	// MemUsage is the cgroup's charged memory (v2 memory.current, v1
	// memory.usage_in_bytes; node: MemTotal - MemAvailable).
	MemUsage uint64
	// EBPF reports that the eBPF fields (on-CPU, run queue, network,
	// reclaim stall, delayed-by-revocable) were measured in this sample.
	EBPF bool
	// NetTxMbps and NetRxMbps are egress and ingress between the previous
	// sample and this one (Mbit/s, eBPF; also in Stats), NetTxPackets the
	// packets sent meanwhile.
	NetTxMbps, NetRxMbps float64
	NetTxPackets         uint64
	// TCPRTTP50 and TCPRTTP99 are percentiles of the TCP round trips over
	// the same interval, TCPRetransmits the segments retransmitted
	// meanwhile (eBPF; 0 without samples).
	TCPRTTP50, TCPRTTP99 time.Duration
	TCPRetransmits       uint64

	runqSum time.Duration // EBPFStats.RunqSum, for the exported histogram
}

// Point is the compact form of a sample kept in a container's history: the
// figures the estimator and the QoS controllers look back at, in plain
// values (about 150 bytes, against about 1 KB for a Usage with its Stats),
// so that 50 containers with 600 points each cost a few MB. Cumulative
// figures let callers compute rates between any two points.
type Point struct {
	// Time is when the sample was taken.
	Time time.Time
	// CPURate is the CPU used (cores) over the interval ending at Time.
	CPURate float64
	// CPUSecs and ThrottledSecs are cumulative CPU time and CFS throttled time.
	CPUSecs, ThrottledSecs float64
	// MemRSS, MemCache and MemUsage are memory in bytes at Time (see
	// ResourceStatistics mem_rss_bytes and mem_cache_bytes, Usage.MemUsage).
	MemRSS, MemCache, MemUsage uint64
	// RunqP50 and RunqP99 are over the interval ending at Time (eBPF).
	RunqP50, RunqP99 time.Duration
	// DelayedByRevocableSecs is cumulative (eBPF).
	DelayedByRevocableSecs float64
	// CPUPressureSecs, MemoryPressureSecs and IOPressureSecs are cumulative
	// PSI "some" stall times.
	CPUPressureSecs, MemoryPressureSecs, IOPressureSecs float64
	// OOMEvents is cumulative.
	OOMEvents uint64
	// NetTxMbps is egress over the interval ending at Time (eBPF).
	NetTxMbps float64
}

// pointOf compacts u.
func pointOf(u Usage) Point {
	st := u.Stats
	return Point{
		Time: u.Time, CPURate: u.CPURate, CPUSecs: st.CpusUsageSecs, ThrottledSecs: st.CpusThrottledTimeSecs,
		MemRSS: st.MemRssBytes, MemCache: st.MemCacheBytes, MemUsage: u.MemUsage,
		RunqP50: u.RunqP50, RunqP99: u.RunqP99, DelayedByRevocableSecs: st.DelayedByRevocableSecs,
		CPUPressureSecs: st.GetCpuPressure().GetSomeTotalSecs(), MemoryPressureSecs: st.GetMemoryPressure().GetSomeTotalSecs(),
		IOPressureSecs: st.GetIoPressure().GetSomeTotalSecs(), OOMEvents: st.OomEvents, NetTxMbps: u.NetTxMbps,
	}
}

// Monitor samples containers' and the node's resource usage. Its methods
// are safe for concurrent use; Sample calls are serialised.
type Monitor struct {
	cfg     Config
	log     *slog.Logger
	layout  cgroups.Layout
	proc    procfs.FS
	metrics *collector

	// sampleMu serialises passes and guards what only the sampler touches:
	// each container's open files and previous values, retired, buf, node
	// baselines.
	sampleMu      sync.Mutex
	buf           []byte
	deltas        []uint64
	retired       []*container
	prevNode      baseline  // for the node's CPU rate
	nodeSampledAt time.Time // when the node was last sampled

	// mu guards the container set and what is published.
	mu         sync.RWMutex
	containers map[string]*container
	node       Usage
	lastPass   time.Duration
	passes     uint64
}

// container is the monitor's record of one target.
type container struct {
	// Set at creation, then read-only.
	id     string
	paths  cgroups.Paths
	hybrid bool

	// Guarded by Monitor.mu.
	target  Target
	history []Point // ring of at most Config.History points
	next    int     // where the next point goes once history is full
	latest  Usage
	present bool // latest is valid

	// Guarded by Monitor.sampleMu.
	files        containerFiles
	cgroupID     uint64
	baseline     baseline
	buckets      []uint64 // previous eBPF run-queue buckets
	bucketsValid bool     // buckets are from the previous pass
	net          netBaseline
}

// netBaseline is what the previous eBPF sample of a container left for the
// network figures over the interval.
type netBaseline struct {
	valid                           bool
	time                            time.Time
	txBytes, rxBytes, txPackets, rt uint64
	rtt                             []uint64
}

// containerFiles are a container's control files. Unused ones have an
// empty path.
type containerFiles struct {
	cpuStat      controlFile // v2 tree cpu.stat: usage, user, system (both layouts); throttling on v2
	cpuV1Stat    controlFile // hybrid: v1 cpu.stat (nr_periods, nr_throttled, throttled_time ns)
	cpuacctUsage controlFile // hybrid fallback without a v2 cpu.stat: cpuacct.usage (ns)
	cpuacctStat  controlFile // hybrid fallback: cpuacct.stat (user, system in USER_HZ)
	memUsage     controlFile // memory.current | memory.usage_in_bytes
	memStat      controlFile // memory.stat
	memLimit     controlFile // memory.max | memory.limit_in_bytes
	memOOM       controlFile // memory.events | memory.oom_control
	cpuPressure  controlFile
	memPressure  controlFile
	ioPressure   controlFile
}

func (f *containerFiles) all() []*controlFile {
	return []*controlFile{&f.cpuStat, &f.cpuV1Stat, &f.cpuacctUsage, &f.cpuacctStat, &f.memUsage,
		&f.memStat, &f.memLimit, &f.memOOM, &f.cpuPressure, &f.memPressure, &f.ioPressure}
}

// baseline is what the previous sample of a container left for the
// interval computations.
type baseline struct {
	valid     bool
	time      time.Time
	usageSecs float64
}

// userHZ is the unit of cpuacct.stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// New returns a Monitor for cfg. It opens nothing yet; errors are about the
// configuration (unknown mode, no procfs at ProcRoot, layout detection).
func New(cfg Config) (*Monitor, error) {
	if cfg.CgroupMountpoint == "" {
		cfg.CgroupMountpoint = "/sys/fs/cgroup"
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Interval < 10*time.Millisecond {
		return nil, fmt.Errorf("sampling interval %v is below 10ms", cfg.Interval)
	}
	if cfg.NodeInterval <= 0 {
		cfg.NodeInterval = max(cfg.Interval, time.Second)
	}
	if cfg.History <= 0 {
		cfg.History = 600
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	mount := filepath.Clean(cfg.CgroupMountpoint)
	var layout cgroups.Layout
	switch cfg.Mode {
	case string(cgroups.ModeV2):
		layout = cgroups.Layout{Mode: cgroups.ModeV2, Mountpoint: mount, Unified: mount}
	case string(cgroups.ModeHybrid):
		layout = cgroups.Layout{Mode: cgroups.ModeHybrid, Mountpoint: mount, Unified: filepath.Join(mount, "unified"),
			CPU: filepath.Join(mount, "cpu"), Memory: filepath.Join(mount, "memory")}
	case "":
		var err error
		if layout, err = cgroups.Detect(mount); err != nil {
			return nil, fmt.Errorf("detect cgroup layout: %w", err)
		}
		cfg.Mode = string(layout.Mode)
	default:
		return nil, fmt.Errorf("unknown cgroup mode %q: want \"v2\" or \"hybrid\"", cfg.Mode)
	}
	proc, err := procfs.NewFS(cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("open procfs at %s: %w", cfg.ProcRoot, err)
	}
	m := &Monitor{
		cfg:        cfg,
		log:        cfg.Logger,
		layout:     layout,
		proc:       proc,
		buf:        make([]byte, 8<<10),
		containers: make(map[string]*container),
	}
	m.metrics = newCollector(m)
	return m, nil
}

// Mode returns the cgroup layout the monitor reads ("v2" or "hybrid").
func (m *Monitor) Mode() string { return m.cfg.Mode }

// SetTargets replaces the set of containers to measure. Containers no
// longer listed are forgotten (history included) and their files closed by
// the next pass; new ones are first sampled by the next pass. A target
// whose CgroupPath changed starts afresh; other field changes (CPULimit,
// TaskID, ...) apply from the next pass and keep the history.
func (m *Monitor) SetTargets(targets []Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := make(map[string]bool, len(targets))
	for _, t := range targets {
		if err := cgroups.ValidateRoot(t.CgroupPath); err != nil || t.ID == "" {
			m.log.Warn("monitor: ignoring target", "container", t.ID, "cgroup", t.CgroupPath)
			continue
		}
		keep[t.ID] = true
		if c, ok := m.containers[t.ID]; ok && c.target.CgroupPath == t.CgroupPath {
			c.target = t
			continue
		} else if ok {
			m.retired = append(m.retired, c)
		}
		m.containers[t.ID] = m.newContainer(t)
	}
	for id, c := range m.containers {
		if !keep[id] {
			delete(m.containers, id)
			m.retired = append(m.retired, c)
		}
	}
}

// newContainer lays out a container's files for the host's layout.
func (m *Monitor) newContainer(t Target) *container {
	p := m.layout.PathsOf(t.CgroupPath)
	c := &container{id: t.ID, paths: p, target: t, hybrid: m.layout.Mode == cgroups.ModeHybrid}
	f := &c.files
	in := func(dir, name string) controlFile { return controlFile{path: filepath.Join(dir, name)} }
	f.cpuStat = in(p.Unified, "cpu.stat")
	f.cpuPressure = in(p.Unified, "cpu.pressure")
	f.memPressure = in(p.Unified, "memory.pressure")
	f.ioPressure = in(p.Unified, "io.pressure")
	if c.hybrid {
		f.cpuV1Stat = in(p.CPU, "cpu.stat")
		cpuacct := filepath.Join(m.layout.Mountpoint, "cpuacct", t.CgroupPath)
		f.cpuacctUsage = in(cpuacct, "cpuacct.usage")
		f.cpuacctStat = in(cpuacct, "cpuacct.stat")
		f.memUsage = in(p.Memory, "memory.usage_in_bytes")
		f.memStat = in(p.Memory, "memory.stat")
		f.memLimit = in(p.Memory, "memory.limit_in_bytes")
		f.memOOM = in(p.Memory, "memory.oom_control")
	} else {
		f.memUsage = in(p.Unified, "memory.current")
		f.memStat = in(p.Unified, "memory.stat")
		f.memLimit = in(p.Unified, "memory.max")
		f.memOOM = in(p.Unified, "memory.events")
	}
	return c
}

// job is one container to sample in a pass, with the target as it was when
// the pass began.
type job struct {
	c      *container
	target Target
	usage  Usage
	err    error // errVanished: dropped from the pass
}

// Sample takes one sample of every target and of the node, stamped now. A
// container whose cgroup is gone is dropped (its history forgotten) without
// an error; it is measured afresh if its cgroup comes back while it is
// still a target. Missing optional files (no PSI, no memory controller)
// leave their fields zero. The error joins what could not be read (node
// figures, eBPF lookups, unreadable files); every figure that could be read
// is published regardless.
func (m *Monitor) Sample(now time.Time) error {
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	start := time.Now()

	m.mu.Lock()
	retired := m.retired
	m.retired = nil
	jobs := make([]job, 0, len(m.containers))
	for _, c := range m.containers {
		jobs = append(jobs, job{c: c, target: c.target})
	}
	m.mu.Unlock()
	for _, c := range retired {
		c.closeFiles()
	}

	var errs []error
	var node Usage
	last := m.nodeSampledAt
	sampleNode := last.IsZero() || now.Sub(last) >= m.cfg.NodeInterval || now.Before(last)
	if sampleNode {
		m.nodeSampledAt = now
		var err error
		if node, err = m.sampleNode(now); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range jobs {
		j := &jobs[i]
		j.usage, j.err = m.sampleContainer(j.c, j.target, now)
		if j.err != nil && !errors.Is(j.err, errVanished) {
			errs = append(errs, fmt.Errorf("container %s: %w", j.c.id, j.err))
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if sampleNode {
		m.node = node
	}
	for i := range jobs {
		j := &jobs[i]
		if m.containers[j.c.id] != j.c {
			continue // removed or replaced during the pass
		}
		if errors.Is(j.err, errVanished) {
			j.c.forget()
			continue
		}
		if j.usage.Stats != nil {
			j.c.publish(j.usage, m.cfg.History)
		}
	}
	m.lastPass = time.Since(start)
	m.passes++
	return errors.Join(errs...)
}

// Run samples every Config.Interval until ctx ends, then closes the files
// it opened and returns nil. Failed reads are logged (once per distinct
// error message in a row), never fatal.
func (m *Monitor) Run(ctx context.Context) error {
	defer m.Close()
	ticker := time.NewTicker(m.cfg.Interval)
	defer ticker.Stop()
	var lastErr string
	for {
		err := m.Sample(m.cfg.Now())
		switch {
		case err == nil && lastErr != "":
			m.log.Info("monitor: sampling recovered")
			lastErr = ""
		case err != nil && err.Error() != lastErr:
			lastErr = err.Error()
			m.log.Warn("monitor: incomplete sample", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Close closes the control files kept open between passes. The Monitor
// stays usable: the next Sample reopens what it needs.
func (m *Monitor) Close() error {
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.containers {
		c.closeFiles()
	}
	for _, c := range m.retired {
		c.closeFiles()
	}
	m.retired = nil
	return nil
}

// Latest returns the container's latest sample.
func (m *Monitor) Latest(id string) (Usage, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c, ok := m.containers[id]
	if !ok || !c.present {
		return Usage{}, false
	}
	return c.latest, true
}

// Usages returns the latest sample of every container that has one, sorted
// by container id.
func (m *Monitor) Usages() []Usage {
	m.mu.RLock()
	out := make([]Usage, 0, len(m.containers))
	for _, c := range m.containers {
		if c.present {
			out = append(out, c.latest)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Usage) int { return strings.Compare(a.ContainerID, b.ContainerID) })
	return out
}

// History returns the container's kept points, oldest first (at most
// Config.History), appended to dst (which may be nil; pass dst[:0] to
// reuse a buffer between calls).
func (m *Monitor) History(dst []Point, id string) []Point {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c, ok := m.containers[id]
	if !ok {
		return dst
	}
	dst = append(dst, c.history[c.next:]...)
	return append(dst, c.history[:c.next]...)
}

// HistorySince appends to dst the container's kept points stamped after
// after, oldest first: callers that keep what they read copy only what is
// new since their last call.
func (m *Monitor) HistorySince(dst []Point, id string, after time.Time) []Point {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c, ok := m.containers[id]
	if !ok {
		return dst
	}
	n := len(c.history)
	newer := 0 // points at the ring's end newer than after
	for newer < n && c.history[(c.next+n-1-newer)%n].Time.After(after) {
		newer++
	}
	for i := n - newer; i < n; i++ {
		dst = append(dst, c.history[(c.next+i)%n])
	}
	return dst
}

// HistoryLimit is how many points History keeps per container.
func (m *Monitor) HistoryLimit() int { return m.cfg.History }

// Node returns the node's latest sample (zero before the first pass).
func (m *Monitor) Node() Usage {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.node
}

// publish records u as the latest sample and appends it to the bounded
// history. Called with Monitor.mu held.
func (c *container) publish(u Usage, limit int) {
	c.latest, c.present = u, true
	if len(c.history) < limit {
		c.history = append(c.history, pointOf(u))
		return // next stays 0: the ring is in order until full
	}
	c.history[c.next] = pointOf(u)
	c.next = (c.next + 1) % limit
}

// forget drops a vanished container's samples. Called with Monitor.mu held;
// the sampler already reset its own state.
func (c *container) forget() {
	c.latest, c.present = Usage{}, false
	c.history, c.next = nil, 0
}

func (c *container) closeFiles() {
	for _, f := range c.files.all() {
		f.close()
	}
}

// resetSampler closes the container's files and forgets its baselines, so
// a cgroup that comes back is read afresh.
func (c *container) resetSampler() {
	c.closeFiles()
	for _, f := range c.files.all() {
		f.absent = false
	}
	c.cgroupID = 0
	c.baseline = baseline{}
	c.buckets, c.bucketsValid = c.buckets[:0], false
	c.net = netBaseline{}
}

// load reads one control file of c. It returns nil data for a file the
// cgroup does not have, and errVanished when the cgroup itself is gone: its
// directory in the v2 tree, which exists in both layouts, is the witness
// (a hierarchy the containerizer does not populate, such as a separately
// mounted v1 cpuacct, only makes its files absent).
func (m *Monitor) load(c *container, f *controlFile) ([]byte, error) {
	data, err := f.read(&m.buf)
	if errors.Is(err, errNotExist) {
		if _, statErr := os.Stat(c.paths.Unified); statErr != nil {
			return nil, errVanished
		}
		f.absent = true
		return nil, nil
	}
	return data, err
}

// sampleContainer reads one container. Called with sampleMu held. A file
// that cannot be read fails the whole sample (zero Usage: nothing is
// published, so no interval is computed against half a sample); an eBPF
// failure only leaves the eBPF fields unset.
func (m *Monitor) sampleContainer(c *container, t Target, now time.Time) (u Usage, err error) {
	defer func() {
		if errors.Is(err, errVanished) {
			c.resetSampler()
		}
	}()
	st := &slacklinev1.ResourceStatistics{Timestamp: timestamppb.New(now), CpusLimit: t.CPULimit}
	u = Usage{ContainerID: t.ID, TaskID: t.TaskID, Revocable: t.Revocable, Time: now, Stats: st}
	var errs []error
	f := &c.files

	// CPU time: the v2 tree's cpu.stat exists in both layouts (core
	// statistics need no controller).
	data, err := m.load(c, &f.cpuStat)
	if err != nil {
		return Usage{}, err
	}
	var usageUsec, userUsec, systemUsec uint64
	forEachKey(data, func(key []byte, v uint64) {
		switch string(key) {
		case "usage_usec":
			usageUsec = v
		case "user_usec":
			userUsec = v
		case "system_usec":
			systemUsec = v
		case "nr_periods":
			st.CpusNrPeriods = v
		case "nr_throttled":
			st.CpusNrThrottled = v
		case "throttled_usec":
			st.CpusThrottledTimeSecs = float64(v) / 1e6
		}
	})
	st.CpusUsageSecs = float64(usageUsec) / 1e6
	st.CpusUserTimeSecs = float64(userUsec) / 1e6
	st.CpusSystemTimeSecs = float64(systemUsec) / 1e6
	if c.hybrid {
		if data == nil { // old kernel without core cpu.stat in the v2 tree
			if data, err = m.load(c, &f.cpuacctUsage); err != nil {
				return Usage{}, err
			}
			if ns, ok := parseUint(data); ok {
				st.CpusUsageSecs = float64(ns) / 1e9
			}
			if data, err = m.load(c, &f.cpuacctStat); err != nil {
				return Usage{}, err
			}
			forEachKey(data, func(key []byte, v uint64) {
				switch string(key) {
				case "user":
					st.CpusUserTimeSecs = float64(v) / userHZ
				case "system":
					st.CpusSystemTimeSecs = float64(v) / userHZ
				}
			})
		}
		if data, err = m.load(c, &f.cpuV1Stat); err != nil {
			return Usage{}, err
		}
		forEachKey(data, func(key []byte, v uint64) {
			switch string(key) {
			case "nr_periods":
				st.CpusNrPeriods = v
			case "nr_throttled":
				st.CpusNrThrottled = v
			case "throttled_time":
				st.CpusThrottledTimeSecs = float64(v) / 1e9
			}
		})
	}

	// Memory.
	if data, err = m.load(c, &f.memUsage); err != nil {
		return Usage{}, err
	}
	u.MemUsage, _ = parseUint(data)
	if data, err = m.load(c, &f.memStat); err != nil {
		return Usage{}, err
	}
	rssKey, cacheKey, activeAnonKey, inactiveAnonKey := "anon", "file", "active_anon", "inactive_anon"
	if c.hybrid {
		rssKey, cacheKey, activeAnonKey, inactiveAnonKey = "total_rss", "total_cache", "total_active_anon", "total_inactive_anon"
	}
	forEachKey(data, func(key []byte, v uint64) {
		switch string(key) {
		case rssKey:
			st.MemRssBytes = v
		case cacheKey:
			st.MemCacheBytes = v
		case activeAnonKey, inactiveAnonKey:
			st.MemAnonBytes += v
		}
	})
	if data, err = m.load(c, &f.memLimit); err != nil {
		return Usage{}, err
	}
	if st.MemLimitBytes = parseLimit(data); st.MemLimitBytes == 0 {
		st.MemLimitBytes = t.MemLimit
	}
	if data, err = m.load(c, &f.memOOM); err != nil {
		return Usage{}, err
	}
	forEachKey(data, func(key []byte, v uint64) {
		if string(key) == "oom_kill" {
			st.OomEvents = v
		}
	})

	// Pressure (the v2 tree in both layouts).
	for _, p := range []struct {
		file *controlFile
		dst  **slacklinev1.Pressure
	}{{&f.cpuPressure, &st.CpuPressure}, {&f.memPressure, &st.MemoryPressure}, {&f.ioPressure, &st.IoPressure}} {
		if data, err = m.load(c, p.file); err != nil {
			return Usage{}, err
		}
		if data != nil {
			*p.dst = pressure(parsePressure(data))
		}
	}

	// eBPF.
	if m.cfg.EBPF != nil {
		if err := m.sampleEBPF(c, t, &u, now); err != nil {
			errs = append(errs, err)
		}
	}

	// Interval figures.
	if b := c.baseline; b.valid && now.After(b.time) && st.CpusUsageSecs >= b.usageSecs {
		u.CPURate = (st.CpusUsageSecs - b.usageSecs) / now.Sub(b.time).Seconds()
		st.CpusRate = u.CPURate
	}
	c.baseline = baseline{valid: true, time: now, usageSecs: st.CpusUsageSecs}
	return u, errors.Join(errs...)
}

// sampleEBPF merges the eBPF figures of c into u.
func (m *Monitor) sampleEBPF(c *container, t Target, u *Usage, now time.Time) error {
	id := t.CgroupID
	if id == 0 {
		if c.cgroupID == 0 {
			fi, err := os.Stat(c.paths.Unified)
			if err != nil {
				return fmt.Errorf("cgroup id of %s: %w", c.paths.Unified, err)
			}
			if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
				c.cgroupID = sys.Ino
			}
		}
		id = c.cgroupID
	}
	e, err := m.cfg.EBPF.Stats(id)
	if err != nil {
		c.bucketsValid, c.net.valid = false, false
		return fmt.Errorf("ebpf stats of cgroup %d: %w", id, err)
	}
	st := u.Stats
	u.EBPF = true
	st.OncpuSecs = e.OnCPU.Seconds()
	st.DelayedByRevocableSecs = e.DelayedByRevocable.Seconds()
	st.NetRxBytes, st.NetRxPackets = e.NetRxBytes, e.NetRxPackets
	st.NetTxBytes, st.NetTxPackets = e.NetTxBytes, e.NetTxPackets
	st.MemReclaimStallSecs = e.ReclaimStall.Seconds()
	st.OomEvents = max(st.OomEvents, e.OOMKills)

	buckets := e.RunqBuckets
	for len(buckets) > 0 && buckets[len(buckets)-1] == 0 {
		buckets = buckets[:len(buckets)-1]
	}
	rq := &slacklinev1.RunQueueLatency{BucketsLog2Ns: slices.Clone(buckets), Wakeups: e.Wakeups, TotalSecs: e.RunqSum.Seconds()}
	st.Runqueue = rq
	if c.bucketsValid {
		m.deltas = bucketDeltas(m.deltas[:0], c.buckets, buckets)
		u.RunqP50 = bucketQuantile(m.deltas, 0.50)
		u.RunqP99 = bucketQuantile(m.deltas, 0.99)
		rq.P50Seconds, rq.P99Seconds = u.RunqP50.Seconds(), u.RunqP99.Seconds()
	}
	c.buckets, c.bucketsValid = append(c.buckets[:0], buckets...), true
	u.runqSum = e.RunqSum
	m.sampleNet(c, u, e, now)
	return nil
}

// sampleNet computes the network figures over the interval since the
// previous eBPF sample: rates, packets, and TCP round-trip percentiles
// and retransmissions. Counters that went backwards (the cgroup's entries
// were recreated) restart the interval.
func (m *Monitor) sampleNet(c *container, u *Usage, e EBPFStats, now time.Time) {
	st := u.Stats
	rtt := e.TCPRTTBuckets
	for len(rtt) > 0 && rtt[len(rtt)-1] == 0 {
		rtt = rtt[:len(rtt)-1]
	}
	if rtt != nil || e.TCPRTTCount > 0 || e.TCPRetransmits > 0 {
		st.Tcp = &slacklinev1.TcpStatistics{RttBucketsLog2Us: slices.Clone(rtt), RttSamples: e.TCPRTTCount, Retransmits: e.TCPRetransmits}
	}
	b := &c.net
	if b.valid && now.After(b.time) && e.NetTxBytes >= b.txBytes && e.NetRxBytes >= b.rxBytes &&
		e.NetTxPackets >= b.txPackets && e.TCPRetransmits >= b.rt {
		secs := now.Sub(b.time).Seconds()
		u.NetTxMbps = float64(e.NetTxBytes-b.txBytes) * 8 / 1e6 / secs
		u.NetRxMbps = float64(e.NetRxBytes-b.rxBytes) * 8 / 1e6 / secs
		u.NetTxPackets, u.TCPRetransmits = e.NetTxPackets-b.txPackets, e.TCPRetransmits-b.rt
		st.NetTxMbps, st.NetRxMbps = u.NetTxMbps, u.NetRxMbps
		if st.Tcp != nil {
			// bucketQuantile reads bucket i as [2^i, 2^(i+1)) ns; these are µs.
			m.deltas = bucketDeltas(m.deltas[:0], b.rtt, rtt)
			u.TCPRTTP50 = bucketQuantile(m.deltas, 0.50) * 1000
			u.TCPRTTP99 = bucketQuantile(m.deltas, 0.99) * 1000
			st.Tcp.RttP50Seconds, st.Tcp.RttP99Seconds = u.TCPRTTP50.Seconds(), u.TCPRTTP99.Seconds()
		}
	}
	*b = netBaseline{valid: true, time: now, txBytes: e.NetTxBytes, rxBytes: e.NetRxBytes, txPackets: e.NetTxPackets,
		rt: e.TCPRetransmits, rtt: append(b.rtt[:0], rtt...)}
}

func pressure(some, full psiLine) *slacklinev1.Pressure {
	return &slacklinev1.Pressure{
		SomeAvg10: some.avg10, SomeAvg60: some.avg60, SomeAvg300: some.avg300, SomeTotalSecs: float64(some.totalUsec) / 1e6,
		FullAvg10: full.avg10, FullAvg60: full.avg60, FullAvg300: full.avg300, FullTotalSecs: float64(full.totalUsec) / 1e6,
	}
}
