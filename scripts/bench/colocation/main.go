// Command colocation is the colocation benchmark: a latency-critical HTTP
// server runs as a guaranteed task on a real agent and is loaded at a fixed
// request rate (open loop, latency measured from each request's scheduled
// time, so queueing is not hidden); CPU-bound best-effort tasks from
// batch-framework --revocable run beside it on revocable resources. Three
// runs side by side: the server alone; with best-effort and QoS "noop"; with
// best-effort and QoS "interference". It prints the server's p50/p99/p99.9,
// node CPU utilization and best-effort CPU time per run, and draws latency
// and the revocable subtree's CPU limit over time into a PNG.
//
//	sudo go run ./scripts/bench/colocation --rate 400 --duration 30s --out colocation.png
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/resources"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "colocation:", err)
		os.Exit(1)
	}
}

type options struct {
	rate       int
	duration   time.Duration
	work       time.Duration
	bestEffort int
	out        string
	binDir     string
}

// result is one run's outcome.
type result struct {
	name                 string
	latencies            []time.Duration
	timeline             []point
	nodeUtil             float64 // fraction of all CPUs busy
	serverCores, beCores float64 // average cores used
	errors               int
}

// point is one second of a run: the p99 of requests scheduled in it and the
// revocable subtree's CPU limit (cores, 0 = none) at its end.
type point struct {
	at    time.Duration
	p99   time.Duration
	limit float64
}

func run() error {
	var o options
	flag.IntVar(&o.rate, "rate", 400, "requests per second sent to the server")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "load duration per run")
	flag.DurationVar(&o.work, "work", 500*time.Microsecond, "CPU work per request")
	flag.IntVar(&o.bestEffort, "best-effort-tasks", 6, "best-effort CPU hogs to queue")
	flag.StringVar(&o.out, "out", "colocation.png", "PNG of latency and throttle level over time")
	flag.Parse()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (the agent creates cgroups)")
	}
	dir, err := os.MkdirTemp("", "slackline-colocation")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	o.binDir = dir
	if err := benchutil.Build(dir, "./cmd/slackline-coordinator", "./cmd/slackline-agent",
		"./examples/batch-framework", "./scripts/bench/colocation/latency-server"); err != nil {
		return err
	}
	var results []result
	for _, r := range []struct {
		name       string
		qos        string
		bestEffort bool
	}{
		{"alone", "noop", false},
		{"best-effort, qos noop", "noop", true},
		{"best-effort, qos interference", "interference,memory", true},
	} {
		res, err := runOnce(o, r.name, r.qos, r.bestEffort)
		if err != nil {
			return fmt.Errorf("run %q: %w", r.name, err)
		}
		results = append(results, res)
	}
	fmt.Printf("\n%-32s %9s %9s %9s %7s %9s %9s %9s\n", "run", "p50", "p99", "p99.9", "errors", "node cpu", "server", "best-eff")
	for _, r := range results {
		fmt.Printf("%-32s %9v %9v %9v %7d %8.0f%% %8.2fc %8.2fc\n", r.name,
			pct(r.latencies, 0.50), pct(r.latencies, 0.99), pct(r.latencies, 0.999), r.errors,
			100*r.nodeUtil, r.serverCores, r.beCores)
	}
	alone, qos := results[0], results[2]
	// What the node leaves idle with the server alone (the load generator
	// runs on this host too and uses CPU the best-effort work cannot have).
	idle := float64(numCPU()) * (1 - alone.nodeUtil)
	fmt.Printf("\nserver p99 with best-effort under interference / alone: %.2fx (goal <= 1.2x); noop / alone: %.2fx\n",
		float64(pct(qos.latencies, 0.99))/float64(pct(alone.latencies, 0.99)),
		float64(pct(results[1].latencies, 0.99))/float64(pct(alone.latencies, 0.99)))
	fmt.Printf("best-effort used %.0f%% of the CPU left idle with the server alone (%.2f of %.2f cores; goal >= 50%%)\n",
		100*qos.beCores/idle, qos.beCores, idle)
	if err := drawPNG(results, o.out); err != nil {
		return err
	}
	fmt.Println("plot:", o.out)
	return nil
}

func pct(ds []time.Duration, p float64) time.Duration {
	return benchutil.Percentile(ds, p, 10*time.Microsecond)
}

func runOnce(o options, name, qos string, bestEffort bool) (result, error) {
	fmt.Printf("== %s\n", name)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	work, err := os.MkdirTemp("", "colocation-run")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(work)
	coordAddr, agentAddr, serverAddr := benchutil.FreeAddr(), benchutil.FreeAddr(), benchutil.FreeAddr()
	root := fmt.Sprintf("slackline-coloc-%d", time.Now().UnixNano()%1e9)
	defer cgrouptest.RemoveRoot(root)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}()
	startProc := func(name string, args ...string) error {
		p := exec.Command(filepath.Join(o.binDir, name), args...)
		logf, _ := os.Create(filepath.Join(work, name+".log"))
		p.Stdout, p.Stderr = logf, logf
		p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.Start(); err != nil {
			return err
		}
		procs = append(procs, p)
		return nil
	}
	if err := startProc("slackline-coordinator", "--listen", coordAddr, "--work-dir", filepath.Join(work, "coord")); err != nil {
		return result{}, err
	}
	time.Sleep(300 * time.Millisecond)
	if err := startProc("slackline-agent", "--coordinator", "http://"+coordAddr, "--listen", agentAddr,
		"--work-dir", filepath.Join(work, "agent"), "--cgroup-root", root, "--resources", "cpus:2;mem:4096",
		"--qos-controller", qos, "--monitor-interval", "100ms", "--estimator-window", "10s"); err != nil {
		return result{}, err
	}

	// The latency-critical server: a guaranteed task holding the whole node,
	// so that what it leaves idle is slack (revocable), not unallocated.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	launched := false
	var mu sync.Mutex
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + coordAddr, Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "latency-critical"}})
	if err != nil {
		return result{}, err
	}
	go fw.Run(ctx, frameworkapi.HandlerFuncs{OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
		mu.Lock()
		defer mu.Unlock()
		for _, off := range offers {
			if launched {
				_ = c.Decline(ctx, []string{off.GetId()}, frameworkapi.Filters(3600))
				continue
			}
			launched = true
			cmd := fmt.Sprintf("%s --listen %s --work %s", filepath.Join(o.binDir, "latency-server"), serverAddr, o.work)
			task := frameworkapi.NewTask("server", "server", off, resources.MustParse("cpus:2;mem:256"), &slacklinev1.CommandInfo{Value: cmd, Shell: true})
			_ = c.Launch(ctx, []string{off.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(3600))
		}
	}})
	if err := waitHTTP("http://"+serverAddr, 30*time.Second); err != nil {
		return result{}, fmt.Errorf("server: %w", err)
	}
	if bestEffort {
		hog := `while :; do :; done`
		if err := startProc("batch-framework", "--coordinator", "http://"+coordAddr, "--name", "best-effort", "--revocable",
			"--tasks", strconv.Itoa(o.bestEffort), "--task-resources", "cpus:0.25;mem:32", "--command", hog); err != nil {
			return result{}, err
		}
		// Give the estimator time to offer slack and the hogs time to start.
		time.Sleep(5 * time.Second)
	}
	res := result{name: name}
	cpu0, t0 := nodeCPU()
	srv0, be0 := cgroupCPU(root, "guaranteed"), cgroupCPU(root, "revocable")
	res.latencies, res.errors, res.timeline = load(ctx, "http://"+serverAddr, o.rate, o.duration, root)
	cpu1, t1 := nodeCPU()
	wall := o.duration.Seconds()
	res.nodeUtil = (cpu1 - cpu0) / (t1 - t0)
	res.serverCores = (cgroupCPU(root, "guaranteed") - srv0) / wall
	res.beCores = (cgroupCPU(root, "revocable") - be0) / wall
	return res, nil
}

func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not answering at %s after %v", url, timeout)
}

// load sends rate requests per second for d, open loop, and returns each
// request's latency from its scheduled send time, the error count, and a
// per-second timeline of p99 and the revocable CPU limit.
func load(ctx context.Context, url string, rate int, d time.Duration, root string) ([]time.Duration, int, []point) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	failed := make([]bool, n)
	var wg sync.WaitGroup
	start := time.Now()
	var limits []float64
	stopSampling := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				limits = append(limits, revocableLimit(root))
			case <-stopSampling:
				return
			}
		}
	}()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		wg.Go(func() {
			resp, err := client.Get(url)
			if err != nil {
				failed[i] = true
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(at)
		})
	}
	wg.Wait()
	close(stopSampling)
	var ok []time.Duration
	errors := 0
	var timeline []point
	for sec := 0; sec < int(d.Seconds()); sec++ {
		var bucket []time.Duration
		for i := sec * rate; i < min(n, (sec+1)*rate); i++ {
			if !failed[i] {
				bucket = append(bucket, lat[i])
			}
		}
		p := point{at: time.Duration(sec) * time.Second, p99: pct(bucket, 0.99)}
		if sec < len(limits) {
			p.limit = limits[sec]
		}
		timeline = append(timeline, p)
	}
	for i := range n {
		if failed[i] {
			errors++
		} else {
			ok = append(ok, lat[i])
		}
	}
	return ok, errors, timeline
}

// nodeCPU returns busy CPU-seconds and elapsed CPU-seconds from /proc/stat.
func nodeCPU() (busy, total float64) {
	raw, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)[1:]
	var sum, idle float64
	for i, f := range fields {
		v, _ := strconv.ParseFloat(f, 64)
		sum += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return (sum - idle) / 100, sum / 100
}

func numCPU() int {
	n := 0
	raw, _ := os.ReadFile("/proc/stat")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "cpu") && !strings.HasPrefix(line, "cpu ") {
			n++
		}
	}
	return n
}

// cgroupCPU returns CPU-seconds used by a subtree of the agent's root, from
// cpu.stat in the v2 tree (/sys/fs/cgroup/unified on hybrid hosts), which
// counts the subtree's children too.
func cgroupCPU(root, sub string) float64 {
	raw, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/unified", root, sub, "cpu.stat"))
	if err != nil {
		raw, err = os.ReadFile(filepath.Join("/sys/fs/cgroup", root, sub, "cpu.stat"))
	}
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, _ := strconv.ParseFloat(v, 64)
			return us / 1e6
		}
	}
	return 0
}

// revocableLimit returns the revocable subtree's CPU limit in cores (0 = none).
func revocableLimit(root string) float64 {
	for _, base := range []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"} {
		q, err1 := os.ReadFile(filepath.Join(base, root, "revocable", "cpu.cfs_quota_us"))
		p, err2 := os.ReadFile(filepath.Join(base, root, "revocable", "cpu.cfs_period_us"))
		if err1 == nil && err2 == nil {
			quota, _ := strconv.ParseFloat(strings.TrimSpace(string(q)), 64)
			period, _ := strconv.ParseFloat(strings.TrimSpace(string(p)), 64)
			if quota <= 0 || period <= 0 {
				return 0
			}
			return quota / period
		}
	}
	raw, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", root, "revocable", "cpu.max"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) != 2 || f[0] == "max" {
		return 0
	}
	quota, _ := strconv.ParseFloat(f[0], 64)
	period, _ := strconv.ParseFloat(f[1], 64)
	return quota / period
}
