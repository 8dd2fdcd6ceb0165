// Command agent measures the node agent (run as root): launch latency from
// Accept to the framework receiving TASK_STATE_RUNNING over --trials tasks
// launched one at a time, and the agent's CPU and RSS when idle and with
// --running tasks running. It builds and starts the real coordinator and
// agent binaries on loopback.
//
//	sudo go run ./scripts/bench/agent --trials 100 --running 50
//
// The running tasks sleep, so that the figure is the agent's cost of
// watching idle containers; --busy N makes the first N of them run about
// every 100 ms instead (each wakes, spends a millisecond or two of CPU on
// a child process that reads random bytes, and sleeps 100 ms), so that
// every pass of the agent's monitor finds N containers that ran.
//
// --perf FILE then records the agent's CPU profile with perf for another
// window (perf report -i FILE --no-children shows where its CPU goes);
// --perf-idle FILE does the same for the idle agent. --pprof FILE takes
// the agent's Go CPU profile instead (the agent runs with --pprof; go
// tool pprof -top FILE), which names the agent's own functions.
//
// Interrupted (SIGINT or SIGTERM), it removes its tasks, their cgroups
// and its directory before exiting, as at the end of a run.
//
// Arguments after -- are passed to the agent (A/B runs of its flags):
//
//	sudo go run ./scripts/bench/agent --trials 1 --running 100 -- --oversubscribed-resources-interval 1s
//
// Beside the agent, over the same windows, runs the floor: a bare Go
// process (this binary) that wakes every 100 ms, the agent's default
// sampling interval, and does nothing else. Its CPU is what any Go
// process waking that often costs on the machine (on a guest where a
// context switch or a system call is expensive, a good part of a
// percent), the baseline the agent's figure is read against.
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
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/resources"
)

// floorEnv, set, makes this binary the floor process: it wakes every
// floorInterval until killed.
const floorEnv = "SLACKLINE_BENCH_AGENT_FLOOR"

// floorInterval is the agent's default sampling interval (--monitor-interval).
const floorInterval = 100 * time.Millisecond

func main() {
	if os.Getenv(floorEnv) != "" {
		for t := time.NewTicker(floorInterval); ; {
			<-t.C
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench agent:", err)
		os.Exit(1)
	}
}

func run() error {
	trials := flag.Int("trials", 100, "tasks launched one at a time for the latency figures")
	running := flag.Int("running", 50, "tasks kept running for the resource figures")
	busy := flag.Int("busy", 0, "of the running tasks, how many run briefly every 100 ms instead of sleeping")
	window := flag.Duration("window", 10*time.Second, "CPU measurement window")
	perfOut := flag.String("perf", "", "after the busy measurement, record the agent with perf (call graphs) for another window into this file (read it with perf report -i FILE)")
	pprofOut := flag.String("pprof", "", "after the busy measurement (and perf's window, with --perf), take the agent's Go CPU profile (its --pprof endpoint) for another window into this file (read it with go tool pprof FILE)")
	perfIdle := flag.String("perf-idle", "", "after the idle measurement, record the idle agent with perf for another window into this file")
	flag.Parse()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (the agent creates cgroups)")
	}
	dir, err := os.MkdirTemp("", "slackline-bench-agent")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := benchutil.Build(dir, "./cmd/slackline-coordinator", "./cmd/slackline-agent", "./cmd/slackline-supervisor"); err != nil {
		return err
	}
	coordAddr, agentAddr := benchutil.FreeAddr(), benchutil.FreeAddr()
	root := fmt.Sprintf("slackline-bench-%d", os.Getpid())
	agentArgs := []string{"--coordinator", "http://" + coordAddr, "--listen", agentAddr,
		"--work-dir", filepath.Join(dir, "agent"), "--cgroup-root", root, "--resources", "cpus:64;mem:65536", "--log-level", "warn",
		"--kill-grace-period", "100ms", "--insecure"}
	if *pprofOut != "" {
		agentArgs = append(agentArgs, "--pprof")
	}
	agentArgs = append(agentArgs, flag.Args()...) // after --: the agent's own flags, for A/B runs
	procs := []*exec.Cmd{
		exec.Command(filepath.Join(dir, "slackline-coordinator"), "--listen", coordAddr, "--work-dir", filepath.Join(dir, "coord"), "--log-level", "warn",
			"--insecure"), // a loopback cluster of the benchmark's own, no credentials
		exec.Command(filepath.Join(dir, "slackline-agent"), agentArgs...),
	}
	for _, p := range procs {
		p.Stderr = os.Stderr
		p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.Start(); err != nil {
			return err
		}
		defer p.Process.Kill()
		time.Sleep(300 * time.Millisecond)
	}
	agentPid := procs[1].Process.Pid
	// Tasks outlive their agent by design: at the end, on an error and on
	// SIGINT or SIGTERM, kill them and remove the cgroups (the coordinator
	// and the agent die with this process: Pdeathsig).
	cleanup := sync.OnceFunc(func() {
		procs[1].Process.Kill()
		cgrouptest.RemoveRoot(root)
	})
	defer cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench agent: %v: removing the tasks, their cgroups and %s\n", s, dir)
		cleanup()
		os.RemoveAll(dir)
		os.Exit(1)
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	offers := make(chan *slacklinev1.Offer, 100)
	runningAt := make(chan time.Time, 1000)
	handler := frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, os []*slacklinev1.Offer) {
			for _, o := range os {
				offers <- o
			}
		},
		UpdateFunc: func(ctx context.Context, c *frameworkapi.Client, st *slacklinev1.TaskStatus) {
			if st.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				runningAt <- time.Now()
			}
		},
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + coordAddr, Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "bench-agent"}})
	if err != nil {
		return err
	}
	go fw.Run(ctx, handler)

	floor := exec.Command(os.Args[0])
	floor.Env = append(os.Environ(), floorEnv+"=1")
	floor.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := floor.Start(); err != nil {
		return fmt.Errorf("start the floor process: %w", err)
	}
	defer floor.Process.Kill()
	floorPid := floor.Process.Pid

	time.Sleep(2 * time.Second)
	idleCPU, idleRSS, floorCPU := measure(agentPid, floorPid, *window)
	fmt.Printf("agent idle: CPU %.4f cores, RSS %.1f MiB (floor, a Go process waking every %v: %.4f cores)\n", idleCPU, idleRSS, floorInterval, floorCPU)
	if err := record(*perfIdle, agentPid, *window); err != nil {
		return err
	}

	need := resources.MustParse("cpus:0.1;mem:16")
	var latencies []time.Duration
	launch := func(i int) (time.Duration, error) {
		o := <-offers
		command := "sleep 3600"
		if i < *busy {
			command = "while :; do head -c 100000 /dev/urandom >/dev/null; sleep 0.1; done"
		}
		task := frameworkapi.NewTask(fmt.Sprintf("t%d", i), "bench", o, need, &slacklinev1.CommandInfo{Value: command, Shell: true})
		t0 := time.Now()
		if err := fw.Launch(ctx, []string{o.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(0)); err != nil {
			return 0, err
		}
		select {
		case t1 := <-runningAt:
			return t1.Sub(t0), nil
		case <-time.After(30 * time.Second):
			return 0, fmt.Errorf("task %d not running after 30 s", i)
		}
	}
	for i := range max(*trials, *running) {
		d, err := launch(i)
		if err != nil {
			return err
		}
		if i < *trials {
			latencies = append(latencies, d)
		}
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return benchutil.Percentile(latencies, p, 10*time.Microsecond) }
	fmt.Printf("launch latency (Accept -> RUNNING received), %d tasks: p50 %v  p99 %v  max %v\n", len(latencies), pct(0.5), pct(0.99), latencies[len(latencies)-1].Round(10*time.Microsecond))
	busyCPU, busyRSS, floorCPU := measure(agentPid, floorPid, *window)
	fmt.Printf("agent with %d tasks running (%d busy): CPU %.4f cores, RSS %.1f MiB (floor: %.4f cores)\n", max(*trials, *running), min(*busy, max(*trials, *running)), busyCPU, busyRSS, floorCPU)
	if err := record(*perfOut, agentPid, *window); err != nil {
		return err
	}
	if err := goProfile(*pprofOut, agentAddr, *window); err != nil {
		return err
	}
	return nil
}

// record records pid's CPU profile with perf (call graphs) for window into
// out; nothing when out is empty. It takes a window of its own, so that
// perf's sampling does not weigh on the figures measured before it.
func record(out string, pid int, window time.Duration) error {
	if out == "" {
		return nil
	}
	rec := exec.Command("perf", "record", "-q", "-g", "-F", "997", "-o", out, "-p", fmt.Sprint(pid), "--", "sleep", fmt.Sprint(window.Seconds()))
	rec.Stdout, rec.Stderr = os.Stdout, os.Stderr
	if err := rec.Run(); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	return nil
}

// goProfile takes the agent's Go CPU profile (its --pprof endpoint, the
// NodeService's listener) for window into out; nothing when out is empty.
// Go's profile names the agent's own functions where perf's call graphs
// often stop at the runtime; it samples at 100 Hz, so a long window is
// needed at the agent's 1-2% of a core.
func goProfile(out, agentAddr string, window time.Duration) error {
	if out == "" {
		return nil
	}
	client := &http.Client{Timeout: window + time.Minute}
	resp, err := client.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", agentAddr, int(window.Seconds())))
	if err != nil {
		return fmt.Errorf("agent CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("agent CPU profile: %s: %s", resp.Status, msg)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("agent CPU profile: %w", err)
	}
	return f.Close()
}

// measure returns pid's CPU (cores) over window and its RSS at the end,
// and the floor process's CPU over the same window.
func measure(pid, floorPid int, window time.Duration) (cores, rssMiB, floorCores float64) {
	c0, _ := benchutil.CPUSeconds(pid)
	f0, _ := benchutil.CPUSeconds(floorPid)
	t0 := time.Now()
	time.Sleep(window)
	c1, _ := benchutil.CPUSeconds(pid)
	f1, _ := benchutil.CPUSeconds(floorPid)
	secs := time.Since(t0).Seconds()
	rss, _ := benchutil.RSSBytes(pid)
	return (c1 - c0) / secs, float64(rss) / (1 << 20), (f1 - f0) / secs
}
