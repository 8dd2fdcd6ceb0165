// Command heldout runs the workloads of the held-out traces
// (estimator/testdata/heldout, recorded by scripts/heldout/record): kinds the
// estimator's settings were never tuned on.
//
//	heldout serve --listen 127.0.0.1:18090      an HTTP server; GET /work?rounds=N hashes 64 KiB N times
//	heldout load  --target http://127.0.0.1:18090 --duration 31m
//	                                             Poisson arrivals at a rate drifting between --min-rate and
//	                                             --max-rate, each request's cost Pareto-distributed
//	heldout bursts --duration 31m                busy bursts whose lengths and gaps are heavy-tailed
//	heldout ramps  --duration 31m                a duty-cycled load ramping slowly up and down
//	heldout queue  --duration 31m                a batch queue: Poisson arrivals of xz compressions of
//	                                             log-normal sizes, two workers, a bounded backlog
//
// Every command is deterministic given --seed, apart from what the machine
// does to it. They are workloads, not tests: run them under
// `slackline-backtest record` (one cgroup per trace).
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
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: heldout serve|load|bursts|ramps|queue [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "bursts":
		err = bursts(os.Args[2:])
	case "ramps":
		err = ramps(os.Args[2:])
	case "queue":
		err = queue(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "heldout:", err)
		os.Exit(1)
	}
}

// serve answers GET /work?rounds=N by hashing a 64 KiB block N times (about
// 50 µs of CPU per round here), capped at --max-rounds.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18090", "address")
	maxRounds := fs.Int("max-rounds", 4000, "largest accepted rounds")
	_ = fs.Parse(args)
	block := make([]byte, 64<<10)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		rounds, err := strconv.Atoi(r.URL.Query().Get("rounds"))
		if err != nil || rounds < 1 || rounds > *maxRounds {
			http.Error(w, "rounds: want 1.."+strconv.Itoa(*maxRounds), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(block)
		for range rounds - 1 {
			h := sha256.New()
			h.Write(sum[:])
			h.Write(block)
			h.Sum(sum[:0])
		}
		fmt.Fprintf(w, "%x\n", sum[:4])
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// pareto draws from a Pareto distribution with scale xm and shape alpha,
// capped at limit.
func pareto(rng *rand.Rand, xm, alpha, limit float64) float64 {
	return math.Min(limit, xm/math.Pow(1-rng.Float64(), 1/alpha))
}

// load sends requests open-loop: Poisson arrivals (users do not wait for one
// another) at a rate that drifts between --min-rate and --max-rate (a random
// walk of the log rate, re-drawn every second, pulled back to the middle),
// each request asking for Pareto(--min-rounds, --alpha) rounds: most are
// small, a few are a hundred times larger.
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("target", "http://127.0.0.1:18090", "server")
	duration := fs.Duration("duration", 31*time.Minute, "how long to send")
	minRate := fs.Float64("min-rate", 20, "lowest request rate (per second)")
	maxRate := fs.Float64("max-rate", 220, "highest request rate (per second)")
	minRounds := fs.Float64("min-rounds", 20, "Pareto scale of the rounds per request")
	alpha := fs.Float64("alpha", 1.4, "Pareto shape of the rounds per request")
	maxRounds := fs.Float64("max-rounds", 4000, "cap on the rounds per request")
	seed := fs.Uint64("seed", 29, "random seed")
	_ = fs.Parse(args)
	rng := rand.New(rand.NewPCG(*seed, 1))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var sent, failed atomic.Int64
	lo, hi := math.Log(*minRate), math.Log(*maxRate)
	logRate := (lo + hi) / 2
	start := time.Now()
	next, rateAt := start, start
	for ctx.Err() == nil {
		now := time.Now()
		if now.Sub(rateAt) >= time.Second {
			// Mean-reverting random walk of the log rate: minutes-long swings.
			logRate += 0.08*rng.NormFloat64() + 0.01*((lo+hi)/2-logRate)
			logRate = math.Max(lo, math.Min(hi, logRate))
			rateAt = now
		}
		next = next.Add(time.Duration(rng.ExpFloat64() / math.Exp(logRate) * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		rounds := int(pareto(rng, *minRounds, *alpha, *maxRounds))
		sent.Add(1)
		go func() {
			resp, err := client.Get(*target + "/work?rounds=" + strconv.Itoa(rounds))
			if err != nil {
				if failed.Add(1) <= 3 {
					fmt.Fprintln(os.Stderr, "request:", err)
				}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	fmt.Fprintf(os.Stderr, "sent %d requests, %d failed\n", sent.Load(), failed.Load())
	return nil
}

// spin keeps one thread busy until the deadline.
func spin(deadline time.Time) {
	x := 1.0
	for time.Now().Before(deadline) {
		for range 1000 {
			x = x*1.0000001 + 1e-9
		}
	}
	runtime.KeepAlive(x)
}

// bursts alternates idle gaps and busy bursts of 1-2 threads; burst lengths
// are Pareto (shape 1.3, from 0.2 s, capped at 90 s) and gaps Pareto (shape
// 1.5, from 1 s, capped at 120 s): most bursts are short, a few last a
// minute, and a quiet spell can last two.
func bursts(args []string) error {
	fs := flag.NewFlagSet("bursts", flag.ExitOnError)
	duration := fs.Duration("duration", 31*time.Minute, "how long to run")
	seed := fs.Uint64("seed", 31, "random seed")
	_ = fs.Parse(args)
	rng := rand.New(rand.NewPCG(*seed, 2))
	end := time.Now().Add(*duration)
	for time.Now().Before(end) {
		gap := time.Duration(pareto(rng, 1, 1.5, 120) * float64(time.Second))
		time.Sleep(gap)
		length := time.Duration(pareto(rng, 0.2, 1.3, 90) * float64(time.Second))
		threads := 1 + rng.IntN(2)
		deadline := time.Now().Add(length)
		var wg sync.WaitGroup
		for range threads {
			wg.Go(func() { spin(deadline) })
		}
		wg.Wait()
	}
	return nil
}

// ramps runs two threads at a duty cycle (busy part of every 20 ms) that
// ramps slowly between 2% and 25-60% of each thread: up over 4-9 minutes, held
// 1-3 minutes, down over 4-9 minutes, with a little noise.
func ramps(args []string) error {
	fs := flag.NewFlagSet("ramps", flag.ExitOnError)
	duration := fs.Duration("duration", 31*time.Minute, "how long to run")
	seed := fs.Uint64("seed", 37, "random seed")
	_ = fs.Parse(args)
	rng := rand.New(rand.NewPCG(*seed, 3))
	type segment struct {
		length   time.Duration
		from, to float64
	}
	var plan []segment
	level, total := 0.02, time.Duration(0)
	for total < *duration {
		peak := 0.25 + 0.35*rng.Float64()
		up := time.Duration(4+rng.IntN(6)) * time.Minute
		hold := time.Duration(1+rng.IntN(3)) * time.Minute
		down := time.Duration(4+rng.IntN(6)) * time.Minute
		plan = append(plan, segment{up, level, peak}, segment{hold, peak, peak}, segment{down, peak, 0.02})
		level, total = 0.02, total+up+hold+down
	}
	start := time.Now()
	duty := func(now time.Time) float64 {
		at := now.Sub(start)
		for _, s := range plan {
			if at < s.length {
				return s.from + (s.to-s.from)*at.Seconds()/s.length.Seconds()
			}
			at -= s.length
		}
		return 0.02
	}
	const period = 20 * time.Millisecond
	var wg sync.WaitGroup
	for i := range 2 {
		noise := rand.New(rand.NewPCG(*seed, uint64(10+i)))
		wg.Go(func() {
			for now := time.Now(); now.Sub(start) < *duration; now = time.Now() {
				d := math.Max(0, math.Min(1, duty(now)*(0.9+0.2*noise.Float64())))
				busy := time.Duration(d * float64(period))
				spin(now.Add(busy))
				time.Sleep(period - busy)
			}
		})
	}
	wg.Wait()
	return nil
}

// queue is a batch queue: jobs arrive as a Poisson process (one every
// --gap on average), each compressing log-normally many random bytes
// (median 1 MiB, sigma 1.2, capped at 64 MiB; xz -1 does about 1.7 MiB
// per CPU second here, so about 0.4 cores on average) with xz -1, run by --workers
// workers in arrival order. The backlog is bounded (--backlog): a job that
// finds it full is dropped and counted, as a real queue sheds load, so that
// a machine too busy to keep up cannot pile up work without end.
func queue(args []string) error {
	fs := flag.NewFlagSet("queue", flag.ExitOnError)
	duration := fs.Duration("duration", 31*time.Minute, "how long to run")
	gap := fs.Duration("gap", 3*time.Second, "mean time between arrivals")
	workers := fs.Int("workers", 2, "jobs run at once")
	backlog := fs.Int("backlog", 32, "jobs waiting at most")
	seed := fs.Uint64("seed", 41, "random seed")
	_ = fs.Parse(args)
	rng := rand.New(rand.NewPCG(*seed, 4))
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	jobs := make(chan int64, *backlog)
	var dropped, done atomic.Int64
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for size := range jobs {
				cmd := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf("head -c %d /dev/urandom | xz -1 -T1 > /dev/null", size))
				if err := cmd.Run(); err == nil {
					done.Add(1)
				}
			}
		})
	}
	next := time.Now()
	for ctx.Err() == nil {
		next = next.Add(time.Duration(rng.ExpFloat64() * float64(*gap)))
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
		mib := math.Min(64, math.Exp(1.2*rng.NormFloat64()))
		select {
		case jobs <- int64(mib * (1 << 20)):
		default:
			dropped.Add(1)
		}
	}
	close(jobs)
	wg.Wait()
	fmt.Fprintf(os.Stderr, "queue: %d jobs done, %d dropped (backlog full)\n", done.Load(), dropped.Load())
	return nil
}
