package netqos

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/bpf"
)

// RTTBuckets is the number of round-trip-time histogram buckets: bucket i
// counts samples in [2^i, 2^(i+1)) µs (bucket 0 also counts 0 µs); the last
// bucket counts everything from 2^31 µs up.
const RTTBuckets = 32

// DefaultMaxCgroups bounds the classes and watched cgroups when
// Config.MaxCgroups is 0.
const DefaultMaxCgroups = 4096

// Attach points, as Attached and ProgramStats name them.
const (
	// PointClassifier is the cls_bpf classifier; the caller attaches it to
	// its qdiscs (ClassifierFD).
	PointClassifier = "tc/classify"
	// PointSockOps is the sock_ops program measuring RTT.
	PointSockOps = "sockops/tcp_rtt"
	// PointRetransmit counts retransmissions.
	PointRetransmit = "tp_btf/tcp_retransmit_skb"
)

// Config configures Load.
type Config struct {
	// CgroupRoot is the directory in the v2 hierarchy below which TCP round
	// trips are measured (the sock_ops program is attached there). Empty:
	// no RTT signal.
	CgroupRoot string
	// MaxCgroups bounds the cgroups with a class and the watched cgroups
	// (DefaultMaxCgroups if 0).
	MaxCgroups int
	// FullReadInterval bounds how long ReadAllTCP and ReadChangedTCP go
	// without reading every watched cgroup's counters whatever the changed
	// marks say (changed.go's safety net), on the clock's grid of it.
	// 0: fullTCPReadInterval (1 s).
	FullReadInterval time.Duration
	// Logger receives what could not be loaded or attached (slog.Default if nil).
	Logger *slog.Logger
}

// TCPStats are a watched cgroup's cumulative TCP counters since Watch.
type TCPStats struct {
	// RTT is the histogram of round-trip samples (the kernel's mrtt on every
	// acknowledgement that measures one); see RTTBuckets.
	RTT [RTTBuckets]uint64
	// RTTCount and RTTTotal are the number and sum of the samples.
	RTTCount uint64
	RTTTotal time.Duration
	// Retransmits counts retransmitted segments (skbs, which may carry
	// several MSS with TSO).
	Retransmits uint64
}

// Programs holds the loaded programs and their maps. Create it with Load;
// attach the classifier to qdiscs with ClassifierFD; fill its classes
// with SetClass and SetRevocableSubtree; Watch cgroups and read TCPStats;
// Close detaches what Load attached and frees the maps. A qdisc filter
// holds its own reference to the classifier: it keeps classifying with the
// last classes after Close (or a crash) until the filter is replaced or
// removed. Methods are safe for concurrent use.
type Programs struct {
	log  *slog.Logger
	ncpu int

	classes *ebpf.Map // v2 cgroup id -> class id
	config  *ebpf.Map // classify_config
	tcp     *ebpf.Map // v2 cgroup id -> per-CPU tcp_counters
	changed *ebpf.Map // tcp_changed: the changed marks (changed.go)

	classify *ebpf.Program            // nil when it could not be loaded
	programs map[string]*ebpf.Program // attach point -> loaded program
	links    []link.Link

	mu      sync.Mutex
	watched map[uint64]bool
	// ReadAllTCP's batch buffers and what it learnt of the kernel, under mu.
	batchKeys   []uint64
	batchValues []netqosTcpCounters // len(batchKeys) * ncpu
	batchSize   int
	noBatch     bool
	batchSeen   map[uint64]bool // the watched cgroups the last walk found (at most the watched set)
	// The changed marks (nil: unmapped, every pass reads everything), the
	// last counters read of each watched cgroup, when every one was last
	// read, the plan's buffer and the read counts, under mu.
	marks *bpf.ChangedMarks
	cache map[uint64]TCPStats
	// dirty holds the watched cgroups whose cached counters were stored
	// with a new value since the last ReadChangedTCP (store), so that it
	// compares nothing for the others (#29: each entry is five cache
	// lines, cold after the pass's sleep, and ReadChangedTCP compared two
	// of them per cgroup and pass).
	dirty     map[uint64]bool
	moved     []uint64 // ReadChangedTCP's answer, reused
	lastFull  time.Time
	fullEvery time.Duration // Config.FullReadInterval; tests lengthen it
	readIDs   []uint64
	reads     bpf.ReadCounts

	closeOnce sync.Once
}

// Load loads the programs, attaches the TCP signal programs it can and
// returns them. What fails is logged and left out (see Attached). When
// nothing could be loaded it returns an error that wraps the first cause
// as bpf.Probe classifies it (bpf.ErrPermission, ebpf.ErrNotSupported or
// other).
func Load(cfg Config) (*Programs, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	maxCgroups := cfg.MaxCgroups
	if maxCgroups <= 0 {
		maxCgroups = DefaultMaxCgroups
	}
	_ = rlimit.RemoveMemlock() // kernels before 5.11 only
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("load network QoS programs: %w", err)
	}
	spec, err := loadNetqos()
	if err != nil {
		return nil, fmt.Errorf("load network QoS programs: %w", err)
	}
	spec.Maps["classes"].MaxEntries = uint32(maxCgroups)
	spec.Maps["tcp_stats"].MaxEntries = uint32(maxCgroups)
	p := &Programs{log: log, ncpu: ncpu, programs: map[string]*ebpf.Program{}, watched: map[uint64]bool{},
		cache: map[uint64]TCPStats{}, dirty: map[uint64]bool{}, fullEvery: cmp.Or(max(cfg.FullReadInterval, 0), fullTCPReadInterval)}
	for _, m := range []struct {
		name string
		dst  **ebpf.Map
	}{{"classes", &p.classes}, {"classify_cfg", &p.config}, {"tcp_stats", &p.tcp}, {"tcp_changed", &p.changed}} {
		if *m.dst, err = ebpf.NewMap(spec.Maps[m.name]); err != nil {
			return nil, errors.Join(fmt.Errorf("load network QoS programs: create map %s: %w", m.name, bpf.Classify(err)), p.Close())
		}
	}
	if p.marks, err = bpf.MapChanged(p.changed); err != nil {
		log.Warn("network QoS: TCP changed marks unavailable: every read looks up every watched cgroup", "err", err)
		p.marks = nil
	}
	maps := map[string]*ebpf.Map{"classes": p.classes, "classify_cfg": p.config, "tcp_stats": p.tcp, "tcp_changed": p.changed}

	var failures []error
	fail := func(what string, err error) {
		err = fmt.Errorf("%s: %w", what, bpf.Classify(err))
		log.Warn("network QoS eBPF program unavailable", "what", what, "err", err)
		failures = append(failures, err)
	}
	points := []struct {
		point, program string
		attach         func(*ebpf.Program) (link.Link, error)
	}{
		{PointClassifier, "classify", nil},
		{PointSockOps, "tcp_rtt", func(prog *ebpf.Program) (link.Link, error) {
			return link.AttachCgroup(link.CgroupOptions{Path: cfg.CgroupRoot, Attach: ebpf.AttachCGroupSockOps, Program: prog})
		}},
		{PointRetransmit, "tcp_retransmit", func(prog *ebpf.Program) (link.Link, error) {
			return link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		}},
	}
	for _, pt := range points {
		if pt.point == PointSockOps && cfg.CgroupRoot == "" {
			continue
		}
		prog, err := loadProgram(spec, pt.program, maps)
		if err != nil {
			fail("load "+pt.point, err)
			continue
		}
		if pt.attach != nil {
			l, err := pt.attach(prog)
			if err != nil {
				prog.Close()
				fail("attach "+pt.point, err)
				continue
			}
			p.links = append(p.links, l)
		} else {
			p.classify = prog
		}
		p.programs[pt.point] = prog
	}
	if len(p.programs) == 0 {
		err := errors.Join(failures...)
		if err == nil {
			err = bpf.ErrUnavailable
		}
		return nil, errors.Join(fmt.Errorf("load network QoS programs: nothing could be loaded: %w", err), p.Close())
	}
	log.Info("network QoS eBPF programs loaded", "loaded", p.Attached(), "unavailable", len(failures))
	return p, nil
}

// loadProgram loads the one program named name of spec, with the maps
// created once.
func loadProgram(spec *ebpf.CollectionSpec, name string, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	one := spec.Copy()
	for other := range one.Programs {
		if other != name {
			delete(one.Programs, other)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: maps, Cache: bpf.KernelBTF()})
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	prog := coll.Programs[name]
	delete(coll.Programs, name) // keep it open
	return prog, nil
}

// Attached lists the programs loaded (and, but for the classifier,
// attached), by attach point.
func (p *Programs) Attached() []string {
	names := make([]string, 0, len(p.programs))
	for name := range p.programs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// ClassifierFD returns the file descriptor of the classifier, a
// direct-action cls_bpf program, for a qdisc filter (netlink.BpfFilter)
// whose classid is the qdisc's handle (major:0): the program chooses only
// the minor. bpf.ErrUnavailable when it could not be loaded. The
// descriptor belongs to Programs.
func (p *Programs) ClassifierFD() (int, error) {
	if p.classify == nil {
		return 0, fmt.Errorf("classifier: %w", bpf.ErrUnavailable)
	}
	return p.classify.FD(), nil
}

// SetClass sends the egress of the v2 cgroup to the class with the minor
// (under the filter's major), replacing its previous class.
func (p *Programs) SetClass(cgroupID uint64, minor uint16) error {
	if err := p.classes.Put(cgroupID, uint32(minor)); err != nil {
		return fmt.Errorf("set class of cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// DeleteClass removes the cgroup's class; deleting a cgroup without one is
// not an error.
func (p *Programs) DeleteClass(cgroupID uint64) error {
	if err := p.classes.Delete(cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete class of cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// Classes returns every cgroup's class minor.
func (p *Programs) Classes() (map[uint64]uint16, error) {
	out := map[uint64]uint16{}
	var id uint64
	var class uint32
	it := p.classes.Iterate()
	for it.Next(&id, &class) {
		out[id] = uint16(class)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list classes: %w", err)
	}
	return out, nil
}

// SetRevocableSubtree sends the egress of every cgroup below the v2 cgroup
// root (at level in the hierarchy, the root being level 0) that has no
// class of its own to the class with the minor; root 0 turns that off.
func (p *Programs) SetRevocableSubtree(root uint64, level uint32, minor uint16) error {
	cfg := netqosClassifyConfig{RevocableRoot: root, RevocableLevel: level, RevocableClass: uint32(minor)}
	if err := p.config.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("set revocable subtree: %w", err)
	}
	return nil
}

// Watch starts counting the TCP signals of the v2 cgroup (a no-op when
// already watched, counters kept).
func (p *Programs) Watch(cgroupID uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watched[cgroupID] {
		return nil
	}
	err := p.tcp.Update(cgroupID, make([]netqosTcpCounters, p.ncpu), ebpf.UpdateNoExist)
	if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("watch cgroup %d: %w", cgroupID, err)
	}
	p.watched[cgroupID] = true
	return nil
}

// Unwatch stops counting and forgets the cgroup's counters; bpf.ErrNotTracked
// for a cgroup not watched.
func (p *Programs) Unwatch(cgroupID uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.watched[cgroupID] {
		return fmt.Errorf("unwatch cgroup %d: %w", cgroupID, bpf.ErrNotTracked)
	}
	delete(p.watched, cgroupID)
	delete(p.cache, cgroupID)
	delete(p.dirty, cgroupID)
	if err := p.tcp.Delete(cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unwatch cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// TCPStats returns the cgroup's counters summed over CPUs; bpf.ErrNotTracked
// when it is not watched. Counters whose programs are not attached stay 0.
func (p *Programs) TCPStats(cgroupID uint64) (TCPStats, error) {
	p.mu.Lock()
	watched := p.watched[cgroupID]
	p.mu.Unlock()
	if !watched {
		return TCPStats{}, fmt.Errorf("tcp stats of cgroup %d: %w", cgroupID, bpf.ErrNotTracked)
	}
	var perCPU []netqosTcpCounters
	if err := p.tcp.Lookup(cgroupID, &perCPU); err != nil {
		return TCPStats{}, fmt.Errorf("tcp stats of cgroup %d: %w", cgroupID, err)
	}
	return sumTCP(perCPU), nil
}

// tcpBatch is how many cgroups' counters one batch lookup asks for.
const tcpBatch = 128

// ReadAllTCP replaces into's contents with the counters of every watched
// cgroup, as TCPStats returns them. It looks up only the cgroups the
// programs marked changed since the last call (and those watched since),
// reusing what it read of the others, and reads every one at least every
// fullTCPReadInterval (changed.go): with batch lookups (one system call
// per tcpBatch cgroups) when many need reading, else one lookup per
// cgroup, as on kernels without batch operations.
func (p *Programs) ReadAllTCP(into map[uint64]TCPStats) error {
	clear(into)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refreshTCP(time.Now()); err != nil {
		// Read afresh next time.
		clear(p.cache)
		clear(p.dirty)
		p.lastFull = time.Time{}
		return fmt.Errorf("tcp stats of every cgroup: %w", err)
	}
	for id := range p.watched {
		into[id] = p.cache[id]
	}
	return nil
}

// ReadChangedTCP is ReadAllTCP for a caller that passes the same map at
// every call, and does not change its entries, and wants to know what
// moved (#29): it leaves the entries equal to what ReadAllTCP would store,
// deletes those of cgroups no longer watched, stores the others and
// returns their ids, in a slice valid until the next call. On error into
// is emptied.
func (p *Programs) ReadChangedTCP(into map[uint64]TCPStats) ([]uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moved = p.moved[:0]
	if err := p.refreshTCP(time.Now()); err != nil {
		clear(into)
		clear(p.cache)
		clear(p.dirty)
		p.lastFull = time.Time{}
		return nil, fmt.Errorf("tcp stats of every cgroup: %w", err)
	}
	for id := range into {
		if !p.watched[id] {
			delete(into, id)
		}
	}
	for id := range p.watched {
		if !p.dirty[id] {
			if _, ok := into[id]; ok {
				continue // stored by an earlier call, and not moved since
			}
		}
		into[id] = p.cache[id]
		p.moved = append(p.moved, id)
	}
	clear(p.dirty)
	return p.moved, nil
}

// store caches a read of a watched cgroup's counters, marking it dirty
// when it differs from the cached one (or there was none). p.mu is held.
func (p *Programs) store(id uint64, v TCPStats) {
	if old, ok := p.cache[id]; !ok || old != v {
		p.cache[id] = v
		p.dirty[id] = true
	}
}

// readBatch walks the counters map with batch lookups, storing each
// watched cgroup's counters in the cache (store). p.mu is held: the
// watched set, and so the map's keys, cannot change meanwhile. A watched
// cgroup the walk did not find is an error (ebpf.ErrKeyNotExist), whatever
// the cache held before: its earlier read of that cgroup would otherwise
// be reported, frozen, as current.
func (p *Programs) readBatch() error {
	size := max(p.batchSize, tcpBatch)
	if p.batchSeen == nil {
		p.batchSeen = make(map[uint64]bool, len(p.watched))
	}
	seen := p.batchSeen
	clear(seen)
	for {
		if len(p.batchKeys) < size {
			p.batchKeys = make([]uint64, size)
			p.batchValues = make([]netqosTcpCounters, size*p.ncpu)
		}
		var cursor ebpf.MapBatchCursor
		var err error
		for {
			var n int
			n, err = p.tcp.BatchLookup(&cursor, p.batchKeys[:size], p.batchValues[:size*p.ncpu], nil)
			for i := range n {
				if id := p.batchKeys[i]; p.watched[id] {
					p.store(id, sumTCP(p.batchValues[i*p.ncpu:(i+1)*p.ncpu]))
					seen[id] = true
				}
			}
			if err != nil {
				break
			}
		}
		if errors.Is(err, unix.ENOSPC) && size < int(p.tcp.MaxEntries()) {
			size *= 2 // a bucket holds more entries than the batch
			p.batchSize = size
			clear(seen)
			continue
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		break
	}
	for id := range p.watched {
		if !seen[id] {
			return fmt.Errorf("cgroup %d: %w", id, ebpf.ErrKeyNotExist)
		}
	}
	return nil
}

// sumTCP adds up a cgroup's per-CPU counters.
func sumTCP(perCPU []netqosTcpCounters) TCPStats {
	var st TCPStats
	for i := range perCPU {
		c := &perCPU[i]
		for b, n := range c.RttHist {
			st.RTT[b] += n
		}
		st.RTTCount += c.RttCount
		st.RTTTotal += time.Duration(c.RttSumUs) * time.Microsecond
		st.Retransmits += c.Retransmits
	}
	return st
}

// ProgramStats returns the kernel's run count and run time of each loaded
// program (non-zero only while BPF statistics are enabled).
func (p *Programs) ProgramStats() ([]bpf.ProgramStat, error) {
	var out []bpf.ProgramStat
	for _, name := range p.Attached() {
		st, err := p.programs[name].Stats()
		if err != nil {
			return nil, fmt.Errorf("stats of program %s: %w", name, err)
		}
		out = append(out, bpf.ProgramStat{Name: name, RunCount: st.RunCount, RunTime: st.Runtime})
	}
	return out, nil
}

// Close detaches the TCP signal programs and frees what Load created. A
// qdisc filter still holding the classifier keeps it (and its classes)
// alive in the kernel.
func (p *Programs) Close() error {
	var errs []error
	p.closeOnce.Do(func() {
		for _, l := range p.links {
			errs = append(errs, l.Close())
		}
		for _, prog := range p.programs {
			errs = append(errs, prog.Close())
		}
		p.mu.Lock() // not while ReadAllTCP reads the marks
		errs = append(errs, p.marks.Close())
		p.marks = nil
		p.mu.Unlock()
		for _, m := range []*ebpf.Map{p.classes, p.config, p.tcp, p.changed} {
			if m != nil {
				errs = append(errs, m.Close())
			}
		}
	})
	return errors.Join(errs...)
}
