package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
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

// blockCounters sums a cgroup's block-request counters over CPUs; zero
// when it has completed no request yet or the programs are not loaded.
// m.mu must be held.
func (m *Monitor) blockCounters(cgroupID uint64) (ioBlkCounters, error) {
	var sum ioBlkCounters
	if m.blk == nil || m.blk.BlkStats == nil {
		return sum, nil
	}
	var perCPU []ioBlkCounters
	if err := m.blk.BlkStats.Lookup(cgroupID, &perCPU); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return sum, nil
		}
		return sum, fmt.Errorf("block counters: %w", err)
	}
	for i := range perCPU {
		v := &perCPU[i]
		sum.Count += v.Count
		sum.Ns += v.Ns
		sum.Bytes += v.Bytes
		for b, n := range v.Hist {
			sum.Hist[b] += n
		}
	}
	return sum, nil
}
