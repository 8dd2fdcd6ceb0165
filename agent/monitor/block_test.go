package monitor

import (
	"testing"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestEBPFBlockFigures: the block-request figures over an interval (count
// and p99 of the bucket deltas); none before the first request; a count
// that went backwards restarts the interval.
func TestEBPFBlockFigures(t *testing.T) {
	t.Parallel()
	e := &ebpfSampler{}
	var s scratch
	sample := func(st EBPFStats) Usage {
		u := Usage{Stats: &slacklinev1.ResourceStatistics{}}
		e.sampleBlock(&s, &u, &st)
		return u
	}
	if u := sample(EBPFStats{}); u.BlockIOs != 0 || u.BlockP99 != 0 {
		t.Fatalf("no request yet: %d, %v", u.BlockIOs, u.BlockP99)
	}
	// 200 requests in [2^18, 2^19) ns: the first interval counts them all.
	u := sample(EBPFStats{BlockBuckets: buckets(32, map[int]uint64{18: 200}), BlockCount: 200})
	if u.BlockIOs != 200 || u.BlockP99 < 1<<18 || u.BlockP99 > 1<<19 {
		t.Errorf("first interval: %d requests, p99 %v; want 200 in [2^18, 2^19) ns", u.BlockIOs, u.BlockP99)
	}
	// 97 more fast and 3 in [2^24, 2^25) ns (about 25 ms): the p99 (rank
	// 99 of 100) is among the slow three.
	u = sample(EBPFStats{BlockBuckets: buckets(32, map[int]uint64{18: 297, 24: 3}), BlockCount: 300})
	if u.BlockIOs != 100 || u.BlockP99 < 1<<24 || u.BlockP99 > 1<<25 {
		t.Errorf("second interval: %d requests, p99 %v; want 100 with p99 in [2^24, 2^25) ns", u.BlockIOs, u.BlockP99)
	}
	// Nothing new: no interval figures.
	if u := sample(EBPFStats{BlockBuckets: buckets(32, map[int]uint64{18: 297, 24: 3}), BlockCount: 300}); u.BlockIOs != 0 || u.BlockP99 != 0 {
		t.Errorf("idle interval: %d requests, p99 %v; want none", u.BlockIOs, u.BlockP99)
	}
	// Counts went backwards (the entry aged out and was made again).
	if u := sample(EBPFStats{BlockBuckets: buckets(32, map[int]uint64{18: 5}), BlockCount: 5}); u.BlockIOs != 0 || u.BlockP99 != 0 {
		t.Errorf("after counters went backwards: %d requests, p99 %v; want no interval figures", u.BlockIOs, u.BlockP99)
	}
}
