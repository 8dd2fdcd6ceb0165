package benchutil

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ten := []time.Duration{10, 1, 9, 2, 8, 3, 7, 4, 6, 5} // 1..10, unsorted
	for _, tc := range []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{7}, 0.99, 7},
		{"min", ten, 0, 1},
		{"max", ten, 1, 10},
		{"median between ranks", ten, 0.5, 5},       // 5 + 0.5 x 1, truncated to whole nanoseconds
		{"p99 of 10 is near the max", ten, 0.99, 9}, // 9 + 0.91 x 1
		{"p90 of 10", ten, 0.9, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Percentile(tc.ds, tc.p, 0); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.ds, tc.p, got, tc.want)
			}
		})
	}
	ms := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}
	if got := Percentile(ms, 0.99, time.Millisecond); got != 199*time.Millisecond {
		t.Errorf("p99 of 100 ms and 200 ms = %v, want 199ms (interpolated)", got)
	}
	if ten[0] != 10 {
		t.Errorf("Percentile sorted its input: %v", ten)
	}
}
