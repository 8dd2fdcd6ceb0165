package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/slackline/slackline/internal/tick"
	"golang.org/x/sys/unix"
)

// Changed marks (#29). Every program that adds to a tracked cgroup's
// counters (cgroup_stats, blk_stats) then sets the cgroup's flag in the
// `changed` array (common.h's mark_changed). ReadAll clears the flags it
// finds set and looks up only the cgroups whose flag was set, reusing what
// it read before for the others: an idle cgroup costs no system call,
// where a batch lookup walked the whole counters map (every bucket of its
// MaxCgroups) at every pass and the block counters cost a lookup per
// cgroup. Flags are picked by a hash of the cgroup id, so cgroups may share
// one: a false mark costs a lookup, never a missed change. Every
// Config.FullReadInterval (default fullReadInterval; the agent puts it on
// its --monitor-idle-refresh, 5 s) ReadAll reads every cgroup anyway, at
// the first pass after each multiple of it on the clock (tick.Crossed; a
// safety net: a mark set before its counter's store is visible, on a
// weakly ordered CPU, is caught within it).

const (
	changedFlags = 4096 // changed.h CHANGED_FLAGS
	changedShift = 52   // changed.h CHANGED_SHIFT: 64 - log2(changedFlags)

	// fullReadInterval bounds how long ReadAll goes without reading every
	// tracked cgroup's counters, unless Config.FullReadInterval says
	// otherwise.
	fullReadInterval = time.Second

	// walkAbove: when more cgroups than this need reading in a pass, one
	// batch walk of the counters map is cheaper than their lookups.
	walkAbove = statsBatch / 4
)

// changedFlag returns the index of a cgroup's flag: changed.h's
// changed_mark, bit for bit.
func changedFlag(cgroupID uint64) int {
	return int((cgroupID*0x9E3779B97F4A7C15)>>changedShift) & (changedFlags - 1)
}

// ChangedMarks are a program's changed flags (an array map of one
// CHANGED_FLAGS-byte value, BPF_F_MMAPABLE, set as changed.h's
// changed_mark does), mapped into memory. Take copies and clears them into
// a snapshot that the pass then asks about with Marked. Package netqos
// marks its TCP counters so too. Not safe for concurrent use.
type ChangedMarks struct {
	mem   []byte
	words []uint64 // views mem
	snap  [changedFlags / 8]uint64
}

// MapChanged maps a changed array's one value.
func MapChanged(m *ebpf.Map) (*ChangedMarks, error) {
	if vs := int(m.ValueSize()); vs != changedFlags {
		return nil, fmt.Errorf("changed flags: value size %d, want %d", vs, changedFlags)
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (changedFlags+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map changed flags: %w", err)
	}
	return &ChangedMarks{mem: mem, words: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), changedFlags/8)}, nil
}

// Take moves the flags set since the last take into the snapshot and
// clears them, eight at a time with an atomic exchange (a flag a program
// sets meanwhile is either taken now or kept for the next take).
func (c *ChangedMarks) Take() {
	for i := range c.words {
		if atomic.LoadUint64(&c.words[i]) == 0 {
			c.snap[i] = 0
			continue
		}
		c.snap[i] = atomic.SwapUint64(&c.words[i], 0)
	}
}

// Marked reports whether the cgroup's flag was set at the last Take.
func (c *ChangedMarks) Marked(cgroupID uint64) bool {
	flags := unsafe.Slice((*byte)(unsafe.Pointer(&c.snap[0])), changedFlags)
	return flags[changedFlag(cgroupID)] != 0
}

// Close unmaps the flags; nil and repeated calls are no-ops.
func (c *ChangedMarks) Close() error {
	if c == nil || c.mem == nil {
		return nil
	}
	c.words = nil
	err := unix.Munmap(c.mem)
	c.mem = nil
	return err
}

// cachedCounters is what ReadAll last read of a tracked cgroup (kept by
// pointer, updated in place: at about 1 KB, a copy per lookup made
// planRead's walk over 100 cgroups cost 40 µs): its
// cgroup_stats entry summed over CPUs (without the resident counters,
// which are read from memory at every pass) and its block counters.
type cachedCounters struct {
	epoch uint32 // the tracking they belong to
	// moved is set when a read found counters other than the cached ones
	// (or the entry is new), and cleared by ReadChanged once it handed
	// them out; running is set when ReadChanged last found the cgroup running
	// (a run its counters do not have yet). Counters resident on a CPU,
	// which move without the map telling, are compared with the last
	// handed out instead.
	// They sit beside epoch, before the counters, so that a pass that
	// finds a cgroup unchanged loads one cache line of its entry, not two
	// (#29: the entries are cold after the pass's 100 ms of sleep).
	moved, running bool
	stats          schedCgroupCounters
	blk            ioBlkCounters
}

// setStats stores a read of the cgroup_stats entry, noting whether it moved.
func (c *cachedCounters) setStats(stats schedCgroupCounters) {
	if stats != c.stats {
		c.stats, c.moved = stats, true
	}
}

// ReadPlan is what one pass over changed-marked counters reads (ReadAll's
// here, package netqos's ReadAllTCP).
type ReadPlan struct {
	// Full: every cgroup is read (no marks, the first pass, or the full
	// read interval has passed).
	Full bool
	// Walk: the counters map is read with batch lookups rather than one
	// lookup per cgroup in Read.
	Walk bool
	// Read are the cgroups to look up (all of them when Full).
	Read []uint64
}

// PlanRead decides which of the cgroups in ids a pass at now reads: all of
// them without marks (marked nil), at the first pass (lastFull zero), when
// a boundary of fullEvery's grid passed since the last full read
// (tick.Crossed: the full reads of every map, and the monitor's file
// refreshes, fall in the pass after the boundary, #29) or the clock went
// back;
// otherwise those stale (no usable cached read: stale(id, ids[id])) and
// those marked changed. Walk when the pass is full or more than walkAbove
// cgroups need reading. read is a reusable buffer.
func PlanRead[V any](now, lastFull time.Time, fullEvery time.Duration, ids map[uint64]V,
	stale func(id uint64, v V) bool, marked func(uint64) bool, walkAbove int, read []uint64) ReadPlan {
	plan := ReadPlan{Read: read[:0]}
	plan.Full = marked == nil || lastFull.IsZero() || now.Before(lastFull) || tick.Crossed(lastFull, now, fullEvery)
	for id, v := range ids {
		if plan.Full || stale(id, v) || marked(id) {
			plan.Read = append(plan.Read, id)
		}
	}
	plan.Walk = plan.Full || len(plan.Read) > walkAbove
	return plan
}

// planRead is PlanRead over the tracked cgroups (id -> epoch): a cgroup
// is stale when it has no cached entry of its current tracking (epoch).
func planRead(now, lastFull time.Time, fullEvery time.Duration, tracked map[uint64]uint32,
	cache map[uint64]*cachedCounters, marked func(uint64) bool, read []uint64) ReadPlan {
	stale := func(id uint64, epoch uint32) bool {
		c := cache[id]
		return c == nil || c.epoch != epoch
	}
	return PlanRead(now, lastFull, fullEvery, tracked, stale, marked, walkAbove, read)
}

// refresh brings m.cache up to date for a pass at now (planRead) and
// drops the entries of cgroups no longer tracked. m.mu (read) and
// m.batchMu must be held.
func (m *Monitor) refresh(now time.Time) error {
	var marked func(uint64) bool
	if m.marks != nil {
		// Taken before the reads: a change after this is marked again.
		m.marks.Take()
		marked = m.marks.Marked
	}
	plan := planRead(now, m.lastFull, m.fullEvery, m.epochs, m.cache, marked, m.readIDs)
	m.readIDs = plan.Read
	if plan.Full {
		m.lastFull = now
		for id := range m.cache {
			if _, ok := m.epochs[id]; !ok {
				delete(m.cache, id)
			}
		}
	}
	m.readsFull += boolCount(plan.Full)
	m.readsLookedUp += uint64(len(plan.Read))
	m.readsReused += uint64(len(m.epochs) - len(plan.Read))
	if plan.Walk && !m.noBatch {
		err := m.walkAll(plan)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
		m.noBatch = true
	}
	var perCPU []schedCgroupCounters
	for _, id := range plan.Read {
		if err := m.stats.Lookup(id, &perCPU); err != nil {
			return fmt.Errorf("cgroup %d: %w", id, err)
		}
		if err := m.cacheCounters(id, perCPU); err != nil {
			return err
		}
	}
	return nil
}

// walkAll reads the whole counters map with batch lookups into the cache:
// every tracked cgroup's counters (fresh values are never wrong); the
// block counters of the plan's cgroups only, from one batch walk of their
// map too (walkBlocks).
func (m *Monitor) walkAll(plan ReadPlan) error {
	if m.walked == nil {
		m.walked = map[uint64]bool{}
	}
	clear(m.walked)
	for _, id := range plan.Read {
		m.walked[id] = false // not read yet
	}
	if err := m.walkBlocks(m.walked); err != nil {
		return err
	}
	defer m.endBlockWalk()
	err := m.readBatch(func(id uint64, perCPU []schedCgroupCounters) error {
		epoch, tracked := m.epochs[id]
		if !tracked {
			return nil
		}
		if _, inPlan := m.walked[id]; inPlan {
			m.walked[id] = true
			return m.cacheCounters(id, perCPU)
		}
		if c := m.cache[id]; c != nil && c.epoch == epoch {
			c.setStats(sumCounters(perCPU)) // its block counters did not change
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Track creates every tracked cgroup's entry: one the walk did not
	// find was removed by something else. Stats reports it so.
	var perCPU []schedCgroupCounters
	for id, done := range m.walked {
		if done {
			continue
		}
		if err := m.stats.Lookup(id, &perCPU); err != nil {
			return fmt.Errorf("cgroup %d: %w", id, err)
		}
		if err := m.cacheCounters(id, perCPU); err != nil {
			return err
		}
	}
	return nil
}

// cacheCounters stores a tracked cgroup's counters, read from its
// cgroup_stats entry (perCPU) and its block counters (looked up, or from
// the walk's read). m.mu (read) and m.batchMu must be held.
func (m *Monitor) cacheCounters(id uint64, perCPU []schedCgroupCounters) error {
	blk, err := m.walkedBlockCounters(id)
	if err != nil {
		return fmt.Errorf("cgroup %d: %w", id, err)
	}
	c := m.cache[id]
	if c == nil {
		c = &cachedCounters{moved: true}
		m.cache[id] = c
	}
	epoch := m.epochs[id]
	if c.epoch != epoch || c.blk != blk {
		c.moved = true
	}
	c.epoch, c.blk = epoch, blk
	c.setStats(sumCounters(perCPU))
	return nil
}

// ReadCounts says how ReadAll read the counters since Load: passes that
// read every cgroup (full), cgroups looked up, and cgroups whose last
// counters were reused because no program marked them changed.
type ReadCounts struct {
	Full, LookedUp, Reused uint64
	// BlockLookedUp counts the cgroups whose block counters were looked
	// up one by one (a full read walks their map in batches instead,
	// where the kernel can: #29).
	BlockLookedUp uint64
}

// ReadCounts returns how ReadAll has read so far.
func (m *Monitor) ReadCounts() ReadCounts {
	m.batchMu.Lock()
	defer m.batchMu.Unlock()
	return ReadCounts{Full: m.readsFull, LookedUp: m.readsLookedUp, Reused: m.readsReused, BlockLookedUp: m.blockLookups.Load()}
}

func boolCount(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
