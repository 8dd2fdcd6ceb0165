package bpf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Class is how the agent classifies a tracked cgroup; the programs use it to
// tell victims (guaranteed, protected) from culprits (revocable).
type Class uint8

// Classes; the values are shared with the C programs (common.h).
const (
	ClassGuaranteed Class = 1
	ClassRevocable  Class = 2
	ClassProtected  Class = 3
)

// String returns the class name.
func (c Class) String() string {
	switch c {
	case ClassGuaranteed:
		return "guaranteed"
	case ClassRevocable:
		return "revocable"
	case ClassProtected:
		return "protected"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// RunqBuckets is the number of run-queue latency histogram buckets: bucket i
// counts waits in [2^i, 2^(i+1)) ns (bucket 0 also counts 0 ns); the last
// bucket counts everything from 2^31 ns (about 2.1 s) up.
const RunqBuckets = 32

// DefaultMaxCgroups is the number of cgroups a Monitor can track when
// Config.MaxCgroups is 0.
const DefaultMaxCgroups = 4096

// DefaultEventBatchWindow is the agent's Config.EventBatchWindow: well
// under its QoS loop's minimum interval (250 ms), within which events act
// together anyway. The ring buffer (256 KiB, 64 bytes an event) holds 4096
// events: a window of them up to about 80,000 events a second.
const DefaultEventBatchWindow = 50 * time.Millisecond

// Config configures Load.
type Config struct {
	// CgroupRoot is the directory in the v2 hierarchy where the network
	// programs are attached; they count the sockets of every cgroup below it
	// (e.g. /sys/fs/cgroup/unified/slackline on a hybrid host). Empty: no
	// network accounting.
	CgroupRoot string
	// LatencyThreshold: waits of guaranteed and protected tasks at or above
	// it are sent to Events. 0 disables events.
	LatencyThreshold time.Duration
	// EventBatchWindow coalesces events: when Run reads an event it waits
	// this long and then delivers it and every event available after it, so it and its readers wake at most once per window instead
	// of once per event; each event keeps its own Time, and an event waits
	// at most this long more to be delivered. 0 delivers each event as it
	// is read. See DefaultEventBatchWindow.
	EventBatchWindow time.Duration
	// AllCulprits splits guaranteed and protected tasks' waits among every
	// culprit (DelayedBy; see SetAllCulprits), not only revocable ones.
	AllCulprits bool
	// MaxCgroups bounds the number of tracked cgroups (DefaultMaxCgroups if 0).
	MaxCgroups int
	// FullReadInterval bounds how long ReadAll and ReadChanged go without
	// reading every tracked cgroup's counters whatever the changed marks
	// say (changed.go's safety net), on the clock's grid of it: the agent
	// puts it on its monitor's idle refresh, so that both safety nets fall
	// in the same pass. 0: fullReadInterval (1 s).
	FullReadInterval time.Duration
	// Logger receives what could not be loaded or attached (slog.Default if nil).
	Logger *slog.Logger

	// wakeupHooks loads the scheduler's wakeup variant even where the
	// kernel keeps sched_info (tests: export_test.go).
	wakeupHooks bool
}

// CgroupStats are a tracked cgroup's cumulative counters since Track.
type CgroupStats struct {
	// OnCPU is the time the cgroup's tasks ran.
	OnCPU time.Duration
	// Wakeups counts wakeups of the cgroup's tasks, counted when a task
	// goes to sleep (so tasks asleep at the time of reading are counted).
	Wakeups uint64
	// RunqLatency is the histogram of run-queue latencies (time runnable
	// before getting a CPU, after a wakeup or a preemption); see RunqBuckets.
	RunqLatency [RunqBuckets]uint64
	// RunqCount and RunqTotal are the number and sum of those latencies.
	RunqCount uint64
	RunqTotal time.Duration
	// DelayedByRevocable is the part of the run-queue latency during which
	// revocable tasks held the CPU (guaranteed and protected cgroups only).
	DelayedByRevocable time.Duration
	// Network counters of the cgroup's sockets; bytes are IP-layer lengths
	// (no link-layer header).
	NetRxBytes, NetRxPackets, NetTxBytes, NetTxPackets uint64
	// ReclaimStall is the time the cgroup's tasks spent in direct or memcg
	// reclaim; ReclaimCount the number of such stalls.
	ReclaimStall time.Duration
	ReclaimCount uint64
	// OOMKills counts the cgroup's tasks chosen as OOM victims.
	OOMKills uint64
	// SyncWait is the time the cgroup's tasks waited for synchronous
	// writes on ext4 (ext4_sync_file: fsync, fdatasync, msync, O_SYNC writes),
	// SyncCount their number and SyncLatency their histogram (buckets as
	// RunqLatency's).
	SyncWait    time.Duration
	SyncCount   uint64
	SyncLatency [RunqBuckets]uint64
	// BlockWait is the total latency of the block requests the cgroup's
	// tasks submitted, from the request's start (block_io_start, fired in
	// blk_account_io_start once the request has passed blk-throttle and
	// got its tag) to its completion: I/O-scheduler queueing and device
	// time, not waits in the throttle queue or for a request tag
	// (bpf/io.c). BlockCount is their number, BlockBytes their bytes and
	// BlockLatency their histogram (buckets as RunqLatency's). Zero where
	// block_io_start or block_rq_complete could not be attached (Attached
	// says); block_io_start needs Linux 6.5 or later.
	BlockWait    time.Duration
	BlockCount   uint64
	BlockBytes   uint64
	BlockLatency [RunqBuckets]uint64
	// Running reports that one of the cgroup's tasks held a CPU when the
	// counters were read: OnCPU, counted when a task leaves its CPU, does
	// not have that run yet. A cgroup that is not Running and whose OnCPU
	// and Wakeups have not moved since an earlier read has not run since.
	Running bool
	// Sched reports that OnCPU, Wakeups, the run-queue figures and
	// Running are measured: the scheduler programs are loaded and
	// tp_btf/sched_switch is attached. Without it they stay zero, which
	// says nothing of whether the cgroup ran.
	Sched bool
}

// RunqQuantile returns the upper bound of the histogram bucket holding the
// q-quantile (0 < q <= 1) of the run-queue latencies, 0 without samples.
func (s CgroupStats) RunqQuantile(q float64) time.Duration { return Quantile(s.RunqLatency[:], q) }

// Quantile returns the upper bound of the bucket of a log2 histogram
// (bucket i counts [2^i, 2^(i+1)) ns, as RunqLatency and SyncLatency)
// holding the q-quantile (0 < q <= 1), 0 without samples.
func Quantile(hist []uint64, q float64) time.Duration {
	var total uint64
	for _, n := range hist {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, n := range hist {
		seen += n
		if seen >= rank {
			return time.Duration(uint64(1) << (i + 1))
		}
	}
	return time.Duration(uint64(1) << len(hist))
}

// ThresholdEvent is a guaranteed or protected task's run-queue wait at or
// above the latency threshold.
type ThresholdEvent struct {
	Time    time.Time     // when the task got its CPU
	Cgroup  uint64        // the waiting task's cgroup
	Class   Class         // its class
	Culprit uint64        // revocable cgroup that held the CPU during the wait, 0 if none
	Latency time.Duration // the wait
	Delayed time.Duration // the part of it the culprit held the CPU
	CPU     uint32
	PID     uint32 // thread id of the waiting task
}

// ProgramStat is the kernel's run statistics of one attached program,
// counted only while kernel.bpf_stats_enabled=1 (or EnableStats is held).
type ProgramStat struct {
	Name     string // attach point, e.g. "tp_btf/sched_switch"
	RunCount uint64
	RunTime  time.Duration
}

// Monitor holds the loaded programs and maps. Create it with Load; Track
// the cgroups to account; read with Stats and DelayedBy; Run delivers
// threshold events; Close detaches everything. Methods are safe for
// concurrent use.
type Monitor struct {
	log *slog.Logger

	tracked *ebpf.Map // v2 cgroup id -> class and epoch
	stats   *ebpf.Map // v2 cgroup id -> per-CPU counters (but resident ones, see sched.c)
	ncpu    int

	sched *schedObjs // nil when the scheduler programs are not loaded
	net   *netObjects
	mem   *memObjects
	io    *ioSyncObjects  // nil when the synchronous-write programs are not loaded
	blk   *ioBlockObjects // nil when the block-request programs are not loaded

	links    []link.Link
	attached []attachPoint            // what links attached, in their order
	programs map[string]*ebpf.Program // attach point -> program, attached ones only

	events     chan ThresholdEvent
	reader     *ringbuf.Reader
	window     time.Duration // Config.EventBatchWindow
	monoOffset int64         // wall clock minus CLOCK_MONOTONIC, ns
	dropped    atomic.Uint64

	runOnce   sync.Once
	closeOnce sync.Once

	// batchMu guards the buffers of ReadAll's batch lookups and what it
	// learnt of the kernel.
	batchMu     sync.Mutex
	batchKeys   []uint64
	batchValues []schedCgroupCounters // len(batchKeys) * ncpu
	batchSize   int                   // the batch size that fits the map's buckets
	noBatch     bool                  // the kernel has no batch lookups
	// What ReadAll read of each tracked cgroup, reused until a program
	// marks it changed (changed.go), and the marks. Bounded by the
	// tracked set (MaxCgroups); entries go with Untrack and at full reads.
	changed       *ebpf.Map
	marks         *ChangedMarks
	cache         map[uint64]*cachedCounters
	lastFull      time.Time
	fullEvery     time.Duration // Config.FullReadInterval
	readIDs       []uint64
	walked        map[uint64]bool
	blkWalk       blockWalk // walkAll's read of the block counters
	blkNoBatch    bool      // the kernel has no batch lookups of blk_stats
	blockLookups  atomic.Uint64
	readsFull     uint64
	readsLookedUp uint64
	readsReused   uint64
	moved         []uint64 // ReadChanged's answer, reused
	busyIDs       []uint64 // ReadChanged's running cgroups, reused
	busyEpochs    []uint32 // and resident epochs

	mu     sync.RWMutex      // Track, Untrack and Close write; Stats and ReadAll read
	epochs map[uint64]uint32 // tracked cgroup -> its epoch (see sched.c)
	epoch  uint32            // the last epoch given
	gen    uint32            // generation of the tracked set, for the programs
}

// attachPoint is one program and where it goes.
type attachPoint struct {
	name   string // for logs and ProgramStats
	prog   *ebpf.Program
	attach func(*ebpf.Program) (link.Link, error)
}

func tracing(p *ebpf.Program) (link.Link, error) {
	return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
}

// Load loads the programs, attaches every one it can and returns the
// Monitor. What fails is logged and left out (see Attached). When nothing
// can be attached it returns an error that wraps the first cause as the
// probes classify it (ErrPermission, ebpf.ErrNotSupported or other).
func Load(cfg Config) (*Monitor, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	maxCgroups := cfg.MaxCgroups
	if maxCgroups <= 0 {
		maxCgroups = DefaultMaxCgroups
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// ignore it. Failure here shows up, classified, when loading.
	_ = rlimit.RemoveMemlock()

	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("load eBPF: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, fmt.Errorf("load eBPF: read monotonic clock: %w", err)
	}
	m := &Monitor{
		log:        log,
		ncpu:       ncpu,
		programs:   map[string]*ebpf.Program{},
		events:     make(chan ThresholdEvent, eventsBuffered),
		window:     max(cfg.EventBatchWindow, 0),
		monoOffset: time.Now().UnixNano() - ts.Nano(),
		epochs:     map[uint64]uint32{},
		cache:      map[uint64]*cachedCounters{},
		fullEvery:  cmp.Or(max(cfg.FullReadInterval, 0), fullReadInterval),
	}

	schedSpec, err := loadSched()
	if err != nil {
		return nil, fmt.Errorf("load eBPF: %w", err)
	}
	trackedSpec := schedSpec.Maps["tracked"].Copy()
	trackedSpec.MaxEntries = uint32(maxCgroups)
	statsSpec := schedSpec.Maps["cgroup_stats"].Copy()
	statsSpec.MaxEntries = uint32(maxCgroups)
	if m.tracked, err = ebpf.NewMap(trackedSpec); err != nil {
		return nil, fmt.Errorf("load eBPF: create map: %w", classify(err))
	}
	if m.stats, err = ebpf.NewMap(statsSpec); err != nil {
		m.tracked.Close()
		return nil, fmt.Errorf("load eBPF: create map: %w", classify(err))
	}
	if m.changed, err = ebpf.NewMap(schedSpec.Maps["changed"].Copy()); err != nil {
		m.stats.Close()
		m.tracked.Close()
		return nil, fmt.Errorf("load eBPF: create map: %w", classify(err))
	}
	if m.marks, err = MapChanged(m.changed); err != nil {
		// Every ReadAll then reads every cgroup.
		log.Warn("eBPF changed marks unavailable: every cgroup's counters are read at every pass", "err", err)
		m.marks = nil
	}
	// Every collection declares the shared maps; size them alike so the
	// replacements are compatible.
	sizeShared := func(spec *ebpf.CollectionSpec) {
		for _, name := range []string{"tracked", "cgroup_stats"} {
			if ms, ok := spec.Maps[name]; ok {
				ms.MaxEntries = uint32(maxCgroups)
			}
		}
	}
	shared := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"tracked":      m.tracked,
		"cgroup_stats": m.stats,
		"changed":      m.changed,
	}, Cache: KernelBTF()}

	var points []attachPoint
	var failures []error
	fail := func(what string, err error) {
		err = fmt.Errorf("%s: %w", what, classify(err))
		log.Warn("eBPF signal unavailable", "what", what, "err", err)
		failures = append(failures, err)
	}

	// The scheduler, network and memory programs are independent: the
	// kernel verifies them in parallel (the scheduler's verification is
	// most of Load's time), sharing the decoded kernel BTF. Their results
	// are merged below in a fixed order.
	var (
		wg         sync.WaitGroup
		sched      *schedObjs
		schedErr   error
		netObjs    *netObjects
		netErr     error
		netSpecErr error
		memSpec    *ebpf.CollectionSpec
		memSpecErr error
		memProgs   = make([]*ebpf.Program, len(memTracepoints))
		memErrs    = make([]error, len(memTracepoints))
		mem        = &memObjects{}
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		sizeShared(schedSpec)
		sched, schedErr = loadScheduler(schedSpec, shared, ncpu, cfg.wakeupHooks, log)
	}()
	if cfg.CgroupRoot != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			netSpec, err := loadNet()
			if err != nil {
				netSpecErr = err
				return
			}
			sizeShared(netSpec)
			var objs netObjects
			if err := netSpec.LoadAndAssign(&objs, shared); err != nil {
				netErr = err
				return
			}
			netObjs = &objs
		}()
	}
	// Memory: programs are loaded one by one so that a tracepoint this
	// kernel lacks (or whose arguments differ) only loses that signal.
	go func() {
		defer wg.Done()
		if memSpec, memSpecErr = loadMem(); memSpecErr != nil {
			return
		}
		sizeShared(memSpec)
		for i, name := range memTracepoints {
			memProgs[i], memErrs[i] = loadProgram(memSpec, "tp_btf/"+name, shared, &mem.memMaps)
		}
	}()
	wg.Wait()

	// Scheduler.
	if schedErr != nil {
		fail("load scheduler programs", schedErr)
	} else {
		m.sched = sched
		sched.setThreshold(uint64(max(cfg.LatencyThreshold, 0)))
		sched.setAllCulprits(cfg.AllCulprits)
		points = append(points, sched.points...)
	}

	// Network.
	m.net = netObjs
	var setupErr error
	switch {
	case netObjs != nil:
		cgroupSKB := func(at ebpf.AttachType) func(*ebpf.Program) (link.Link, error) {
			return func(p *ebpf.Program) (link.Link, error) {
				return link.AttachCgroup(link.CgroupOptions{Path: cfg.CgroupRoot, Attach: at, Program: p})
			}
		}
		points = append(points,
			attachPoint{"cgroup_skb/ingress", netObjs.CgroupSkbIngress, cgroupSKB(ebpf.AttachCGroupInetIngress)},
			attachPoint{"cgroup_skb/egress", netObjs.CgroupSkbEgress, cgroupSKB(ebpf.AttachCGroupInetEgress)},
		)
	case netSpecErr != nil:
		setupErr = fmt.Errorf("load eBPF: %w", netSpecErr)
	case netErr != nil:
		fail("load network programs", netErr)
	}

	// Memory.
	m.mem = mem
	for i, name := range memTracepoints {
		if memSpecErr != nil {
			break
		}
		name := "tp_btf/" + name
		if memErrs[i] != nil {
			fail("load "+name, memErrs[i])
			continue
		}
		dst := []**ebpf.Program{&mem.DirectReclaimBegin, &mem.DirectReclaimEnd, &mem.MemcgReclaimBegin,
			&mem.MemcgReclaimEnd, &mem.MarkVictim}[i]
		*dst = memProgs[i]
		points = append(points, attachPoint{name, memProgs[i], tracing})
	}
	if memSpecErr != nil {
		setupErr = errors.Join(setupErr, fmt.Errorf("load eBPF: %w", memSpecErr))
	}

	// Disk I/O: synchronous-write latency (ext4_sync_file tracepoints) and
	// block-request latency (block_io_start, block_rq_complete), loaded
	// apart: cilium/ebpf resolves a tp_btf target at load, and a kernel
	// before 6.5 has no block_io_start, which must lose only the block
	// signal, not the fsync one.
	if ioSpec, err := loadIo(); err != nil {
		setupErr = errors.Join(setupErr, fmt.Errorf("load eBPF: %w", err))
	} else {
		sizeShared(ioSpec)
		var syncObjs ioSyncObjects
		if err := ioSpec.LoadAndAssign(&syncObjs, shared); err != nil {
			fail("load synchronous-write programs", err)
		} else {
			m.io = &syncObjs
			points = append(points,
				attachPoint{"tp_btf/ext4_sync_file_enter", syncObjs.FsyncBegin, tracing},
				attachPoint{"tp_btf/ext4_sync_file_exit", syncObjs.FsyncEnd, tracing})
		}
		var blk ioBlockObjects
		if err := ioSpec.LoadAndAssign(&blk, shared); err != nil {
			fail("load block-request programs ("+BlockKernelNeed+")", err)
		} else {
			m.blk = &blk
			points = append(points,
				attachPoint{BlockStartAttach, blk.BlkStart, tracing},
				attachPoint{BlockDoneAttach, blk.BlkDone, tracing})
		}
	}
	if setupErr != nil {
		return nil, errors.Join(setupErr, m.Close())
	}

	for _, p := range points {
		l, err := p.attach(p.prog)
		if err != nil {
			fail("attach "+p.name, err)
			continue
		}
		m.links = append(m.links, l)
		m.attached = append(m.attached, p)
		m.programs[p.name] = p.prog
	}
	if len(m.links) == 0 {
		err := errors.Join(failures...)
		if err == nil {
			err = ErrUnavailable
		}
		return nil, errors.Join(fmt.Errorf("load eBPF: nothing could be attached: %w", err), m.Close())
	}

	if m.sched != nil && m.programs["tp_btf/sched_switch"] != nil {
		if m.reader, err = ringbuf.NewReader(m.sched.Events); err != nil {
			fail("open event ring buffer", err)
		}
	}
	log.Info("eBPF monitor loaded", "attached", m.Attached(), "unavailable", len(failures))
	return m, nil
}

// memTracepoints are the memory programs' tracepoints, loaded one by one.
var memTracepoints = []string{"mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end",
	"mm_vmscan_memcg_reclaim_begin", "mm_vmscan_memcg_reclaim_end", "mark_victim"}

// loadProgram loads the one program of spec whose section is section, its
// maps created once and kept in maps.
func loadProgram(spec *ebpf.CollectionSpec, section string, shared *ebpf.CollectionOptions, maps *memMaps) (*ebpf.Program, error) {
	one := spec.Copy()
	var progName string
	for name, p := range one.Programs {
		if p.SectionName == section {
			progName = name
		} else {
			delete(one.Programs, name)
		}
	}
	if progName == "" {
		return nil, fmt.Errorf("no program in section %s", section)
	}
	opts := *shared
	opts.MapReplacements = maps.replacements(shared.MapReplacements)
	coll, err := ebpf.NewCollectionWithOptions(one, opts)
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	if maps.ReclaimStart == nil {
		maps.ReclaimStart = coll.Maps["reclaim_start"]
		delete(coll.Maps, "reclaim_start") // keep it open
	}
	prog := coll.Programs[progName]
	delete(coll.Programs, progName)
	return prog, nil
}

func (mm *memMaps) replacements(shared map[string]*ebpf.Map) map[string]*ebpf.Map {
	r := map[string]*ebpf.Map{}
	for k, v := range shared {
		r[k] = v
	}
	if mm.ReclaimStart != nil {
		r["reclaim_start"] = mm.ReclaimStart
	}
	return r
}

// Attached lists the attach points in use, e.g. "tp_btf/sched_switch",
// "cgroup_skb/egress", "tp_btf/mark_victim".
func (m *Monitor) Attached() []string {
	names := make([]string, 0, len(m.programs))
	for name := range m.programs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Track starts accounting the v2 cgroup id as class, or changes its class
// when it is already tracked (its counters are kept).
func (m *Monitor) Track(cgroupID uint64, class Class) error {
	if class < ClassGuaranteed || class > ClassProtected {
		return fmt.Errorf("track cgroup %d: invalid class %d", cgroupID, class)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	epoch, known := m.epochs[cgroupID]
	if !known {
		err := m.createStats(cgroupID)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("track cgroup %d: %w", cgroupID, err)
		}
		m.epoch++
		if m.epoch == 0 { // 0 marks a free resident entry
			m.epoch++
		}
		epoch = m.epoch
	}
	if err := m.tracked.Put(cgroupID, schedTrackedCgroup{Class: uint32(class), Epoch: epoch}); err != nil {
		if !known {
			_ = m.stats.Delete(cgroupID)
		}
		return fmt.Errorf("track cgroup %d: %w", cgroupID, err)
	}
	m.epochs[cgroupID] = epoch
	m.changedSet()
	return nil
}

// trackRetryBudget bounds how long Track keeps retrying a counters entry
// that failed for want of memory, with pauses of 1, 2, 4... ms (at most
// trackRetryPause) between attempts. The pool's refill is a workqueue item:
// beside CPU hogs it ran more than the 31 ms that five doubling pauses gave
// (a CI run tracking 48 cgroups at once failed with ENOMEM), so the budget
// is a time, long enough for a loaded host and short enough for a task's
// start.
const (
	trackRetryBudget = 2 * time.Second
	trackRetryPause  = 100 * time.Millisecond
)

// createStats creates a cgroup's counters entry. Its per-CPU values come
// from the kernel's atomic per-CPU pool, which a workqueue refills: on a
// busy host the update can fail with ENOMEM until it has, so it is
// retried (trackRetryBudget).
func (m *Monitor) createStats(cgroupID uint64) error {
	zero := make([]schedCgroupCounters, m.ncpu)
	deadline := time.Now().Add(trackRetryBudget)
	for pause := time.Millisecond; ; pause = min(2*pause, trackRetryPause) {
		err := m.stats.Update(cgroupID, zero, ebpf.UpdateNoExist)
		if !errors.Is(err, unix.ENOMEM) || time.Now().Add(pause).After(deadline) {
			return err
		}
		time.Sleep(pause)
	}
}

// changedSet tells the programs that the tracked set changed, so that
// they check what they cached of it.
func (m *Monitor) changedSet() {
	if m.sched != nil {
		m.gen++
		m.sched.setGen(m.gen)
	}
}

// Untrack stops accounting the cgroup and forgets its counters, including
// the delays it suffered or caused.
func (m *Monitor) Untrack(cgroupID uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.epochs[cgroupID]; !ok {
		return fmt.Errorf("untrack cgroup %d: %w", cgroupID, ErrNotTracked)
	}
	if err := m.tracked.Delete(cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("untrack cgroup %d: %w", cgroupID, err)
	}
	delete(m.epochs, cgroupID)
	delete(m.cache, cgroupID) // ReadAll is not running: m.mu is held
	m.changedSet()
	if err := m.stats.Delete(cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("untrack cgroup %d: %w", cgroupID, err)
	}
	if m.sched != nil {
		var stale []schedDelayKey
		var key schedDelayKey
		var perCPU []uint64
		it := m.sched.Delays.Iterate()
		for it.Next(&key, &perCPU) {
			if key.Victim == cgroupID || key.Culprit == cgroupID {
				stale = append(stale, key)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("untrack cgroup %d: %w", cgroupID, err)
		}
		for _, k := range stale {
			if err := m.sched.Delays.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("untrack cgroup %d: %w", cgroupID, err)
			}
		}
	}
	return nil
}

// Stats returns the cgroup's counters summed over CPUs; ErrNotTracked if
// it is not tracked. Counters whose programs are not attached stay 0.
func (m *Monitor) Stats(cgroupID uint64) (CgroupStats, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	epoch, ok := m.epochs[cgroupID]
	if !ok {
		return CgroupStats{}, fmt.Errorf("stats of cgroup %d: %w", cgroupID, ErrNotTracked)
	}
	st, err := m.read(cgroupID, epoch)
	if err != nil {
		return CgroupStats{}, fmt.Errorf("stats of cgroup %d: %w", cgroupID, err)
	}
	return st, nil
}

// AllStats returns the counters of every tracked cgroup, by cgroup id
// (see ReadAll).
func (m *Monitor) AllStats() (map[uint64]CgroupStats, error) {
	all := map[uint64]CgroupStats{}
	if err := m.ReadAll(all); err != nil {
		return nil, err
	}
	return all, nil
}

// statsBatch is how many cgroups' counters one batch lookup asks for. A
// hash map's batch must hold its fullest bucket; the lookup grows it when
// the kernel says it is too small.
const statsBatch = 128

// ReadAll replaces into's contents with the counters of every tracked
// cgroup, by cgroup id, as Stats returns them. It looks up only the
// cgroups the programs marked changed since the last ReadAll (see
// changed.go), reusing the counters it read before for the others, and
// reads every cgroup once per fullReadInterval; many at once are read with
// batch lookups (one system call per statsBatch cgroups), or, on kernels
// without batch operations, one lookup per cgroup. A caller that reads
// every cgroup each pass passes the same map every time: its buckets are
// reused.
func (m *Monitor) ReadAll(into map[uint64]CgroupStats) error {
	clear(into)
	m.mu.RLock()
	defer m.mu.RUnlock()
	m.batchMu.Lock()
	defer m.batchMu.Unlock()
	if err := m.refresh(time.Now()); err != nil {
		// Read afresh next time.
		clear(m.cache)
		m.lastFull = time.Time{}
		return fmt.Errorf("stats of every cgroup: %w", err)
	}
	for id, epoch := range m.epochs {
		c := m.cache[id]
		if c == nil { // not read (cannot be after a refresh without error)
			c = &cachedCounters{}
		}
		into[id] = m.assemble(id, epoch, c)
	}
	return nil
}

// ReadChanged is ReadAll for a caller that passes the same map at every
// call and wants to know what moved (#29): it leaves as they are the
// entries of cgroups whose counters did not move since its previous call
// (no read found them changed, no task of the cgroup is running now or
// was then, and the counters a CPU keeps resident for it, if any, add up
// to the same figures), (re)assembles the others, deletes the entries of
// cgroups no longer tracked, and returns the ids of the entries it
// changed, in a slice valid until the next call. An entry it left is
// equal to what ReadAll would have put there. On error into is emptied
// and the next call assembles every entry.
func (m *Monitor) ReadChanged(into map[uint64]CgroupStats) ([]uint64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	m.batchMu.Lock()
	defer m.batchMu.Unlock()
	m.moved = m.moved[:0]
	if err := m.refresh(time.Now()); err != nil {
		clear(into)
		clear(m.cache)
		m.lastFull = time.Time{}
		return nil, fmt.Errorf("stats of every cgroup: %w", err)
	}
	for id := range into {
		if _, ok := m.epochs[id]; !ok {
			delete(into, id)
		}
	}
	// The few cgroups running or resident on a CPU, found once (a scan of
	// every CPU's entries per cgroup cost more than the rest of the loop).
	m.busyIDs, m.busyEpochs = m.busyIDs[:0], m.busyEpochs[:0]
	if m.sched != nil {
		m.busyIDs, m.busyEpochs = m.sched.busy(m.busyIDs, m.busyEpochs)
	}
	for id, epoch := range m.epochs {
		c := m.cache[id]
		if c == nil { // not read (cannot be after a refresh without error)
			c = &cachedCounters{moved: true}
		}
		running := slices.Contains(m.busyIDs, id)
		resident := slices.Contains(m.busyEpochs, epoch)
		prev, ok := into[id]
		if ok && !c.moved && !running && !c.running && !resident {
			continue
		}
		stats := m.assemble(id, epoch, c)
		wasRunning := c.running
		c.moved, c.running = false, running
		if ok && !running && !wasRunning && stats == prev {
			// Counters a CPU keeps resident, read again: they did not
			// move (#29: a cgroup among the first to run on a CPU keeps
			// its entry there while tracked, and would otherwise count
			// as moved at every pass, its samples never repeated).
			continue
		}
		into[id] = stats
		m.moved = append(m.moved, id)
	}
	return m.moved, nil
}

// readBatch reads the counters map with batch lookups, calling f with
// each entry's key and per-CPU values (f may be called again for an
// entry when a bucket outgrew the batch and the walk started over). m.mu
// (read) and m.batchMu must be held: the tracked set, and so the map's
// keys, cannot change meanwhile (the programs only update values).
func (m *Monitor) readBatch(f func(id uint64, perCPU []schedCgroupCounters) error) error {
	size := max(m.batchSize, statsBatch)
	for {
		if len(m.batchKeys) < size {
			m.batchKeys = make([]uint64, size)
			m.batchValues = make([]schedCgroupCounters, size*m.ncpu)
		}
		err := m.walkBatch(f, size)
		if errors.Is(err, unix.ENOSPC) && size < int(m.stats.MaxEntries()) {
			// A bucket holds more entries than the batch: start over with
			// a larger one.
			size *= 2
			m.batchSize = size
			continue
		}
		return err
	}
}

// walkBatch walks the counters map size entries at a time.
func (m *Monitor) walkBatch(f func(id uint64, perCPU []schedCgroupCounters) error, size int) error {
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.stats.BatchLookup(&cursor, m.batchKeys[:size], m.batchValues[:size*m.ncpu], nil)
		for i := range n {
			if err := f(m.batchKeys[i], m.batchValues[i*m.ncpu:(i+1)*m.ncpu]); err != nil {
				return err
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil // the end of the map
		}
		if err != nil {
			return err
		}
	}
}

// read sums a tracked cgroup's counters over CPUs: its cgroup_stats entry
// and the resident counters CPUs keep for it. m.mu must be held.
func (m *Monitor) read(cgroupID uint64, epoch uint32) (CgroupStats, error) {
	var perCPU []schedCgroupCounters
	if err := m.stats.Lookup(cgroupID, &perCPU); err != nil {
		return CgroupStats{}, err
	}
	blk, err := m.blockCounters(cgroupID)
	if err != nil {
		return CgroupStats{}, err
	}
	return m.assemble(cgroupID, epoch, &cachedCounters{epoch: epoch, stats: sumCounters(perCPU), blk: blk}), nil
}

// sumCounters adds up a cgroup_stats entry's values (one per CPU).
func sumCounters(perCPU []schedCgroupCounters) schedCgroupCounters {
	var c schedCgroupCounters
	for i := range perCPU {
		v := &perCPU[i]
		addSched(&c.Sched, &v.Sched)
		c.RxBytes += v.RxBytes
		c.RxPackets += v.RxPackets
		c.TxBytes += v.TxBytes
		c.TxPackets += v.TxPackets
		c.ReclaimNs += v.ReclaimNs
		c.ReclaimCount += v.ReclaimCount
		c.OomKills += v.OomKills
		c.SyncNs += v.SyncNs
		c.SyncCount += v.SyncCount
		for b, n := range v.SyncHist {
			c.SyncHist[b] += n
		}
	}
	return c
}

// assemble returns a tracked cgroup's counters: what was read of its
// cgroup_stats entry and block counters (read), plus the resident counters
// CPUs keep for it, and whether one of its tasks holds a CPU, both read
// from the CPUs' mapped states now. m.mu must be held.
func (m *Monitor) assemble(cgroupID uint64, epoch uint32, read *cachedCounters) CgroupStats {
	c, blk := read.stats, read.blk
	running := false
	if m.sched != nil {
		m.sched.addResident(&c.Sched, epoch)
		running = m.sched.running(cgroupID)
	}
	return CgroupStats{
		BlockWait:          time.Duration(blk.Ns),
		BlockCount:         blk.Count,
		BlockBytes:         blk.Bytes,
		BlockLatency:       blk.Hist,
		Running:            running,
		Sched:              m.sched != nil && m.programs["tp_btf/sched_switch"] != nil,
		OnCPU:              time.Duration(c.Sched.OncpuNs),
		Wakeups:            c.Sched.Sleeps,
		RunqLatency:        c.Sched.RunqHist,
		RunqCount:          c.Sched.RunqCount,
		RunqTotal:          time.Duration(c.Sched.RunqSumNs),
		DelayedByRevocable: time.Duration(c.Sched.DelayedNs),
		NetRxBytes:         c.RxBytes,
		NetRxPackets:       c.RxPackets,
		NetTxBytes:         c.TxBytes,
		NetTxPackets:       c.TxPackets,
		ReclaimStall:       time.Duration(c.ReclaimNs),
		ReclaimCount:       c.ReclaimCount,
		OOMKills:           c.OomKills,
		SyncWait:           time.Duration(c.SyncNs),
		SyncCount:          c.SyncCount,
		SyncLatency:        c.SyncHist,
	}
}

// DelayedBy returns, for a guaranteed or protected cgroup, how long each
// revocable cgroup held a CPU while one of its tasks waited for it.
// Attribution goes to the last revocable cgroup that ran on the CPU during
// the wait; only the part of a wait spent on the CPU where the task finally
// ran is considered.
func (m *Monitor) DelayedBy(victim uint64) (map[uint64]time.Duration, error) {
	if m.sched == nil {
		return nil, fmt.Errorf("delays of cgroup %d: %w", victim, ErrUnavailable)
	}
	delays := map[uint64]time.Duration{}
	var key schedDelayKey
	var perCPU []uint64
	it := m.sched.Delays.Iterate()
	for it.Next(&key, &perCPU) {
		if key.Victim == victim {
			for _, ns := range perCPU {
				delays[key.Culprit] += time.Duration(ns)
			}
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("delays of cgroup %d: %w", victim, err)
	}
	return delays, nil
}

// AllDelays returns DelayedBy of every victim that has been delayed,
// keyed by victim, from one walk of the map: a caller that needs several
// victims' delays (the QoS loop needs every guaranteed container's) walks
// it once instead of once per victim.
func (m *Monitor) AllDelays() (map[uint64]map[uint64]time.Duration, error) {
	if m.sched == nil {
		return nil, fmt.Errorf("delays: %w", ErrUnavailable)
	}
	all := map[uint64]map[uint64]time.Duration{}
	var key schedDelayKey
	var perCPU []uint64
	it := m.sched.Delays.Iterate()
	for it.Next(&key, &perCPU) {
		delays := all[key.Victim]
		if delays == nil {
			delays = map[uint64]time.Duration{}
			all[key.Victim] = delays
		}
		for _, ns := range perCPU {
			delays[key.Culprit] += time.Duration(ns)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("delays: %w", err)
	}
	return all, nil
}

// SetAllCulprits turns the attribution of guaranteed and protected tasks'
// waits to every culprit on or off. On, DelayedBy also names guaranteed and
// protected cgroups, untracked cgroups by id (the agent's, the root, other
// services), and CulpritKernel, CulpritIdle and CulpritUnknown; every
// context switch then costs a clock read and a few stores more. Off, it
// names revocable cgroups only.
func (m *Monitor) SetAllCulprits(on bool) error {
	if m.sched == nil {
		return fmt.Errorf("attribute waits to every culprit: %w", ErrUnavailable)
	}
	m.sched.setAllCulprits(on)
	return nil
}

// SetLatencyThreshold changes the threshold of Events; 0 disables them.
func (m *Monitor) SetLatencyThreshold(d time.Duration) error {
	if m.sched == nil {
		return fmt.Errorf("set latency threshold: %w", ErrUnavailable)
	}
	m.sched.setThreshold(uint64(max(d, 0)))
	return nil
}

// Events returns the channel of threshold events. Run feeds it and closes it
// when it returns; events that find it full are dropped (see EventsLost).
func (m *Monitor) Events() <-chan ThresholdEvent { return m.events }

// EventsLost counts events dropped because the kernel ring buffer or the
// Events channel was full.
func (m *Monitor) EventsLost() uint64 {
	lost := m.dropped.Load()
	if m.sched != nil {
		var inKernel uint64
		if err := m.sched.EventsLost.Get(&inKernel); err == nil {
			lost += inKernel
		}
	}
	return lost
}

// Run reads the event ring buffer into Events until ctx ends, then closes
// the reader and the Events channel and returns nil. It must be called at
// most once; without the scheduler programs it only waits for ctx.
func (m *Monitor) Run(ctx context.Context) error {
	err := errors.New("bpf: Monitor.Run called twice")
	m.runOnce.Do(func() { err = m.run(ctx) })
	return err
}

func (m *Monitor) run(ctx context.Context) error {
	defer close(m.events)
	if m.reader == nil {
		<-ctx.Done()
		return nil
	}
	stop := context.AfterFunc(ctx, func() { m.reader.Close() })
	defer stop()
	// A drain reads at most what the ring buffer holds, then waits for the
	// next window: a producer faster than the drain cannot hold Run in it.
	maxDrain := max(m.reader.BufferSize()/eventRecordSize, 1)
	var window *time.Timer
	if m.window > 0 {
		window = time.NewTimer(m.window)
		window.Stop()
		defer window.Stop()
	}
	var rec ringbuf.Record
	for {
		if err := m.reader.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return nil
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // the end of a drain cut short by maxDrain
			}
			return fmt.Errorf("read events: %w", err)
		}
		first, ok := decodeEvent(rec.RawSample, m.monoOffset)
		if window == nil {
			if ok {
				m.deliver(first)
			}
			continue
		}
		window.Reset(m.window)
		select {
		case <-window.C:
		case <-ctx.Done():
			return nil
		}
		if ok {
			m.deliver(first)
		}
		m.reader.SetDeadline(pastDeadline) // read what is there, without waiting
		for range maxDrain {
			err := m.reader.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				if errors.Is(err, ringbuf.ErrClosed) {
					return nil
				}
				return fmt.Errorf("read events: %w", err)
			}
			if ev, ok := decodeEvent(rec.RawSample, m.monoOffset); ok {
				m.deliver(ev)
			}
		}
		m.reader.SetDeadline(time.Time{})
	}
}

// pastDeadline makes the ring buffer's reader return what it holds without
// waiting.
var pastDeadline = time.Unix(1, 0)

// eventsBuffered bounds the Events channel: a burst beyond what its reader
// has taken is dropped and counted (EventsLost).
const eventsBuffered = 1024

// eventRecordSize is the ring buffer's space for one event: the kernel's
// 8-byte record header and the event, rounded up to 8 bytes.
const eventRecordSize = 8 + (int(unsafe.Sizeof(schedEvent{}))+7)/8*8

// deliver sends ev to Events, or drops and counts it when Events is full
// (logged the first time).
func (m *Monitor) deliver(ev ThresholdEvent) {
	select {
	case m.events <- ev:
	default:
		if m.dropped.Add(1) == 1 {
			m.log.Warn("threshold events dropped: the Events channel is full", "limit", eventsBuffered)
		}
	}
}

// decodeEvent decodes one ring buffer record of sched.c's struct event,
// whose timestamp is CLOCK_MONOTONIC; monoOffset is the wall clock minus
// it. Short records are not events (false).
func decodeEvent(raw []byte, monoOffset int64) (ThresholdEvent, bool) {
	if len(raw) < int(unsafe.Sizeof(schedEvent{})) {
		return ThresholdEvent{}, false
	}
	e := (*schedEvent)(unsafe.Pointer(&raw[0]))
	return ThresholdEvent{
		Time:    time.Unix(0, monoOffset+int64(e.TimestampNs)),
		Cgroup:  e.Cgroup,
		Class:   Class(e.Class),
		Culprit: e.Culprit,
		Latency: time.Duration(e.LatencyNs),
		Delayed: time.Duration(e.DelayedNs),
		CPU:     e.Cpu,
		PID:     e.Pid,
	}, true
}

// ProgramStats returns the kernel's run count and run time of each attached
// program (non-zero only while BPF statistics are enabled).
func (m *Monitor) ProgramStats() ([]ProgramStat, error) {
	var out []ProgramStat
	for _, name := range m.Attached() {
		st, err := m.programs[name].Stats()
		if err != nil {
			return nil, fmt.Errorf("stats of program %s: %w", name, err)
		}
		out = append(out, ProgramStat{Name: name, RunCount: st.RunCount, RunTime: st.Runtime})
	}
	return out, nil
}

// Close detaches the programs and frees the maps. It does not wait for Run,
// whose reader it closes.
func (m *Monitor) Close() error {
	var errs []error
	m.closeOnce.Do(func() {
		m.mu.Lock() // Stats reads the CPUs' mapped state
		defer m.mu.Unlock()
		for _, l := range m.links {
			errs = append(errs, l.Close())
		}
		if m.reader != nil {
			if err := m.reader.Close(); err != nil && !errors.Is(err, ringbuf.ErrClosed) {
				errs = append(errs, err)
			}
		}
		if m.sched != nil {
			errs = append(errs, m.sched.Close())
		}
		if m.net != nil {
			errs = append(errs, m.net.Close())
		}
		if m.mem != nil {
			errs = append(errs, m.mem.Close())
		}
		if m.io != nil {
			errs = append(errs, m.io.Close())
		}
		if m.blk != nil {
			errs = append(errs, m.blk.Close())
		}
		if m.stats != nil {
			errs = append(errs, m.stats.Close())
		}
		if m.tracked != nil {
			errs = append(errs, m.tracked.Close())
		}
		errs = append(errs, m.marks.Close())
		m.marks = nil
		if m.changed != nil {
			errs = append(errs, m.changed.Close())
		}
	})
	return errors.Join(errs...)
}
