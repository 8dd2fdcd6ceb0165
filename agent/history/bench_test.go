package history

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkFullHistory measures what 100 containers' full 15 minutes at
// the agent's default 100 ms monitor interval cost: the Go heap and the
// process's resident memory (VmRSS) before and after, reported as
// heap-MiB and rss-MiB, and the time to record one monitor pass of 100
// containers (ns/op). Each guaranteed container is delayed by 8 culprits.
//
//	go test -run '^$' -bench FullHistory -benchtime 1x ./agent/history/
func BenchmarkFullHistory(b *testing.B) {
	const containers = 100
	interval := 100 * time.Millisecond
	samples := make([]Sample, containers)
	victims := make([]Victim, 0, containers/2)
	for i := range samples {
		samples[i] = Sample{ContainerID: fmt.Sprintf("container-%03d", i), TaskID: fmt.Sprintf("task-%03d", i), Revocable: i%2 == 1}
		if i%2 == 0 {
			culprits := map[string]float64{}
			for c := range 8 {
				culprits[fmt.Sprintf("container-%03d", 2*c+1)] = 0
			}
			victims = append(victims, Victim{ContainerID: samples[i].ContainerID, TaskID: samples[i].TaskID, Culprits: culprits})
		}
	}
	heap0, rss0 := memory(b)
	s := New(Config{Window: DefaultWindow, Interval: interval})
	passes := int(DefaultWindow/interval) + 1
	now := t0
	pass := func(i int) {
		now = t0.Add(time.Duration(i) * interval)
		for j := range samples {
			u := &samples[j]
			u.Time, u.CPUs, u.MemBytes = now, float64(i%7)*0.1, uint64(100+i%13)<<20
			u.NetTxMbps, u.NetRxMbps, u.RunqP99 = float64(i%11), float64(i%5), time.Duration(i%17)*time.Microsecond
			u.DelayedByRevocableSecs += 0.001
		}
		s.Record(now, samples)
		if i%int(DelayStep/interval) == 0 {
			for _, v := range victims {
				for c := range v.Culprits {
					v.Culprits[c] += 0.01
				}
			}
			s.RecordDelays(now, victims)
		}
	}
	for i := range passes {
		pass(i)
	}
	heap1, rss1 := memory(b)
	b.ResetTimer()
	for i := range b.N {
		pass(passes + i)
	}
	b.StopTimer()
	b.ReportMetric(float64(heap1-heap0)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(rss1-rss0)/(1<<20), "rss-MiB")
	if got := len(s.Query(Query{})); got != containers {
		b.Fatalf("%d series kept, want %d", got, containers)
	}
	runtime.KeepAlive(s)
}

// memory returns the live heap and the resident set after a collection.
func memory(b *testing.B) (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			rss = kb << 10
		}
	}
	return ms.HeapAlloc, rss
}
