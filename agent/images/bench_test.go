package images

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// BenchmarkAcquireCached measures what a launch of a cached image adds
// before the containerizer: the lookup, the lease (written to disk) and a
// collection. It reports the median and the 99th percentile.
//
//	sudo go test -run '^$' -bench AcquireCached -benchtime 200x ./agent/images/
func BenchmarkAcquireCached(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: layers keep their owners")
	}
	reg := newRegistry(b)
	ref := reg.push(b, "bench:v1", testImage(b, testLayer(b, tarEntry{name: "f", body: "x"})))
	s, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), ref, "warm"); err != nil {
		b.Fatal(err)
	}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if _, err := s.Acquire(context.Background(), ref, fmt.Sprintf("c%d", i)); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "p99-ms")
}
