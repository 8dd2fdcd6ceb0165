package main

import (
	"testing"
	"time"
)

// TestSliceKinds: the slices go in twos, or in fours with writer-alone
// slices (each measured slice after a frozen one), and the load generator pauses exactly in the writer-alone ones.
func TestSliceKinds(t *testing.T) {
	t.Parallel()
	want2 := []sliceKind{sliceAlone, sliceShared, sliceAlone, sliceShared}
	want3 := []sliceKind{sliceAlone, sliceShared, sliceAlone, sliceWriterAlone, sliceAlone, sliceShared, sliceAlone, sliceWriterAlone}
	for i, w := range want2 {
		if got := kindOf(i, false); got != w {
			t.Errorf("kindOf(%d, false) = %d, want %d", i, got, w)
		}
	}
	const slice = 2 * time.Second
	for i, w := range want3 {
		if got := kindOf(i, true); got != w {
			t.Errorf("kindOf(%d, true) = %d, want %d", i, got, w)
		}
		for _, at := range []time.Duration{time.Duration(i) * slice, time.Duration(i)*slice + slice - time.Millisecond} {
			if got, want := paused(at, slice, 4, 3), w == sliceWriterAlone; got != want {
				t.Errorf("paused(%v) = %v, want %v", at, got, want)
			}
		}
	}
	if paused(5*time.Second, slice, 0, 0) {
		t.Error("paused without a pattern")
	}
}

// TestIOShare: S is the rate beside over the rate alone, and the per-cycle
// ratios pair each shared window with the writer-alone window after it.
func TestIOShare(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	m := resourceMeter{ioShared: 6 * mib, ioAlone: 20 * mib, windows: []writeWindow{
		{Rate: 4 * mib}, {Alone: true, Rate: 16 * mib}, {Rate: 8 * mib}, {Alone: true, Rate: 24 * mib},
	}}
	s, what, err := ioShare(m)
	if err != nil || s != 0.3 {
		t.Fatalf("ioShare = %v, %v; want 0.3", s, err)
	}
	const want = "write rate 6.0 MiB/s beside the server (2 windows, min 4.0 median 6.0 max 8.0) / 20.0 MiB/s alone (2 windows, min 16.0 median 20.0 max 24.0); per cycle min 0.25 median 0.29 max 0.33"
	if what != want {
		t.Errorf("what =\n%s\nwant\n%s", what, want)
	}
	if s, _, _ := ioShare(resourceMeter{ioShared: mib}); s != 0 {
		t.Errorf("nothing written alone: S = %v, want 0", s)
	}
}
