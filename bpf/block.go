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

// blockCounters sums a cgroup's block-request counters over CPUs; zero
// when it has completed no request yet or the programs are not loaded.
// m.mu must be held.
func (m *Monitor) blockCounters(cgroupID uint64) (ioBlkCounters, error) {
	var sum ioBlkCounters
	if m.io == nil || m.io.BlkStats == nil {
		return sum, nil
	}
	var perCPU []ioBlkCounters
	if err := m.io.BlkStats.Lookup(cgroupID, &perCPU); err != nil {
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
