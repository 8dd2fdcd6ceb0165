// Command healthcheck measures what health checks cost the agent: the CPU
// time of the agent's health-check subsystem (agent/health's Runner and
// Probes, as the agent wires them, dialling the host's loopback as it does
// for tasks sharing its network namespace) checking --tasks tasks every
// --interval, over --duration. The servers being checked run in a child
// process (the same binary, "healthcheck serve"), so that their CPU is not
// counted: what is printed is the checking side alone, per second and per
// check, from getrusage of this process after a warm-up interval.
//
//	go run ./scripts/bench/healthcheck --tasks 100 --interval 1s --duration 30s --type http
//	go run ./scripts/bench/healthcheck --tasks 100 --interval 1s --duration 30s --type tcp
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slackline/slackline/agent/health"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

var cpuProfile string

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		serve(os.Args[2:])
		return
	}
	tasks := flag.Int("tasks", 100, "tasks checked")
	interval := flag.Duration("interval", time.Second, "interval between two checks of a task")
	duration := flag.Duration("duration", 30*time.Second, "how long to measure")
	kind := flag.String("type", "http", "http or tcp")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the measured period to this file")
	flag.Parse()
	cpuProfile = *profile
	if err := run(*tasks, *interval, *duration, *kind); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

// serve listens on n loopback ports, answers GET with 200, and prints the
// ports on one line.
func serve(args []string) {
	n, _ := strconv.Atoi(args[0])
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	var ports []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_, p, _ := net.SplitHostPort(ln.Addr().String())
		ports = append(ports, p)
		go func() { _ = http.Serve(ln, handler) }()
	}
	fmt.Println(strings.Join(ports, " "))
	select {}
}

type loopback struct{}

func (loopback) DialTask(ctx context.Context, _ string, port uint16) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
}

func (loopback) ExecTask(context.Context, string, *slacklinev1.CommandInfo) (int, string, error) {
	return 0, "", fmt.Errorf("no commands here")
}

// countingProber counts checks and failures around the real probes.
type countingProber struct {
	probes         *health.Probes
	checks, failed atomic.Int64
}

func (c *countingProber) Probe(ctx context.Context, id string, p health.Policy) (bool, string, bool) {
	ok, detail, paused := c.probes.Probe(ctx, id, p)
	c.checks.Add(1)
	if !ok {
		c.failed.Add(1)
	}
	return ok, detail, paused
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(tasks int, interval, duration time.Duration, kind string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(exe, "serve", strconv.Itoa(tasks))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read the servers' ports: %w", err)
	}
	ports := strings.Fields(line)
	typ := slacklinev1.HealthCheck_TYPE_HTTP
	if kind == "tcp" {
		typ = slacklinev1.HealthCheck_TYPE_TCP
	}
	prober := &countingProber{probes: health.NewProbes(loopback{}, loopback{})}
	runner := health.NewRunner(health.RunnerConfig{Prober: prober, Decide: func(string, health.Decision) {},
		Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = runner.Run(ctx) }()
	start := time.Now()
	for i, p := range ports {
		n, _ := strconv.Atoi(p)
		// Spread over the interval, as tasks started at different times.
		started := start.Add(time.Duration(i) * interval / time.Duration(len(ports)))
		runner.Watch(fmt.Sprintf("task-%d", i), health.Policy{Type: typ, Port: uint16(n), Path: "/health", Scheme: "http",
			Interval: interval, Timeout: interval, ConsecutiveFailures: 3}, started)
	}
	time.Sleep(2 * interval) // warm-up: connections, buffers, goroutines
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, checks0, wall0 := cpuTime(), prober.checks.Load(), time.Now()
	time.Sleep(duration)
	cpu, checks, wall := cpuTime()-cpu0, prober.checks.Load()-checks0, time.Since(wall0)
	fmt.Printf("%d %s checks every %v for %v: %d checks (%.1f/s), %d failed\n",
		tasks, kind, interval, wall.Round(time.Millisecond), checks, float64(checks)/wall.Seconds(), prober.failed.Load())
	fmt.Printf("agent CPU for health checks: %.2f%% of one core (%.1f ms per second), %.1f µs per check\n",
		100*cpu.Seconds()/wall.Seconds(), float64(cpu.Milliseconds())/wall.Seconds(), float64(cpu.Microseconds())/float64(max(checks, 1)))
	return nil
}
