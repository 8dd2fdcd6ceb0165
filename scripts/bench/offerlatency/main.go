// Command offerlatency measures the coordinator's offer latency: the time
// from an agent reporting a task finished (its resources freed) to the
// resulting offer reaching a waiting framework, over real RPC on loopback.
// It prints p50, p90, p99 and max over --trials trials.
//
// --agents and --frameworks grow the cluster around the measured pair (one
// agent driven by hand, one framework launching on it): the other agents
// are simulated (sim: the real agent protocol, heartbeats included) with
// --agent-resources each, the other frameworks decline every offer with a
// long filter (as in Mesos's DeclineOffers benchmark). Measurement starts
// once every other framework has declined the measured agent, so that its
// freed resources go to the measured framework. With offerable simulated
// agents the other frameworks keep declining them (each pair once, for a
// day): at 10,000 x 1,000 that is ten million declines, so the measurement
// runs in that churn; --agent-resources below the coordinator's minimum
// allocatable size makes them agents with nothing left to offer.
//
//	go run ./scripts/bench/offerlatency --trials 1000
//	go run ./scripts/bench/offerlatency --agents 10000 --frameworks 1000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "offerlatency:", err)
		os.Exit(1)
	}
}

func run() error {
	trials := flag.Int("trials", 1000, "number of measured trials")
	agentCount := flag.Int("agents", 1, "agents in the cluster, the measured one included (the others simulated)")
	frameworkCount := flag.Int("frameworks", 1, "frameworks, the measured one included (the others decline everything with a long filter)")
	agentResources := flag.String("agent-resources", "cpus:4;mem:4096", "resources of each simulated agent (below --min-allocatable, e.g. cpus:0.001;mem:1, they are never offered: agents as good as full)")
	timeoutFlag := flag.Duration("timeout", 10*time.Minute, "give up when the trials take longer")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measured trials to this file")
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "offerlatency")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	coord, err := coordinator.New(coordinator.Config{WorkDir: dir, Logger: quiet,
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

	if err := grow(ctx, url, *agentCount-1, *frameworkCount-1, *agentResources, quiet); err != nil {
		return err
	}

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
				}
			}
			if len(mine) == 0 {
				return
			}
			if t0 := freedAt.Swap(0); t0 != 0 {
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

	// The agent finishes each task as soon as it starts.
	go func() {
		n := 0
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
			freedAt.Store(time.Now().UnixNano())
			status(slacklinev1.TaskState_TASK_STATE_FINISHED)
		}
	}()

	var all []time.Duration
	warmup := 20
	profiling := false
	timeout := time.After(*timeoutFlag)
	for len(all) < *trials+warmup {
		select {
		case d := <-latencies:
			all = append(all, d)
			if len(all) == warmup && *cpuProfile != "" {
				f, err := os.Create(*cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				profiling = true
			}
		case <-timeout:
			return errors.New("timed out waiting for offers")
		}
	}
	if profiling {
		pprof.StopCPUProfile()
	}
	all = all[warmup:]
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[int(p*float64(len(all)-1))] }
	fmt.Printf("offer latency (task finished -> offer received), %d agents x %d frameworks, %d trials: p50 %v  p90 %v  p99 %v  max %v\n",
		*agentCount, *frameworkCount, len(all), pct(0.50).Round(time.Microsecond), pct(0.90).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), all[len(all)-1].Round(time.Microsecond))
	return nil
}

// longFilter is how long declined resources stay away from a decliner.
const longFilter = 24 * 3600

// grow adds agents simulated agents with res each and frameworks
// frameworks that decline every offer with longFilter, and returns once
// the agents are registered and the frameworks subscribed.
func grow(ctx context.Context, url string, agents, frameworks int, res string, quiet *slog.Logger) error {
	if agents > 0 {
		r, err := resources.Parse(res)
		if err != nil {
			return fmt.Errorf("--agent-resources: %w", err)
		}
		fleet, err := sim.NewFleet(sim.Config{Coordinator: url, Count: agents, Resources: r, Logger: quiet, HostnamePrefix: "sim-"})
		if err != nil {
			return err
		}
		go fleet.Run(ctx)
		for deadline := time.Now().Add(5 * time.Minute); fleet.Registered() < agents; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d simulated agents registered", fleet.Registered(), agents)
			}
		}
	}
	var subscribed sync.WaitGroup
	decline := frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			ids := make([]string, len(offers))
			for i, o := range offers {
				ids[i] = o.GetId()
			}
			_ = c.Decline(ctx, ids, frameworkapi.Filters(longFilter))
		},
	}
	client := server.NewClient() // one connection for all of them
	for i := range frameworks {
		fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: url, Logger: quiet, HTTPClient: client,
			Framework: &slacklinev1.FrameworkInfo{Name: fmt.Sprint("decliner-", i)}})
		if err != nil {
			return err
		}
		subscribed.Add(1)
		var once sync.Once
		h := decline
		h.SubscribedFunc = func(context.Context, *frameworkapi.Client, *slacklinev1.SubscribedEvent) { once.Do(subscribed.Done) }
		go fw.Run(ctx, h)
	}
	subscribed.Wait()
	return nil
}
