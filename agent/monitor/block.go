package monitor

// blockBaseline is what the previous eBPF sample of a container left for
// the block-request figures over the interval.
type blockBaseline struct {
	buckets []uint64
	count   uint64
	valid   bool // from the previous sample
}

// sampleBlock computes the block-request figures over the interval since
// the previous eBPF sample: the number of completed requests the
// container submitted and their p99 latency. A count that went backwards
// restarts the interval.
func (e *ebpfSampler) sampleBlock(s *scratch, u *Usage, stats *EBPFStats) {
	b := &e.block
	buckets := trimZeros(stats.BlockBuckets)
	if buckets == nil && stats.BlockCount == 0 {
		b.buckets, b.count, b.valid = b.buckets[:0], 0, true
		return // no request yet (or not measured)
	}
	if b.valid && stats.BlockCount >= b.count {
		u.BlockIOs = stats.BlockCount - b.count
		if u.BlockIOs > 0 {
			s.deltas = bucketDeltas(s.deltas[:0], b.buckets, buckets)
			u.BlockP99 = bucketQuantile(s.deltas, 0.99)
		}
	}
	b.buckets, b.count, b.valid = append(b.buckets[:0], buckets...), stats.BlockCount, true
}
