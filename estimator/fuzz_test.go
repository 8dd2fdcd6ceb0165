package estimator_test

import (
	"math"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// FuzzEstimateBounds checks, for usage and predictive over a sequence of
// estimates on arbitrary histories, that the estimate is never negative,
// never holds more cpus than the guaranteed containers' allocations add up
// to, never more than Total, and never anything but cpus and mem.
func FuzzEstimateBounds(f *testing.F) {
	f.Add([]byte{10, 200, 3, 40, 90, 250, 0, 0, 7, 7, 7, 7}, uint8(4))
	f.Add([]byte{255, 0, 255, 0, 255, 0, 255, 0, 1, 2, 3}, uint8(2))
	f.Add([]byte{1}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, totalCPUs uint8) {
		next := func() float64 {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return float64(b)
		}
		for _, name := range []string{"usage", "predictive"} {
			cfg := estimator.DefaultConfig()
			cfg.Memory = true
			est, err := estimator.New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			rest := data
			containers := make([]estimator.Container, 3)
			var guaranteedCPUs float64
			for i := range containers {
				alloc := next() / 32 // up to ~8 cpus
				containers[i] = estimator.Container{
					ID: string(rune('a' + i)), Revocable: i == 2,
					Allocated: resources.New(alloc, next()*8, 0),
				}
				if i != 2 {
					guaranteedCPUs += resources.New(alloc, 0, 0).CPUs()
				}
			}
			now := time.Unix(1_700_000_000, 0)
			total := resources.New(float64(totalCPUs)/16, 0, 0)
			for round := range 40 {
				for i := range containers {
					for range 5 {
						cpu := next() / 40
						if int(cpu*40)%97 == 1 {
							cpu = math.NaN()
						}
						containers[i].History = append(containers[i].History, estimator.Sample{
							Time: now.Add(time.Duration(len(containers[i].History)+1) * 200 * time.Millisecond),
							CPU:  cpu, MemBytes: uint64(next()) << 22,
						})
					}
				}
				now = now.Add(time.Second)
				got := est.Estimate(estimator.Input{Now: now, Total: total, Containers: containers})
				switch {
				case got.CPUs() < 0 || got.Mem() < 0:
					t.Fatalf("%s round %d: negative estimate %v", name, round, got)
				case got.CPUs() > guaranteedCPUs+1e-9:
					t.Fatalf("%s round %d: estimate %v exceeds guaranteed allocations %v", name, round, got, guaranteedCPUs)
				case total.CPUs() > 0 && got.CPUs() > total.CPUs()+1e-9:
					t.Fatalf("%s round %d: estimate %v exceeds total %v", name, round, got, total)
				case got.Disk() != 0 || len(got.Ports()) != 0:
					t.Fatalf("%s round %d: estimate %v holds more than cpus and mem", name, round, got)
				}
			}
			data = rest
		}
	})
}
