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
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	work := flag.Duration("work", 500*time.Microsecond, "CPU time burnt per request")
	fsyncDir := flag.String("fsync", "", "directory in which every request also writes 4 KiB to a file of its own and fsyncs it (a database's commit)")
	cacheMiB := flag.Int("cache-mib", 0, "write a file of this many MiB in the working directory at start; every request then reads "+strconv.Itoa(pagesPerRequest)+" random 4 KiB pages of it (a page-cache working set: reclaim of its pages costs the requests disk reads)")
	flag.Parse()
	rounds := calibrate(*work)
	var cache *os.File
	if *cacheMiB > 0 {
		f, err := writeCache("latency-server.cache", *cacheMiB)
		if err != nil {
			fmt.Fprintln(os.Stderr, "latency-server:", err)
			os.Exit(1)
		}
		cache = f
	}
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
		if cache != nil {
			if err := readPages(cache, *cacheMiB); err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
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

// pagesPerRequest is how many pages of the cache file a request reads.
const pagesPerRequest = 8

// writeCache writes a file of mib MiB of non-zero data and syncs it, so
// that its pages are clean page cache (reclaimable at once) and a reclaimed
// page is read back from the disk.
func writeCache(path string, mib int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for range mib {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	// Read it twice: the kernel then counts its pages as in use (active
	// file pages, the working set the agent's estimator reads) from the
	// start, as a server's hot cache is, instead of only once the random
	// reads of the requests have touched every page twice (a minute or
	// more at 400 requests per second), during which the estimator offered
	// the pages as memory slack (#28).
	for range 2 {
		for off := int64(0); off < int64(mib)<<20; off += int64(len(buf)) {
			if _, err := f.ReadAt(buf, off); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	return f, nil
}

// readPages reads pagesPerRequest random 4 KiB pages of the cache file.
func readPages(f *os.File, mib int) error {
	var page [4096]byte
	pages := mib << 8
	for range pagesPerRequest {
		if _, err := f.ReadAt(page[:], int64(rand.IntN(pages))*4096); err != nil {
			return err
		}
	}
	return nil
}
