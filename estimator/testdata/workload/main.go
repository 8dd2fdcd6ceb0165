// Command workload is the latency-sensitive server of the "diurnal" trace and
// the load generator that drives it (see ../README.md).
//
//	go run ./estimator/testdata/workload serve --listen 127.0.0.1:18080
//	go run ./estimator/testdata/workload load --target http://127.0.0.1:18080 --duration 160s
//
// serve answers GET /work by hashing 64 KiB --rounds times (about 2 ms of CPU
// here) with GOMAXPROCS threads. load sends requests open-loop (Poisson
// arrivals, as users do, not a closed loop that slows down with the server)
// at a rate that follows one compressed day per --day: a night at --base
// requests per second, a morning hump at 65% of --peak and an evening
// peak at --peak, with ±10% noise per second.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: workload serve|load [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18080", "address")
	rounds := fs.Int("rounds", 40, "64 KiB hashes per request")
	fs.Parse(args)
	block := make([]byte, 64<<10)
	http.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256(block)
		for range *rounds - 1 {
			h := sha256.New()
			h.Write(sum[:])
			h.Write(block)
			h.Sum(sum[:0])
		}
		fmt.Fprintf(w, "%x\n", sum[:4])
	})
	return http.ListenAndServe(*listen, nil)
}

// rate returns the request rate at phase x in [0, 1) of the day.
func rate(x, base, peak float64) float64 {
	bump := func(center, width float64) float64 {
		d := (x - center) / width
		return math.Exp(-d * d)
	}
	// A morning hump at 65% of the peak, the evening peak, quiet nights.
	level := 0.65*bump(0.35, 0.1) + bump(0.72, 0.08)
	return base + (peak-base)*math.Min(1, level)
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("target", "http://127.0.0.1:18080", "server")
	duration := fs.Duration("duration", 160*time.Second, "how long to send")
	day := fs.Duration("day", 150*time.Second, "length of one compressed day")
	base := fs.Float64("base", 30, "requests per second at night")
	peak := fs.Float64("peak", 600, "requests per second at the evening peak")
	seed := fs.Uint64("seed", 7, "random seed")
	fs.Parse(args)
	rng := rand.New(rand.NewPCG(*seed, 0))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var sent, failed atomic.Int64
	start := time.Now()
	next := start
	noise, noiseAt := 1.0, start
	for ctx.Err() == nil {
		now := time.Now()
		if now.Sub(noiseAt) >= time.Second {
			noise, noiseAt = 0.9+0.2*rng.Float64(), now
		}
		x := math.Mod(now.Sub(start).Seconds()/day.Seconds(), 1)
		next = next.Add(time.Duration(rng.ExpFloat64() / (rate(x, *base, *peak) * noise) * float64(time.Second)))
		time.Sleep(time.Until(next))
		sent.Add(1)
		go func() {
			resp, err := client.Get(*target + "/work")
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	fmt.Fprintf(os.Stderr, "sent %d requests, %d failed\n", sent.Load(), failed.Load())
	return nil
}
