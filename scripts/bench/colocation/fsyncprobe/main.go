// Command fsyncprobe times a database's commit on the file system in its
// working directory: it writes 4 KiB at the start of a file and fsyncs it,
// --n times, --gap apart, and prints the latencies' p50, p90, p99 and
// maximum (benchutil.Percentile). fsync-interference.sh runs it beside
// the io scenario's writers on the benchmark's modelled disk.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/slackline/slackline/internal/benchutil"
)

func main() {
	path := flag.String("file", "fsyncprobe.dat", "file to write and fsync")
	n := flag.Int("n", 300, "fsyncs")
	gap := flag.Duration("gap", 5*time.Millisecond, "pause after each fsync")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "fsyncprobe: --n must be positive")
		os.Exit(2)
	}
	f, err := os.OpenFile(*path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fsyncprobe:", err)
		os.Exit(1)
	}
	defer os.Remove(*path)
	record := make([]byte, 4096)
	lat := make([]time.Duration, 0, *n)
	for range *n {
		start := time.Now()
		_, err := f.WriteAt(record, 0)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fsyncprobe:", err)
			os.Exit(1)
		}
		lat = append(lat, time.Since(start))
		time.Sleep(*gap)
	}
	q := func(p float64) time.Duration { return benchutil.Percentile(lat, p, 10*time.Microsecond) }
	fmt.Printf("fsync n=%d p50=%v p90=%v p99=%v max=%v\n", len(lat), q(0.5), q(0.9), q(0.99), q(1))
}
