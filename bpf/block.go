package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The attach points of the block-request latency programs (bpf/io.c):
// a request's start, in the submitting task's context, and its completion.
const (
	BlockStartAttach = "tp_btf/block_io_start"
	BlockDoneAttach  = "tp_btf/block_rq_complete"
)

// BlockKernelNeed says why the block-request programs may be missing: the
// block_io_start tracepoint appeared in Linux 6.5.
const BlockKernelNeed = "block_io_start needs Linux >= 6.5"

// ioSyncObjects are the synchronous-write programs of io.c and their own
// map; they are loaded apart from the block-request ones (Load).
type ioSyncObjects struct {
	FsyncBegin *ebpf.Program `ebpf:"fsync_begin"`
	FsyncEnd   *ebpf.Program `ebpf:"fsync_end"`
	SyncStart  *ebpf.Map     `ebpf:"sync_start"`
}

// Close closes the programs and the map.
func (o *ioSyncObjects) Close() error {
	return _IoClose(o.FsyncBegin, o.FsyncEnd, o.SyncStart)
}

// ioBlockObjects are the block-request programs of io.c and their maps.
type ioBlockObjects struct {
	BlkStart    *ebpf.Program `ebpf:"blk_start"`
	BlkDone     *ebpf.Program `ebpf:"blk_done"`
	BlkInflight *ebpf.Map     `ebpf:"blk_inflight"`
	BlkStats    *ebpf.Map     `ebpf:"blk_stats"`
}

// Close closes the programs and the maps.
func (o *ioBlockObjects) Close() error {
	return _IoClose(o.BlkStart, o.BlkDone, o.BlkInflight, o.BlkStats)
}

// walkedBlockCounters is blockCounters for ReadAll's reads: during a walk
// (walkBlocks) it answers from the walk's read. m.mu (read) and m.batchMu
// must be held: the walk is batchMu's, and Stats, which holds m.mu only,
// must not see it while it is written.
func (m *Monitor) walkedBlockCounters(cgroupID uint64) (ioBlkCounters, error) {
	if m.blkWalk.valid {
		return m.blkWalk.sums[cgroupID], nil // absent: no request completed
	}
	return m.blockCounters(cgroupID)
}

// blockCounters sums a cgroup's block-request counters over CPUs; zero
// when it has completed no request yet or the programs are not loaded.
// m.mu must be held.
func (m *Monitor) blockCounters(cgroupID uint64) (ioBlkCounters, error) {
	var sum ioBlkCounters
	if m.blk == nil || m.blk.BlkStats == nil {
		return sum, nil
	}
	m.blockLookups.Add(1)
	var perCPU []ioBlkCounters
	if err := m.blk.BlkStats.Lookup(cgroupID, &perCPU); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return sum, nil
		}
		return sum, fmt.Errorf("block counters: %w", err)
	}
	return sumBlock(perCPU), nil
}

// sumBlock adds up a blk_stats entry's values (one per CPU).
func sumBlock(perCPU []ioBlkCounters) ioBlkCounters {
	var sum ioBlkCounters
	for i := range perCPU {
		v := &perCPU[i]
		sum.Count += v.Count
		sum.Ns += v.Ns
		sum.Bytes += v.Bytes
		for b, n := range v.Hist {
			sum.Hist[b] += n
		}
	}
	return sum
}

// blockWalk is the block counters of one walk of blk_stats, summed over
// CPUs, for the cgroups a full read looks up (#29): one batch lookup of
// the map (a few system calls, one when it is empty) replaces a lookup
// per cgroup, most of which found no entry (a cgroup that completed no
// block request has none). Bounded by the tracked set. Its buffers are
// kept between walks.
type blockWalk struct {
	valid  bool // set between walkBlocks and endBlockWalk
	sums   map[uint64]ioBlkCounters
	keys   []uint64
	values []ioBlkCounters // len(keys) * ncpu
	size   int             // the batch size that fits the map's buckets
}

// walkBlocks reads the block counters of the cgroups in want (the plan's)
// with batch lookups of blk_stats, for walkedBlockCounters to answer from until
// endBlockWalk. Without block programs, or without batch lookups of that
// map, it leaves blockCounters to look each cgroup up (nil). m.mu (read)
// and m.batchMu must be held.
func (m *Monitor) walkBlocks(want map[uint64]bool) error {
	if m.blk == nil || m.blk.BlkStats == nil || m.blkNoBatch {
		return nil
	}
	w := &m.blkWalk
	if w.sums == nil {
		w.sums = map[uint64]ioBlkCounters{}
	}
	clear(w.sums)
	w.size = max(w.size, statsBatch)
	for {
		if len(w.keys) < w.size {
			w.keys = make([]uint64, w.size)
			w.values = make([]ioBlkCounters, w.size*m.ncpu)
		}
		err := m.walkBlockBatch(want, w.size)
		switch {
		case err == nil:
			w.valid = true
			return nil
		case errors.Is(err, unix.ENOSPC) && w.size < int(m.blk.BlkStats.MaxEntries()):
			w.size *= 2 // a bucket outgrew the batch: start over
			clear(w.sums)
		case errors.Is(err, ebpf.ErrNotSupported):
			m.blkNoBatch = true
			return nil
		default:
			return fmt.Errorf("block counters: %w", err)
		}
	}
}

// walkBlockBatch walks blk_stats size entries at a time into m.blkWalk's
// sums, keeping the cgroups in want.
func (m *Monitor) walkBlockBatch(want map[uint64]bool, size int) error {
	w := &m.blkWalk
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.blk.BlkStats.BatchLookup(&cursor, w.keys[:size], w.values[:size*m.ncpu], nil)
		for i := range n {
			if _, ok := want[w.keys[i]]; ok {
				w.sums[w.keys[i]] = sumBlock(w.values[i*m.ncpu : (i+1)*m.ncpu])
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

// endBlockWalk has blockCounters look cgroups up again.
func (m *Monitor) endBlockWalk() { m.blkWalk.valid = false }
