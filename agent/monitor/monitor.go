package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/tick"
)

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
	// CgroupRoot is the agent's cgroup subtree relative to every hierarchy
	// (the agent's --cgroup-root); empty: none. When it or an ancestor has
	// a memory limit below the host's memory, the node's memory figures
	// are bounded by the lowest such limit (see the package doc).
	CgroupRoot string
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
	// IdleRefresh is the safety net's cadence (#29): how long at most a
	// container that eBPF says has not run has its cpu.stat and
	// memory.current repeated before they are read again anyway, which
	// finds eBPF's blind spots (tasks in a child cgroup), a removed cgroup,
	// and memory reclaimed or charged while it slept within it. The reads
	// fall in the pass after each multiple of IdleRefresh on the Unix time
	// line (tick.Crossed), every container's in the same pass. Default (0) 1 s; a
	// container eBPF cannot see (no scheduler figures), or that was found
	// blind, is read at every pass whatever it is.
	IdleRefresh time.Duration
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
	// must not be modified. A sample repeated from the previous pass (an
	// idle container whose figures did not move, EBPFChanges) shares that
	// sample's Stats, whose Timestamp is then the earlier pass's; Usages
	// returns them stamped with Time.
	Stats *slacklinev1.ResourceStatistics
	// CPURate is CPU usage in cores between the previous sample and this
	// one (0 on a container's first sample); also Stats.CpusRate.
	CPURate float64
	// RunqP50 and RunqP99 are run-queue latency percentiles over the same
	// interval, from the eBPF histogram (0 without eBPF, on the first
	// sample, or when no wakeup happened); also in Stats.Runqueue.
	RunqP50, RunqP99 time.Duration
	// Syncs counts the container's synchronous writes (fsync, fdatasync,
	// O_SYNC writes) over the same interval and SyncP99 is their p99
	// latency (eBPF; 0 without eBPF, on the first sample or without one).
	Syncs   uint64
	SyncP99 time.Duration
	// BlockIOs counts the block requests the container's tasks submitted
	// that completed over the same interval and BlockP99 is their p99
	// latency, start to completion (eBPF; 0 without eBPF, on the first
	// sample or without one).
	BlockIOs uint64
	BlockP99 time.Duration
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

// RunqSum returns the container's cumulative run-queue wait as eBPF
// counted it at Time (EBPFStats.RunqSum): meaningful only when EBPF is
// set. The QoS loop takes its waits from it rather than reading the eBPF
// counters again (#29).
func (u Usage) RunqSum() time.Duration { return u.runqSum }

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
	// MemRSS, MemCache, MemWorkingSet and MemUsage are memory in bytes at
	// Time (see ResourceStatistics mem_rss_bytes, mem_cache_bytes and
	// mem_working_set_bytes, Usage.MemUsage).
	MemRSS, MemCache, MemWorkingSet, MemUsage uint64
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
		MemRSS: st.MemRssBytes, MemCache: st.MemCacheBytes, MemWorkingSet: st.MemWorkingSetBytes, MemUsage: u.MemUsage,
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
	host    host
	sources []source // chosen by New from the layout and Config.EBPF
	proc    procfs.FS
	metrics *collector

	// sampleMu serialises passes and guards what only the sampler touches:
	// each container's samplers and CPU baseline, retired, scratch, node
	// baselines.
	sampleMu      sync.Mutex
	scratch       *scratch
	retired       []*container
	published     []Usage    // reused by each pass for the observer
	jobs          []job      // reused by each pass (under sampleMu)
	prevNode      baseline   // for the node's CPU rate
	nodeSampledAt time.Time  // when the node was last sampled
	nodeBound     *nodeBound // the limits bounding the node's memory (nil: none looked for)
	// noRepeatHorizon makes repeats check every sampler at every pass
	// (container.repeatUntil unused): tests compare the two.
	noRepeatHorizon bool

	// mu guards the container set and what is published.
	mu         sync.RWMutex
	containers map[string]*container
	node       Usage
	lastPass   time.Duration
	passes     uint64
	repeated   uint64 // container samples repeated (Monitor.repeats)
	// quiet is whether the latest pass changed nothing, activeAt the
	// latest pass at which something did (QuietSince), targetsChanged
	// whether targets came or went since the last pass.
	quiet          bool
	activeAt       time.Time
	targetsChanged bool

	// observer is called after each pass (Observe).
	observer atomic.Pointer[func(time.Time, []Usage)]
}

// container is the monitor's record of one target.
type container struct {
	// Guarded by Monitor.sampleMu. prev is the container's previous
	// sample, and prevTarget the target it was taken for, when that
	// sample was quiet (Usage.quiet) and had every source's figures (quiet
	// false otherwise): what Monitor.repeats may repeat. repeatUntil, when
	// set, is when the run of repeats of prev that Monitor.repeats last
	// checked in full may end (the earliest of its samplers'
	// repeatsUntil), and repeatID the cgroup id it asked eBPF about; a
	// sample resets them. They come first in the struct, together: a
	// repeated container loads the cache lines they share, not its
	// samplers' (#29).
	quiet       bool
	repeatID    uint64
	repeatUntil time.Time
	prevTarget  Target
	prev        Usage
	samplers    []sampler // one per Monitor.sources, in the same order
	baseline    baseline  // for the CPU rate

	// Set at creation, then read-only.
	id     string
	cgroup string // Target.CgroupPath

	// Guarded by Monitor.mu.
	target  Target
	history []Point // ring of at most Config.History points
	next    int     // where the next point goes once history is full
	latest  Usage
	present bool // latest is valid
}

// baseline is what the previous sample of a container left for the
// interval computations.
type baseline struct {
	valid     bool
	time      time.Time
	usageSecs float64
}

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
	case string(cgroups.ModeV2), string(cgroups.ModeHybrid):
		layout = layoutOf(cgroups.Mode(cfg.Mode), mount)
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
	if cfg.IdleRefresh < 0 {
		return nil, fmt.Errorf("IdleRefresh: must not be negative, got %v", cfg.IdleRefresh)
	}
	bound, err := newNodeBound(layout, cfg.CgroupRoot)
	if err != nil {
		return nil, err
	}
	h := host{layout: layout, ebpf: cfg.EBPF, idleRefresh: cfg.IdleRefresh}
	m := &Monitor{
		cfg:        cfg,
		log:        cfg.Logger,
		host:       h,
		sources:    chooseSources(&h),
		proc:       proc,
		scratch:    newScratch(),
		containers: make(map[string]*container),
		nodeBound:  bound,
	}
	m.metrics = newCollector(m)
	m.log.Info("monitor: sources chosen", "mode", cfg.Mode, "sources", m.Sources())
	return m, nil
}

// Mode returns the cgroup layout the monitor reads ("v2" or "hybrid").
func (m *Monitor) Mode() string { return m.cfg.Mode }

// Sources returns the names of the sources each container is sampled
// from, in sampling order, as New chose them from the cgroup layout and
// Config.EBPF: "v2-cpu" or "hybrid-cpu", "v2-memory" or "hybrid-memory",
// "psi", and "ebpf" when Config.EBPF is set.
func (m *Monitor) Sources() []string {
	names := make([]string, len(m.sources))
	for i, s := range m.sources {
		names[i] = s.name
	}
	return names
}

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
		m.targetsChanged = true
	}
	for id, c := range m.containers {
		if !keep[id] {
			delete(m.containers, id)
			m.retired = append(m.retired, c)
		}
	}
}

// newContainer returns the record of a new target.
func (m *Monitor) newContainer(t Target) *container {
	return &container{id: t.ID, cgroup: t.CgroupPath, target: t, samplers: m.newSamplers(t.CgroupPath)}
}

// newSamplers returns a container's samplers, one per chosen source.
func (m *Monitor) newSamplers(rel string) []sampler {
	samplers := make([]sampler, len(m.sources))
	for i, s := range m.sources {
		samplers[i] = s.newSampler(&m.host, rel)
	}
	return samplers
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
	jobs := m.jobs[:0]
	for _, c := range m.containers {
		jobs = append(jobs, job{c: c, target: c.target})
	}
	m.mu.Unlock()
	for _, c := range retired {
		c.closeFiles()
	}

	var errs []error
	repeated := 0
	if p, ok := m.cfg.EBPF.(EBPFPass); ok && len(jobs) > 0 {
		if err := p.BeginPass(); err != nil {
			errs = append(errs, fmt.Errorf("ebpf: %w", err))
		}
	}
	var node Usage
	last := m.nodeSampledAt
	sampleNode := last.IsZero() || tick.Crossed(last, now, m.cfg.NodeInterval) || now.Before(last)
	if sampleNode {
		m.nodeSampledAt = now
		var err error
		if node, err = m.sampleNode(now); err != nil {
			errs = append(errs, err)
		}
	}
	m.scratch.timestamp = timestamppb.New(now)
	changes, _ := m.cfg.EBPF.(EBPFChanges)
	for i := range jobs {
		j := &jobs[i]
		if m.repeats(changes, j.c, &j.target, now) {
			m.repeat(j, now)
			repeated++
			continue
		}
		j.err = m.sampleContainer(j, now)
		if j.err != nil && !errors.Is(j.err, errVanished) {
			errs = append(errs, fmt.Errorf("container %s: %w", j.c.id, j.err))
		}
	}

	observe := m.observer.Load()
	published := m.published[:0]
	active := false // a sample with activity, or a container gone
	m.mu.Lock()
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
			active = true
			continue
		}
		if j.usage.Stats != nil {
			active = active || !j.usage.quiet()
			j.c.publish(j.usage, m.cfg.History)
			if observe != nil {
				published = append(published, j.usage)
			}
		}
	}
	m.lastPass = time.Since(start)
	m.passes++
	m.repeated += uint64(repeated)
	m.quiet = repeated == len(jobs) && !sampleNode && len(retired) == 0
	if active || m.targetsChanged || len(retired) > 0 || m.activeAt.IsZero() || now.Before(m.activeAt) {
		m.activeAt = now
	}
	m.targetsChanged = false
	m.mu.Unlock()
	if observe != nil {
		(*observe)(now, published)
	}
	clear(published) // drop the Stats until the next pass
	m.published = published
	clear(jobs) // and the containers, targets and samples
	m.jobs = jobs
	return errors.Join(errs...)
}

// QuietSince reports, when the latest pass changed nothing that it
// published (#29: every container's sample repeated its previous one,
// Monitor.repeats, as eBPF saw no activity and no file was due; the node
// was not sampled; no target came or went), since when the containers
// have been idle: the latest pass that published a sample with activity
// (any interval figure not 0: CPU, run-queue waits, I/O, network), lost
// a container or followed a change of targets. It returns the zero time
// when the latest pass changed something. An observer reads it for its
// own pass: a quiet pass's samples are the previous pass's at a later
// time, so work that only recomputes from them can wait, a while after
// the last activity (the estimate and QoS loops: agent.Config.QuietDeferMax).
func (m *Monitor) QuietSince() time.Time {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.quiet {
		return time.Time{}
	}
	return m.activeAt
}

// Observe registers f to be called after each pass with the pass's time
// and the samples it published (shared: f must not modify their Stats,
// and the slice is reused once f returns), from the goroutine that called
// Sample, with no lock held; a later call replaces f. The agent's history
// is recorded so.
func (m *Monitor) Observe(f func(now time.Time, published []Usage)) {
	m.observer.Store(&f)
}

// Interval returns the sampling period Run uses.
func (m *Monitor) Interval() time.Duration { return m.cfg.Interval }

// Run samples every Config.Interval until ctx ends, then closes the files
// it opened and returns nil. Failed reads are logged (once per distinct
// error message in a row), never fatal.
func (m *Monitor) Run(ctx context.Context) error {
	defer m.Close()
	// On the agent's shared grid (internal/tick): the estimate loop's
	// timer fires with this one, so the runtime wakes once per period.
	ticker := tick.NewAligned(m.cfg.Interval)
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
			ticker.Next()
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
	if m.nodeBound != nil {
		m.nodeBound.close()
	}
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
// by container id. Each Stats' Timestamp is its sample's Time (a repeated
// sample's shared Stats are copied to be so).
func (m *Monitor) Usages() []Usage { return m.usages(true) }

// usages is Usages; stamp false leaves repeated samples' Stats with the
// Timestamp of the pass that took them (for readers that do not look at
// it).
func (m *Monitor) usages(stamp bool) []Usage {
	m.mu.RLock()
	out := make([]Usage, 0, len(m.containers))
	for _, c := range m.containers {
		if c.present {
			out = append(out, c.latest)
		}
	}
	m.mu.RUnlock()
	for i := range out {
		if u := &out[i]; stamp && u.Stats != nil && u.Stats.Timestamp != nil && !u.Stats.Timestamp.AsTime().Equal(u.Time) {
			st := proto.Clone(u.Stats).(*slacklinev1.ResourceStatistics)
			st.Timestamp = timestamppb.New(u.Time)
			u.Stats = st
		}
	}
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
		if c.history == nil {
			// The whole ring at once (#29): grown by append it was
			// copied and reallocated some ten times in its first
			// minute at 100 ms (a tenth of the agent's CPU with 100
			// new containers, and the garbage collections of the
			// slices left behind); the pages not yet written stay
			// untouched.
			c.history = make([]Point, 0, limit)
		}
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
	for _, s := range c.samplers {
		for _, f := range s.files() {
			f.close()
		}
	}
}

// quiet reports whether every interval figure of u is 0 (and u has eBPF's
// figures): a sample of the same cumulative figures later is then the
// same sample but for its Time.
func (u *Usage) quiet() bool {
	return u.EBPF && u.CPURate == 0 && u.RunqP50 == 0 && u.RunqP99 == 0 && u.Syncs == 0 && u.SyncP99 == 0 &&
		u.BlockIOs == 0 && u.BlockP99 == 0 && u.NetTxMbps == 0 && u.NetRxMbps == 0 && u.NetTxPackets == 0 &&
		u.TCPRTTP50 == 0 && u.TCPRTTP99 == 0 && u.TCPRetransmits == 0
}

// repeats reports whether c's sample at now would repeat its previous one
// (#29), so that nothing need be read: the previous sample was quiet and
// taken for the same target, eBPF (changes, nil without) says the
// cgroup's figures did not move since, and no sampler is due to read a
// file or would find a nonzero interval figure (repeater). Within a run
// of repeats the samplers are asked at its first pass, and again once
// the horizon they gave (c.repeatUntil) has passed. Called with sampleMu
// held.
func (m *Monitor) repeats(changes EBPFChanges, c *container, t *Target, now time.Time) bool {
	if changes == nil || !c.quiet || c.prevTarget != *t || !now.After(c.prev.Time) {
		return false
	}
	if !m.noRepeatHorizon && now.Before(c.repeatUntil) {
		// Within the run checked in full: only eBPF can end it. (The
		// samplers' state, prev and eBPF's activity are as they were
		// then, and now is later: see repeater.repeatsUntil.)
		return changes.Unchanged(c.repeatID)
	}
	e, ok := c.samplers[len(c.samplers)-1].(*ebpfSampler)
	if !ok {
		return false
	}
	id := t.CgroupID
	if id == 0 {
		id = e.cgroupID
	}
	if id == 0 || !changes.Unchanged(id) {
		return false
	}
	var until time.Time
	for _, s := range c.samplers {
		r, ok := s.(repeater)
		if !ok || !r.repeats(now, &c.prev, e.activity) {
			return false
		}
		if u := r.repeatsUntil(now, &c.prev, e.activity); !u.IsZero() && (until.IsZero() || u.Before(until)) {
			until = u
		}
	}
	c.repeatID = id
	c.repeatUntil = until
	if until.IsZero() { // no sampler has a file due: until a sample
		c.repeatUntil = maxTime
	}
	return true
}

// maxTime is a repeatUntil no pass reaches.
var maxTime = time.Unix(1<<62, 0)

// repeat publishes c's previous sample again at now, moving the interval
// baselines to now as sampling it would have: the CPU rate's here, eBPF's
// network baseline when the run of repeats ends (readContainer), so that
// a repeat touches no sampler (#29: a sampler's state is cold after the
// pass's sleep; c.prev.Time keeps when the last repeat was).
func (m *Monitor) repeat(j *job, now time.Time) {
	c := j.c
	j.usage, j.usage.Time = c.prev, now
	c.prev.Time = now
	c.baseline.time = now
}

// sampleContainer reads j's container into j.usage, running its samplers
// in order. Called with sampleMu held. A required source's failure fails
// the whole sample (zero Usage: nothing is published, so no interval is
// computed against half a sample); an optional one's (eBPF) only leaves
// its fields unset. When the cgroup is gone the container's samplers and
// baseline are replaced by fresh ones, so a cgroup that comes back is read
// afresh. (The samplers fill the job in place: a Usage or Target on the
// stack would escape through the interface calls, two allocations per
// container per pass.)
func (m *Monitor) sampleContainer(j *job, now time.Time) error {
	err := m.readContainer(j, now)
	c := j.c
	c.repeatID, c.repeatUntil = 0, time.Time{}
	c.quiet = err == nil && j.usage.Stats != nil && j.usage.quiet()
	if c.quiet {
		c.prev, c.prevTarget = j.usage, j.target
	} else {
		c.prev = Usage{} // drop the Stats
	}
	return err
}

// readContainer is sampleContainer's reading.
func (m *Monitor) readContainer(j *job, now time.Time) error {
	c, t := j.c, &j.target
	st := m.scratch.slabs.newStats()
	st.Timestamp, st.CpusLimit = m.scratch.timestamp, t.CPULimit
	j.usage = Usage{ContainerID: t.ID, TaskID: t.TaskID, Revocable: t.Revocable, Time: now, Stats: st}
	var errs []error
	m.scratch.activity, m.scratch.fetched = activity{}, false
	if e, ok := c.samplers[len(c.samplers)-1].(*ebpfSampler); ok {
		if c.quiet {
			// The previous sample was repeated until c.prev.Time (or
			// taken then): eBPF's baselines move there, as each repeat
			// would have moved them.
			e.repeated(c.prev.Time)
		}
		e.fetch(m.scratch, t) // first: the CPU sampler reads the activity
	}
	for i, s := range c.samplers {
		err := s.sample(m.scratch, t, &j.usage)
		switch {
		case err == nil:
		case errors.Is(err, errVanished):
			c.closeFiles()
			c.samplers, c.baseline = m.newSamplers(c.cgroup), baseline{}
			j.usage = Usage{}
			return errVanished
		case m.sources[i].optional:
			errs = append(errs, err)
		default:
			j.usage = Usage{}
			return err
		}
	}
	if b := c.baseline; b.valid && now.After(b.time) && st.CpusUsageSecs >= b.usageSecs {
		j.usage.CPURate = (st.CpusUsageSecs - b.usageSecs) / now.Sub(b.time).Seconds()
		st.CpusRate = j.usage.CPURate
	}
	c.baseline = baseline{valid: true, time: now, usageSecs: st.CpusUsageSecs}
	return errors.Join(errs...)
}
