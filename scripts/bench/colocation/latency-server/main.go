// Command latency-server is the latency-critical service of the colocation
// benchmark: every request burns --work of CPU (hashing) and answers 200.
// Its latency is what best-effort neighbours must not hurt. With --fsync,
// a request also writes and fsyncs 4 KiB, unless its query is "nofsync"
// (the io scenario's writer-alone slices: the same CPU work and wakeups,
// no disk I/O).
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	work := flag.Duration("work", 500*time.Microsecond, "CPU time burnt per request")
	fsyncDir := flag.String("fsync", "", "directory in which every request also writes 4 KiB to a file of its own and fsyncs it (a database's commit)")
	flag.Parse()
	rounds := calibrate(*work)
	var journal *os.File
	if *fsyncDir != "" {
		f, err := os.OpenFile(filepath.Join(*fsyncDir, "latency-server.journal"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "latency-server:", err)
			os.Exit(1)
		}
		journal = f
	}
	var mu sync.Mutex
	record := make([]byte, 4096)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		burn(rounds)
		if journal != nil && r.URL.RawQuery != "nofsync" {
			mu.Lock()
			_, err := journal.WriteAt(record, 0)
			if err == nil {
				err = journal.Sync()
			}
			mu.Unlock()
			if err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	if err := http.ListenAndServe(*listen, nil); err != nil {
		fmt.Fprintln(os.Stderr, "latency-server:", err)
		os.Exit(1)
	}
}

// burn does a fixed amount of CPU work: its duration stretches when the CPU
// is taken away, which is what the benchmark measures.
func burn(rounds int) [32]byte {
	var sum [32]byte
	for range rounds {
		sum = sha256.Sum256(sum[:])
	}
	return sum
}

// calibrate returns how many rounds of burn take d on this machine, taking
// the fastest of several tries (the least disturbed).
func calibrate(d time.Duration) int {
	const probe = 20000
	best := time.Duration(1 << 62)
	for range 5 {
		start := time.Now()
		burn(probe)
		best = min(best, time.Since(start))
	}
	return max(1, int(float64(probe)*float64(d)/float64(best)))
}
