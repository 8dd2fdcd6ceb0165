// Command offerlatency measures the coordinator's offer latency: the time
// from an agent reporting a task finished (its resources freed) to the
// resulting offer reaching a waiting framework, over real RPC on loopback.
// It prints p50, p90, p99 and max over --trials trials.
//
// --agents and --frameworks grow the cluster around the measured pair (one
// agent driven by hand, one framework launching on it): the other agents
// are simulated (sim: the real agent protocol, heartbeats included) with
// --agent-resources each, the other frameworks decline every offer with a
// long filter (as in Mesos's DeclineOffers benchmark). Both run in a child
// process (this program re-executed as "offerlatency cluster"), so that
// the measured process holds the coordinator, the measured agent and the
// measured framework only: a profile (--cpuprofile) shows the coordinator's
// work, not the simulator's.
//
// Measurement starts once the cluster is quiet: every other framework has
// declined every simulated agent with its long filter, and no decline came
// for two seconds. With offerable simulated agents that is agents x
// frameworks declines (ten million at 10,000 x 1,000); the time until the
// last one is printed as the settle time. The declining frameworks speak
// cleartext HTTP/2, 100 to a connection, and take events uncompressed, as
// the simulated agents do. --agent-resources below the coordinator's minimum
// allocatable size (cpus:0.001;mem:1) makes them agents with nothing left
// to offer, which settles at once.
//
// The trials are measured in the steady state of the agents' heartbeats:
// one heartbeat interval (as the coordinator tells agents; it grows with
// the cluster, see --max-heartbeat-rate) after the cluster settled, and
// spread over two intervals (--window), so that every agent's heartbeats
// fall among them.
//
//	go run ./scripts/bench/offerlatency --trials 1000
//	go run ./scripts/bench/offerlatency --agents 10000 --frameworks 1000
//	go run ./scripts/bench/offerlatency --agents 10000 --frameworks 1000 --agent-resources 'cpus:0.001;mem:1'
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/coordinator/allocator"
	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

// clusterCommand is the first argument of the child process that runs the
// simulated agents and the declining frameworks.
const clusterCommand = "cluster"

func main() {
	run := run
	if len(os.Args) > 1 && os.Args[1] == clusterCommand {
		run = runCluster
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "offerlatency:", err)
		os.Exit(1)
	}
}

func run() error {
	trials := flag.Int("trials", 1000, "number of measured trials")
	agentCount := flag.Int("agents", 1, "agents in the cluster, the measured one included (the others simulated)")
	frameworkCount := flag.Int("frameworks", 1, "frameworks, the measured one included (the others decline everything with a long filter)")
	agentResources := flag.String("agent-resources", "cpus:4;mem:4096", "resources of each simulated agent (below the minimum allocatable size, e.g. cpus:0.001;mem:1, they are never offered: agents as good as full)")
	timeoutFlag := flag.Duration("timeout", 30*time.Minute, "give up when settling and the trials take longer")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measured trials to this file")
	memProfile := flag.String("memprofile", "", "write a heap profile of this process (the coordinator's) after the trials to this file")
	settleProfile := flag.String("settle-cpuprofile", "", "write a CPU profile of the settling (the declines before the trials) to this file")
	heartbeatRate := flag.Int("max-heartbeat-rate", 0, "the coordinator's agent heartbeat budget, heartbeats a second (0: its default; negative: none, every agent beats every 5 s)")
	window := flag.Duration("window", 0, "spread the trials over at least this time (default: twice the agents' heartbeat interval, so that every agent's heartbeats fall in it)")
	flag.Parse()
	simRes, err := resources.Parse(*agentResources)
	if err != nil {
		return fmt.Errorf("--agent-resources: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "offerlatency")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	coord, err := coordinator.New(coordinator.Config{WorkDir: dir, Logger: quiet, MaxAgentHeartbeatRate: *heartbeatRate,
		Limits: coordinator.Limits{MaxSubscriptionsPerPrincipal: -1}})
	if err != nil {
		return err
	}
	defer coord.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	go coord.Run(ctx)
	go server.Serve(ctx, server.Config{Listener: ln, Logger: quiet}, coord.Handler())

	// The agent: the real AgentService protocol, by hand.
	httpClient := server.NewClient()
	agents := slacklinev1connect.NewAgentServiceClient(httpClient, url)
	reg, err := agents.Register(ctx, connect.NewRequest(&slacklinev1.RegisterRequest{
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo:       &slacklinev1.AgentInfo{Hostname: "bench", Resources: resources.MustParse("cpus:4;mem:4096").Proto("", resources.Regular)},
	}))
	if err != nil {
		return err
	}
	agentID, session := reg.Msg.GetAgentId(), reg.Msg.GetSessionId()
	go func() {
		for range time.Tick(time.Second) {
			_, _ = agents.Heartbeat(ctx, connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: agentID, SessionId: session}))
		}
	}()
	commands, err := agents.Connect(ctx, connect.NewRequest(&slacklinev1.ConnectRequest{AgentId: agentID, SessionId: session}))
	if err != nil {
		return err
	}

	deadline := time.Now().Add(*timeoutFlag)
	started := time.Now()
	cl, err := startCluster(ctx, url, *agentCount-1, *frameworkCount-1, *agentResources)
	if err != nil {
		return err
	}
	if err := cl.waitFor(deadline, "simulated agents registered and frameworks subscribed", func(p progress) bool {
		return p.agents >= *agentCount-1 && p.frameworks >= *frameworkCount-1
	}); err != nil {
		return err
	}
	grown := time.Since(started)

	// Quiet once every decliner declined every simulated agent it can be
	// offered, the measured framework too, and no decline came for a while.
	offerable := simRes.AnyScalarAtLeast(allocator.DefaultMinAllocatable)
	otherAgents := 0
	if offerable {
		otherAgents = *agentCount - 1
	}
	wantDeclined := (*frameworkCount - 1) * otherAgents
	var ownDeclined atomic.Int64
	var settled atomic.Bool
	var gap atomic.Int64 // the least time between two trials, once measuring

	// freedAt is set (unix ns) just before the agent reports a task finished.
	var freedAt atomic.Int64
	latencies := make(chan time.Duration, *trials+10)
	seq := 0
	handler := frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			var mine []*slacklinev1.Offer
			for _, o := range offers {
				if o.GetAgentId() == agentID {
					mine = append(mine, o)
				} else {
					_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(longFilter))
					ownDeclined.Add(1)
				}
			}
			if len(mine) == 0 {
				return
			}
			if t0 := freedAt.Swap(0); t0 != 0 && settled.Load() {
				latencies <- time.Duration(time.Now().UnixNano() - t0)
			}
			for _, o := range mine {
				res, _, _ := frameworkapi.OfferResources(o)
				seq++
				id := fmt.Sprintf("t%d", seq)
				task := frameworkapi.NewTask(id, id, o, res, &slacklinev1.CommandInfo{Value: "true", Shell: true})
				_ = c.Launch(ctx, []string{o.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(0))
			}
		},
	}
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: url, Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "offerlatency"}})
	if err != nil {
		return err
	}
	go fw.Run(ctx, handler)

	// The agent finishes each task as soon as it starts, or once gap has
	// passed since the last one.
	go func() {
		n := 0
		var next time.Time
		for commands.Receive() {
			run := commands.Msg().GetCommand().GetRunTask()
			if run == nil {
				continue
			}
			n++
			status := func(state slacklinev1.TaskState) {
				_, _ = agents.UpdateStatus(ctx, connect.NewRequest(&slacklinev1.UpdateStatusRequest{
					AgentId: agentID, SessionId: session, FrameworkId: run.GetFramework().GetId(),
					Status: &slacklinev1.TaskStatus{TaskId: run.GetTask().GetTaskId(), State: state, Uuid: fmt.Sprintf("u%d-%d", n, state)},
				}))
			}
			status(slacklinev1.TaskState_TASK_STATE_RUNNING)
			if g := time.Duration(gap.Load()); g > 0 {
				time.Sleep(time.Until(next))
				next = time.Now().Add(g)
			}
			freedAt.Store(time.Now().UnixNano())
			status(slacklinev1.TaskState_TASK_STATE_FINISHED)
		}
	}()

	stopSettleProfile, err := startProfile(*settleProfile)
	if err != nil {
		return err
	}
	// The measured agent is offered to the others only while the measured
	// framework does not hold it, so some may never decline it: quiet is
	// when the declines stopped.
	lastDeclined, lastChange := -1, time.Now()
	err = cl.waitFor(deadline, "declines", func(p progress) bool {
		if p.declined != lastDeclined {
			lastDeclined, lastChange = p.declined, time.Now()
		}
		return p.declined >= wantDeclined && ownDeclined.Load() >= int64(otherAgents) && time.Since(lastChange) >= quietAfter
	})
	stopSettleProfile()
	if err != nil {
		return err
	}
	settle := time.Since(started) - grown - quietAfter // until the last decline

	// Measure in the steady state of the heartbeats: one interval after
	// the cluster settled (agents told a longer interval as it grew have
	// heard of it by then), with the trials spread over two intervals.
	hb, err := agents.Heartbeat(ctx, connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: agentID, SessionId: session}))
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	interval := time.Duration(hb.Msg.GetHeartbeatIntervalSeconds() * float64(time.Second))
	time.Sleep(interval)
	measureWindow := *window
	if measureWindow == 0 {
		measureWindow = 2 * interval
	}
	gap.Store(int64(measureWindow / time.Duration(*trials+warmup)))
	settled.Store(true)
	measureStart, cpuStart, gcStart := time.Now(), processCPU(), numGC()

	var all []time.Duration
	stopProfile := func() {}
	timeout := time.After(time.Until(deadline))
	for len(all) < *trials+warmup {
		select {
		case d := <-latencies:
			all = append(all, d)
			if len(all) == warmup {
				if stopProfile, err = startProfile(*cpuProfile); err != nil {
					return err
				}
			}
		case err := <-cl.exited:
			return fmt.Errorf("cluster process: %w", err)
		case <-timeout:
			return errors.New("timed out waiting for offers")
		}
	}
	stopProfile()
	measured := time.Since(measureStart)
	cpu, gcs := processCPU()-cpuStart, numGC()-gcStart
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
	}
	declined := cl.latest().declined
	all = all[warmup:]
	slices.Sort(all)
	pct := func(p float64) time.Duration { return benchutil.Percentile(all, p, 0) }
	fmt.Printf("offer latency (task finished -> offer received), %d agents x %d frameworks, %d trials: p50 %v  p90 %v  p99 %v  max %v\n",
		*agentCount, *frameworkCount, len(all), pct(0.50).Round(time.Microsecond), pct(0.90).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), all[len(all)-1].Round(time.Microsecond))
	fmt.Printf("cluster grown in %v; settled in %v (%d declines by the other frameworks, %d by the measured one); trials over %v, agents heartbeating every %v (%.0f a second)\n",
		grown.Round(time.Millisecond), settle.Round(time.Millisecond), declined, ownDeclined.Load(),
		measured.Round(time.Millisecond), interval, float64(*agentCount)/interval.Seconds())
	fmt.Printf("coordinator process during the trials: %.1f%% of a CPU, %d garbage collections (%.2f a second)\n",
		100*cpu.Seconds()/measured.Seconds(), gcs, float64(gcs)/measured.Seconds())
	return nil
}

// processCPU is the CPU time this process (the coordinator, the measured
// agent and framework) has used, user and system.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// numGC is the number of completed garbage collections of this process.
func numGC() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}

// startProfile starts a CPU profile written to path (none when empty)
// and returns the function that stops it.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeHeapProfile writes a heap profile, after a garbage collection, to
// path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

// quietAfter is how long no decline must come for the cluster to be quiet.
const quietAfter = 2 * time.Second

// warmup is how many trials go unmeasured before the measured ones.
const warmup = 20

// longFilter is how long declined resources stay away from a decliner.
const longFilter = 24 * 3600

// progress is what the cluster process reports: simulated agents
// registered, declining frameworks subscribed, offers they declined.
type progress struct{ agents, frameworks, declined int }

const progressFormat = "agents %d frameworks %d declined %d\n"

// cluster is the child process that runs the simulated agents and the
// declining frameworks.
type cluster struct {
	mu       sync.Mutex
	progress progress
	changed  chan struct{} // closed and replaced on every report
	exited   chan error
}

// startCluster starts the child process: agents simulated agents with res
// each and frameworks frameworks that decline every offer with
// longFilter. The child ends when ctx is cancelled (or this process dies:
// it watches its stdin).
func startCluster(ctx context.Context, url string, agents, frameworks int, res string) (*cluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, clusterCommand, "--coordinator", url,
		"--agents", fmt.Sprint(agents), "--frameworks", fmt.Sprint(frameworks), "--agent-resources", res)
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	cl := &cluster{changed: make(chan struct{}), exited: make(chan error, 1)}
	go func() {
		scanner := bufio.NewScanner(out)
		for scanner.Scan() {
			var p progress
			if _, err := fmt.Sscanf(scanner.Text()+"\n", progressFormat, &p.agents, &p.frameworks, &p.declined); err != nil {
				continue
			}
			cl.mu.Lock()
			cl.progress = p
			close(cl.changed)
			cl.changed = make(chan struct{})
			cl.mu.Unlock()
		}
		cl.exited <- cmd.Wait()
	}()
	return cl, nil
}

func (cl *cluster) latest() progress {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.progress
}

// waitFor waits until done holds for the latest report (checked on each
// report and every 100 ms), logging the progress on stderr every 10 s.
func (cl *cluster) waitFor(deadline time.Time, what string, done func(progress) bool) error {
	timeout := time.After(time.Until(deadline))
	start := time.Now()
	logged := start
	for {
		cl.mu.Lock()
		p, changed := cl.progress, cl.changed
		cl.mu.Unlock()
		if done(p) {
			return nil
		}
		if time.Since(logged) >= 10*time.Second {
			logged = time.Now()
			fmt.Fprintf(os.Stderr, "waiting %v for %s: %d agents, %d frameworks, %d declines\n",
				time.Since(start).Round(time.Second), what, p.agents, p.frameworks, p.declined)
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		case err := <-cl.exited:
			return fmt.Errorf("cluster process: %w", err)
		case <-timeout:
			return fmt.Errorf("timed out waiting for %s: %+v", what, p)
		}
	}
}

// frameworksPerConnection is how many declining frameworks share an HTTP/2
// connection (the server allows 250 streams per connection).
const frameworksPerConnection = 100

// h2cClient returns a client that speaks cleartext HTTP/2 only.
func h2cClient() *http.Client {
	t := &http.Transport{Protocols: new(http.Protocols)}
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}

// runCluster is the child process: the simulated agents and the declining
// frameworks, reporting progress on stdout until its stdin closes.
func runCluster() error {
	flags := flag.NewFlagSet(clusterCommand, flag.ContinueOnError)
	url := flags.String("coordinator", "", "coordinator URL")
	agents := flags.Int("agents", 0, "simulated agents")
	frameworks := flags.Int("frameworks", 0, "declining frameworks")
	res := flags.String("agent-resources", "", "resources of each simulated agent")
	if err := flags.Parse(os.Args[2:]); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var fleet *sim.Fleet
	if *agents > 0 {
		r, err := resources.Parse(*res)
		if err != nil {
			return fmt.Errorf("--agent-resources: %w", err)
		}
		fleet, err = sim.NewFleet(sim.Config{Coordinator: *url, Count: *agents, Resources: r, Logger: quiet, HostnamePrefix: "sim-"})
		if err != nil {
			return err
		}
		go fleet.Run(ctx)
	}
	var subscribed, declined atomic.Int64
	decline := frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			ids := make([]string, len(offers))
			for i, o := range offers {
				ids[i] = o.GetId()
			}
			if c.Decline(ctx, ids, frameworkapi.Filters(longFilter)) == nil {
				declined.Add(int64(len(ids)))
			}
		},
	}
	// Cleartext HTTP/2, frameworksPerConnection to a connection (over
	// HTTP/1.1 each stream would hold a connection and every Decline dial
	// one), and uncompressed events, as the simulator's agents: the
	// child's CPU is the machine's too.
	var clients []*http.Client
	// Frameworks subscribe once the agents are registered, as before the
	// cluster process existed: their first offers are then whole passes.
	for fleet != nil && fleet.Registered() < *agents {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
		fmt.Printf(progressFormat, fleet.Registered(), 0, 0)
	}
	for i := range *frameworks {
		if i%frameworksPerConnection == 0 {
			clients = append(clients, h2cClient())
		}
		fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: *url, Logger: quiet, HTTPClient: clients[len(clients)-1],
			ClientOptions: []connect.ClientOption{connect.WithAcceptCompression("gzip", nil, nil)},
			Framework:     &slacklinev1.FrameworkInfo{Name: fmt.Sprint("decliner-", i)}})
		if err != nil {
			return err
		}
		var once sync.Once
		h := decline
		h.SubscribedFunc = func(context.Context, *frameworkapi.Client, *slacklinev1.SubscribedEvent) {
			once.Do(func() { subscribed.Add(1) })
		}
		go fw.Run(ctx, h)
	}
	for {
		registered := *agents
		if fleet != nil {
			registered = fleet.Registered()
		}
		fmt.Printf(progressFormat, registered, subscribed.Load(), declined.Load())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}
