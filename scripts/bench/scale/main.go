// Command scale measures the coordinator with many simulated agents: it
// builds and starts the real slackline-coordinator and slackline-sim
// binaries, waits until --agents agents are registered (or their count
// stalls for --stalled), lets them settle for --settle (their heartbeat
// streams open and their interval adapts to the heartbeat budget), then
// samples the
// coordinator's CPU use and RSS from /proc over --window while the agents
// heartbeat (every 5 s, the default), and the heartbeats it served
// (slackline_coordinator_agent_heartbeats_total, when the coordinator has
// it), to give its CPU per heartbeat.
//
//	go run ./scripts/bench/scale --agents 10000 --window 30s
//
// --agents-per-connection N passes slackline-sim's flag of that name:
// its default of 100 agents per HTTP/2 connection keeps the simulator
// small; a real agent has a connection of its own (1). On 4550fed the two
// cost the coordinator the same CPU per beat at 10,000 agents (145 us
// each, one run each in one quiet window; 0.68 and 0.71 writes per beat:
// the agents' HTTP/2 pings, sent after 30 s without a frame received, do
// not fire while answers and command-stream keepalives come every 30 s),
// with more RSS at 1 (983 against 479 MiB in that run, 764 against 516
// in a later one). With the agents' 50 ms beat grid (agent/session) both
// layouts measured 100-103 us per beat, main 157-190 us.
//
// With --perf FILE it also records the coordinator's profile over the
// window (perf record -g; perf report -i FILE reads it); with --stat it
// counts its context switches and system calls per heartbeat (perf stat).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run() error {
	agents := flag.Int("agents", 10000, "simulated agents")
	window := flag.Duration("window", 30*time.Second, "measurement window once all agents are registered")
	stalled := flag.Duration("stalled", 2*time.Minute, "start the window with the agents registered so far when their count did not grow for this long")
	settle := flag.Duration("settle", 30*time.Second, "wait this long after the agents are registered before the window: each agent opens its heartbeat stream at its first beat and learns the interval of the heartbeat budget from an answered beat (every third), so the first few intervals are a second storm of stream openings and interval changes, not steady heartbeats")
	perConn := flag.Int("agents-per-connection", 100, "simulated agents sharing one HTTP/2 connection (slackline-sim's --agents-per-connection); a real agent has a connection of its own")
	perfOut := flag.String("perf", "", "also record the coordinator's CPU profile over the window with perf (perf record -g) into this file (read it with perf report)")
	statOut := flag.Bool("stat", false, "also count the coordinator's context switches and its read, write, futex, nanosleep and epoll_pwait system calls over the window with perf stat, per heartbeat (counts that vary less with the machine's load than CPU time does)")
	var coordEnv []string
	flag.Func("coordinator-env", "an environment variable KEY=VALUE for the coordinator alone (repeatable), e.g. GOMAXPROCS=1: the runtime's settings measured without changing the simulator's", func(kv string) error {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("%q is not KEY=VALUE", kv)
		}
		coordEnv = append(coordEnv, kv)
		return nil
	})
	flag.Parse()
	dir, err := os.MkdirTemp("", "slackline-scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := benchutil.Build(dir, "./cmd/slackline-coordinator", "./cmd/slackline-sim"); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()

	// --insecure: a loopback coordinator of the benchmark's own, no credentials.
	coord := exec.Command(filepath.Join(dir, "slackline-coordinator"), "--listen", addr, "--work-dir", filepath.Join(dir, "coord"), "--log-level", "warn", "--insecure")
	coord.Stderr = os.Stderr
	coord.Env = append(os.Environ(), coordEnv...)
	coord.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := coord.Start(); err != nil {
		return err
	}
	defer coord.Process.Kill()
	time.Sleep(500 * time.Millisecond)
	sim := exec.Command(filepath.Join(dir, "slackline-sim"), "--coordinator", "http://"+addr, "--agents", strconv.Itoa(*agents), "--agents-per-connection", strconv.Itoa(*perConn), "--log-level", "warn")
	sim.Stderr = os.Stderr
	sim.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	if err := sim.Start(); err != nil {
		return err
	}
	defer sim.Process.Kill()

	op := slacklinev1connect.NewOperatorServiceClient(server.NewClient(), "http://"+addr)
	activeAgents := func() int {
		resp, err := op.GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		active := 0
		if err == nil {
			for _, a := range resp.Msg.GetAgents() {
				if a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
					active++
				}
			}
		}
		return active
	}
	// Beats are measured only once the agents are registered: a
	// registration storm costs the coordinator more than the beats. On a
	// loaded machine the count may stop growing short of --agents (agents
	// lost while others register): after --stalled without growth the
	// window starts with the agents there are, and says so.
	best, grew, active := 0, time.Now(), 0
	for {
		active = activeAgents()
		if active >= *agents {
			break
		}
		if active > best {
			best, grew = active, time.Now()
		}
		if time.Since(grew) > *stalled && active > 0 {
			fmt.Printf("registration stalled: %d of %d agents ACTIVE, no growth for %v; measuring with them\n", active, *agents, *stalled)
			break
		}
		if time.Since(started) > 10*time.Minute {
			return fmt.Errorf("only %d of %d agents registered after 10 minutes", active, *agents)
		}
		time.Sleep(time.Second)
	}
	registered := time.Since(started)
	time.Sleep(*settle)
	beats0, counted := heartbeats("http://" + addr)
	cpu0, _ := benchutil.CPUSeconds(coord.Process.Pid)
	var statCounts map[string]float64
	t0 := time.Now()
	if *perfOut != "" {
		// perf's sampling costs the coordinator a little CPU: figures from
		// a run with --perf are for finding where the CPU goes, not for
		// comparing.
		rec := exec.Command("perf", "record", "-F", "499", "-g", "-o", *perfOut, "-p", strconv.Itoa(coord.Process.Pid), "--", "sleep", strconv.FormatFloat(window.Seconds(), 'f', -1, 64))
		rec.Stderr = os.Stderr
		if err := rec.Run(); err != nil {
			return fmt.Errorf("perf record: %w", err)
		}
	} else if *statOut {
		stat := exec.Command("perf", "stat", "-x", ",", "-e", strings.Join(statEvents, ","), "-p", strconv.Itoa(coord.Process.Pid), "--", "sleep", strconv.FormatFloat(window.Seconds(), 'f', -1, 64))
		out, err := stat.CombinedOutput()
		if err != nil {
			return fmt.Errorf("perf stat: %w: %s", err, out)
		}
		statCounts = parseStat(string(out))
	} else {
		time.Sleep(*window)
	}
	cpu1, _ := benchutil.CPUSeconds(coord.Process.Pid)
	elapsed := time.Since(t0).Seconds()
	beats1, _ := heartbeats("http://" + addr)
	rss, _ := benchutil.RSSBytes(coord.Process.Pid)
	simCPU, _ := benchutil.CPUSeconds(sim.Process.Pid)
	simRSS, _ := benchutil.RSSBytes(sim.Process.Pid)
	fmt.Printf("%d agents ACTIVE (of %d) after %v; %d at the window's end (settled for %v before it)\n", active, *agents, registered.Round(time.Millisecond), activeAgents(), *settle)
	if len(coordEnv) > 0 {
		fmt.Printf("coordinator environment: %s\n", strings.Join(coordEnv, " "))
	}
	fmt.Printf("coordinator over %v of heartbeats: CPU %.3f cores, RSS %.1f MiB\n", window.Round(time.Second), (cpu1-cpu0)/elapsed, float64(rss)/(1<<20))
	if beats := beats1.total() - beats0.total(); counted && beats > 0 {
		fmt.Printf("heartbeats: %.0f/s (%v), coordinator CPU per heartbeat %.0f us\n", beats/elapsed, beatsByTransport(beats1, beats0), (cpu1-cpu0)/beats*1e6)
		if statCounts != nil {
			var parts []string
			for _, e := range statEvents {
				parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(e, "syscalls:sys_enter_"), statCounts[e]/beats))
			}
			fmt.Printf("per heartbeat: %s\n", strings.Join(parts, ", "))
		}
	} else {
		fmt.Println("heartbeats: not counted by this coordinator (no slackline_coordinator_agent_heartbeats_total)")
	}
	fmt.Printf("slackline-sim: CPU %.1f s in total since start, RSS %.1f MiB\n", simCPU, float64(simRSS)/(1<<20))
	return nil
}

// statEvents are the events --stat counts.
var statEvents = []string{"context-switches", "syscalls:sys_enter_read", "syscalls:sys_enter_write", "syscalls:sys_enter_futex", "syscalls:sys_enter_nanosleep", "syscalls:sys_enter_epoll_pwait"}

// parseStat reads perf stat -x, output: count,unit,event,...
func parseStat(out string) map[string]float64 {
	counts := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			counts[f[2]] = v
		}
	}
	return counts
}

// beatCounts are the coordinator's heartbeats by transport.
type beatCounts map[string]float64

// heartbeats reads the coordinator's heartbeat counters from /metrics;
// counted is false when it has none.
func heartbeats(base string) (beatCounts, bool) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	counts := beatCounts{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, `slackline_coordinator_agent_heartbeats_total{transport="`)
		if !ok {
			continue
		}
		transport, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			counts[transport] = v
		}
	}
	return counts, len(counts) > 0
}

func (b beatCounts) total() float64 {
	var n float64
	for _, v := range b {
		n += v
	}
	return n
}

// beatsByTransport describes the heartbeats between two readings.
func beatsByTransport(after, before beatCounts) string {
	var parts []string
	for _, t := range []string{"call", "stream"} {
		parts = append(parts, fmt.Sprintf("%s %.0f", t, after[t]-before[t]))
	}
	return strings.Join(parts, ", ")
}
