package monitor

import (
	"math"
	"time"
)

// bucketDeltas returns dst[:0] filled with, for every log2 bucket, how many latencies
// cur counted since prev. A bucket that went backwards means the eBPF
// counters were reset (map entry recreated): cur is then taken whole.
func bucketDeltas(dst, prev, cur []uint64) []uint64 {
	dst = dst[:0]
	for i, v := range cur {
		if i < len(prev) && v < prev[i] {
			return append(dst[:0], cur...)
		}
		var before uint64
		if i < len(prev) {
			before = prev[i]
		}
		dst = append(dst, v-before)
	}
	return dst
}

// bucketQuantile returns the q-quantile (0 < q <= 1) of the latencies
// counted in a log2 histogram, where counts[i] holds latencies in
// [2^i, 2^(i+1)) ns. The rank q*total is located in its bucket and the
// value interpolated linearly between the bucket's bounds, as Prometheus's
// histogram_quantile does; the error is therefore bounded by the bucket's
// width (a factor of two). An empty histogram returns 0.
func bucketQuantile(counts []uint64, q float64) time.Duration {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var below float64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		if below+float64(c) >= rank {
			lower := math.Ldexp(1, i)
			frac := (rank - below) / float64(c)
			return time.Duration(lower + frac*lower) // upper bound is 2*lower
		}
		below += float64(c)
	}
	return time.Duration(math.Ldexp(1, len(counts))) // not reached: rounding
}
