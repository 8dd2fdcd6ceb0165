// Command idle measures what an idle framework subscription costs the
// coordinator, side by side with the floor: what an idle streaming
// connection costs a bare net/http handler. It starts each server in a
// child process of its own (the same binary: "idle serve", with the same
// environment, so the same runtime settings), opens --streams idle streams
// to it over HTTP/1.1 (one connection each, as the issue measured; the
// coordinator's one Suppress call per subscription reuses the idle
// connection the next stream takes), and reads the child's RSS, anonymous
// RSS, its Go heap and stacks in use and its live heap and stacks after two
// collections and FreeOSMemory, before and after. It prints both costs per
// stream and their ratios (the goal, at most 1.25, is on RSS), and the
// coordinator's cost per 1,000 completed tasks; --runs repeats the whole.
//
// Where the difference goes (see the per-server breakdown lines; 300
// streams, about 33 KB per subscription against 25.5 KB): connect's
// per-stream state (~0.9 KB for the handler's conn, ~0.3 KB for the
// request it copies, ~0.45 KB for the response headers net/http snapshots
// at the first write), the coordinator's own (the framework record, its
// queue, its FrameworkInfo, the allocator's entry: ~1.2 KB), free space
// left in heap spans by the garbage of subscribing (~0.5 KB), and the
// registry write: each bbolt commit's ~14 KB of garbage (page buffers,
// 8 KB pages so that they do not share the 4 KB size class with
// connections' buffers) and the file's mapped pages, about 2.5-3 KB per
// subscription (ratio 1.25-1.31; 1.16-1.18 with the append-only log the
// registry was for a while, alternated runs). Stacks cost about what the bare
// handler's do: the deep calls of subscribing run on long-lived goroutines
// (the store's writer, the coordinator's subscriber), not on the
// handler's, nor on one started per stream; and the frames an idle stream
// waits under keep their work out of line, so that it uses less than a
// quarter of 16 KB and the GC shrinks its stack back to 8 KB after its
// first send grew it (18 KB of stacks per subscription when it used just
// over a quarter: a few more bytes of frame under the wait double it). Go
// starts new goroutines with a stack the size of the average one scanned
// (GODEBUG adaptivestackstart): a subscription's handler blocks deeper
// (connect, the coordinator) than a bare handler, so net/http's background
// reader of a connection sometimes starts, and stays, at 4 KB instead of
// 2 KB. GODEBUG=adaptivestackstart=0 in the environment (both children
// inherit it) shows that part.
//
// IDLE_PROFILE_DIR=dir saves heap profiles of the children (every
// allocation sampled) and their goroutines.
//
//	go run ./scripts/bench/idle --streams 300 --runs 3
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		err = serve(os.Args[2:])
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}

// memory is what a child reports about itself.
type memory struct {
	RSS   int64 // bytes, from /proc/self/status
	Go    int64 // heap in use + stacks in use, after a GC
	Stack int64 // stacks in use
	Anon  int64 // anonymous RSS: RSS without file pages (the registry's mmap)
	Live  int64 // live heap (marked by the last GC, without free space in spans) + stacks
	Tasks int   // completed tasks the coordinator keeps
	// Runtime is the rest of what the Go runtime holds: span structures,
	// GC metadata, other off-heap structures.
	Runtime int64
}

func run() error {
	streams := flag.Int("streams", 300, "idle streams to open to each server")
	tasks := flag.Int("completed-tasks", 1000, "completed tasks to measure the coordinator's cost of")
	runs := flag.Int("runs", 1, "measurements, each of both servers side by side")
	suppress := flag.Bool("suppress", false, "each idle framework calls Suppress right after subscribing, inside the measurement "+
		"(by default it calls it after, before the completed tasks are measured)")
	flag.Parse()
	for range *runs {
		if err := runOnce(*streams, *tasks, *suppress); err != nil {
			return err
		}
	}
	return nil
}

func runOnce(streams, tasks int, suppress bool) error {
	bare, err := measure("bare", streams, 0, suppress)
	if err != nil {
		return fmt.Errorf("bare handler: %w", err)
	}
	sub, err := measure("coordinator", streams, tasks, suppress)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	fmt.Printf("idle stream over HTTP/1.1, %d each: bare net/http handler %.1f KB RSS (%.1f Go heap+stacks in use, %.1f live, %.1f stacks); "+
		"coordinator Subscribe %.1f KB RSS (%.1f Go in use, %.1f live, %.1f stacks); ratio %.2f RSS, %.2f anon RSS, %.2f Go in use, %.2f live; "+
		"%d completed tasks %.0f KB (Go in use), %.0f KB live\n",
		streams, kb(bare.stream.RSS), kb(bare.stream.Go), kb(bare.stream.Live), kb(bare.stream.Stack),
		kb(sub.stream.RSS), kb(sub.stream.Go), kb(sub.stream.Live), kb(sub.stream.Stack),
		ratio(sub.stream.RSS, bare.stream.RSS), ratio(sub.stream.Anon, bare.stream.Anon), ratio(sub.stream.Go, bare.stream.Go), ratio(sub.stream.Live, bare.stream.Live),
		tasks, kb(sub.tasks.Go), kb(sub.tasks.Live))
	for _, r := range []struct {
		name string
		m    memory
	}{{"bare", bare.stream}, {"coordinator", sub.stream}} {
		fmt.Printf("  %-12s RSS %.1f KB: anon %.1f, Go in use %.1f (stacks %.1f), live %.1f, runtime %.1f\n",
			r.name, kb(r.m.RSS), kb(r.m.Anon), kb(r.m.Go), kb(r.m.Stack), kb(r.m.Live), kb(r.m.Runtime))
	}
	return nil
}

func kb(b int64) float64 { return float64(b) / 1024 }

func ratio(a, b int64) float64 { return float64(a) / float64(b) }

// rssAnon returns this process's anonymous resident memory.
func rssAnon() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			var kB int64
			fmt.Sscan(rest, &kB)
			return kB << 10
		}
	}
	return 0
}

type result struct {
	stream memory // per stream
	tasks  memory // for all completed tasks
}

// measure starts a child serving kind, opens streams idle streams and
// returns the cost per stream; for the coordinator it then completes tasks
// tasks and returns their cost too. An idle framework wants no offers (they
// would go to it rather than to the framework whose tasks are measured): it
// suppresses them, inside the measurement of the streams if suppress is
// set, else after it.
func measure(kind string, streams, tasks int, suppress bool) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	addr := benchutil.FreeAddr()
	cmd := exec.Command(self, "serve", kind, addr)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	url := "http://" + addr
	if err := waitServing(url); err != nil {
		return result{}, err
	}
	// HTTP/1.1 only: each stream is a connection of its own.
	transport := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: streams, DisableCompression: true}
	client := &http.Client{Transport: transport}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var idle []*slacklinev1.SubscribedEvent
	open := func(n int) error {
		for range n {
			subscribed, err := openStream(ctx, client, url, kind)
			if err != nil {
				return err
			}
			if subscribed == nil {
				continue
			}
			if !suppress {
				idle = append(idle, subscribed)
			} else if err := suppressOffers(ctx, client, url, subscribed); err != nil {
				return err
			}
		}
		return nil
	}
	// Warm up (first-use allocations are not per stream), then measure.
	if err := open(10); err != nil {
		return result{}, err
	}
	before, err := report(url, client)
	if err != nil {
		return result{}, err
	}
	profile(client, url, kind+".before")
	if err := open(streams); err != nil {
		return result{}, err
	}
	after, err := report(url, client)
	if err != nil {
		return result{}, err
	}
	per := func(a, b int64) int64 { return (a - b) / int64(streams) }
	res := result{stream: memory{RSS: per(after.RSS, before.RSS), Go: per(after.Go, before.Go),
		Stack: per(after.Stack, before.Stack), Anon: per(after.Anon, before.Anon), Live: per(after.Live, before.Live),
		Runtime: per(after.Runtime, before.Runtime)}}
	profile(client, url, kind+".after")
	for _, subscribed := range idle {
		if err := suppressOffers(ctx, client, url, subscribed); err != nil {
			return result{}, err
		}
	}
	if tasks > 0 {
		res.tasks, err = completeTasks(url, client, tasks)
	}
	return res, err
}

// profile saves the child's heap profile under $IDLE_PROFILE_DIR, if set.
func profile(client *http.Client, url, name string) {
	dir := os.Getenv("IDLE_PROFILE_DIR")
	if dir == "" {
		return
	}
	if g, err := client.Get(url + "/debug/pprof/goroutine?debug=1"); err == nil {
		f, _ := os.Create(dir + "/" + name + ".goroutine")
		io.Copy(f, g.Body)
		f.Close()
		g.Body.Close()
	}
	resp, err := client.Get(url + "/debug/pprof/heap?gc=1")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(dir + "/" + name + ".heap")
	if err != nil {
		return
	}
	defer f.Close()
	io.Copy(f, resp.Body)
}

func waitServing(url string) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/memory"); err == nil {
			resp.Body.Close()
			return nil
		}
	}
	return fmt.Errorf("%s did not start serving", url)
}

func report(url string, client *http.Client) (memory, error) {
	time.Sleep(3 * heartbeat) // every stream has sent heartbeats
	resp, err := client.Get(url + "/memory")
	if err != nil {
		return memory{}, err
	}
	defer resp.Body.Close()
	var m memory
	return m, json.NewDecoder(resp.Body).Decode(&m)
}

// openStream opens one idle stream and returns once its first message
// arrived, with the coordinator's Subscribed event; the stream stays open
// until ctx ends.
func openStream(ctx context.Context, client *http.Client, url, kind string) (*slacklinev1.SubscribedEvent, error) {
	if kind == "bare" {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/stream", nil)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, 1)
		if _, err := resp.Body.Read(buf); err != nil {
			return nil, err
		}
		go func() { io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
		return nil, nil
	}
	scheduler := slacklinev1connect.NewSchedulerServiceClient(client, url)
	stream, err := scheduler.Subscribe(ctx, connect.NewRequest(&slacklinev1.SubscribeRequest{
		FrameworkInfo: &slacklinev1.FrameworkInfo{Name: "idle", FailoverTimeoutSeconds: 60}}))
	if err != nil {
		return nil, err
	}
	if !stream.Receive() {
		return nil, fmt.Errorf("subscribe: %w", stream.Err())
	}
	subscribed := stream.Msg().GetEvent().GetSubscribed()
	go func() {
		for stream.Receive() {
		}
	}()
	return subscribed, nil
}

// suppressOffers suppresses the offers of a subscribed framework.
func suppressOffers(ctx context.Context, client *http.Client, url string, subscribed *slacklinev1.SubscribedEvent) error {
	scheduler := slacklinev1connect.NewSchedulerServiceClient(client, url)
	suppress := connect.NewRequest(&slacklinev1.SuppressRequest{FrameworkId: subscribed.GetFrameworkId()})
	suppress.Header().Set(protocol.StreamIDHeader, subscribed.GetStreamId())
	_, err := scheduler.Suppress(ctx, suppress)
	return err
}

// completeTasks registers an agent, launches n tasks of a new framework on
// it, finishes them and returns what the coordinator keeps for them.
func completeTasks(url string, client *http.Client, n int) (memory, error) {
	var before memory
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agents := slacklinev1connect.NewAgentServiceClient(client, url)
	reg, err := agents.Register(ctx, connect.NewRequest(&slacklinev1.RegisterRequest{
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo:       &slacklinev1.AgentInfo{Hostname: "bench", Resources: resources.MustParse("cpus:1000;mem:1000000").Proto("", resources.Regular)},
	}))
	if err != nil {
		return memory{}, err
	}
	agentID, session := reg.Msg.GetAgentId(), reg.Msg.GetSessionId()
	commands, err := agents.Connect(ctx, connect.NewRequest(&slacklinev1.ConnectRequest{AgentId: agentID, SessionId: session}))
	if err != nil {
		return memory{}, err
	}
	scheduler := slacklinev1connect.NewSchedulerServiceClient(client, url)
	events, err := scheduler.Subscribe(ctx, connect.NewRequest(&slacklinev1.SubscribeRequest{
		FrameworkInfo: &slacklinev1.FrameworkInfo{Name: "tasks"}}))
	if err != nil {
		return memory{}, err
	}
	var frameworkID, streamID string
	var offer *slacklinev1.Offer
	updates := make(chan *slacklinev1.TaskStatus, n)
	for offer == nil && events.Receive() {
		ev := events.Msg().GetEvent()
		if s := ev.GetSubscribed(); s != nil {
			frameworkID, streamID = s.GetFrameworkId(), s.GetStreamId()
		}
		for _, o := range ev.GetOffers().GetOffers() {
			if o.GetAgentId() == agentID {
				offer = o
			}
		}
	}
	if offer == nil {
		return memory{}, fmt.Errorf("no offer: %v", events.Err())
	}
	go func() {
		for events.Receive() {
			if st := events.Msg().GetEvent().GetUpdate().GetStatus(); st != nil {
				updates <- st
			}
		}
	}()
	// What the coordinator holds for the agent and the framework so far
	// is not the tasks' cost.
	before, err = report(url, client)
	if err != nil {
		return memory{}, err
	}
	profile(client, url, "tasks.before")
	var tasks []*slacklinev1.TaskInfo
	for i := range n {
		id := fmt.Sprintf("task-%06d", i)
		tasks = append(tasks, &slacklinev1.TaskInfo{TaskId: id, Name: id, AgentId: agentID,
			Resources: resources.MustParse("cpus:0.1;mem:32").Proto(offer.GetResources()[0].GetRole(), resources.Regular),
			Command:   &slacklinev1.CommandInfo{Value: "echo " + strings.Repeat("x", 64), Shell: true},
			Labels:    map[string]string{"job": "bench"}})
	}
	accept := connect.NewRequest(&slacklinev1.AcceptRequest{FrameworkId: frameworkID, OfferIds: []string{offer.GetId()},
		Operations: []*slacklinev1.Operation{{Operation: &slacklinev1.Operation_Launch{Launch: &slacklinev1.LaunchOperation{TaskInfos: tasks}}}}})
	accept.Header().Set(protocol.StreamIDHeader, streamID)
	if _, err := scheduler.Accept(ctx, accept); err != nil {
		return memory{}, err
	}
	// No more offers: resources freed by the tasks would be offered anew.
	suppress := connect.NewRequest(&slacklinev1.SuppressRequest{FrameworkId: frameworkID})
	suppress.Header().Set(protocol.StreamIDHeader, streamID)
	if _, err := scheduler.Suppress(ctx, suppress); err != nil {
		return memory{}, err
	}
	for i := 0; i < n && commands.Receive(); {
		run := commands.Msg().GetCommand().GetRunTask()
		if run == nil {
			continue
		}
		i++
		if _, err := agents.UpdateStatus(ctx, connect.NewRequest(&slacklinev1.UpdateStatusRequest{
			AgentId: agentID, SessionId: session, FrameworkId: frameworkID,
			Status: &slacklinev1.TaskStatus{TaskId: run.GetTask().GetTaskId(), State: slacklinev1.TaskState_TASK_STATE_FINISHED,
				Uuid: fmt.Sprint("u", i), Message: "exited with code 0"}})); err != nil {
			return memory{}, err
		}
	}
	go func() { // the acknowledgements forwarded to the agent
		for commands.Receive() {
		}
	}()
	for range n {
		st := <-updates
		ack := connect.NewRequest(&slacklinev1.AcknowledgeRequest{FrameworkId: frameworkID, TaskId: st.GetTaskId(), Uuid: st.GetUuid()})
		ack.Header().Set(protocol.StreamIDHeader, streamID)
		if _, err := scheduler.Acknowledge(ctx, ack); err != nil {
			return memory{}, err
		}
	}
	after, err := report(url, client)
	if err != nil {
		return memory{}, err
	}
	profile(client, url, "tasks.after")
	if after.Tasks != n {
		return memory{}, fmt.Errorf("the coordinator keeps %d completed tasks, want %d", after.Tasks, n)
	}
	return memory{RSS: after.RSS - before.RSS, Go: after.Go - before.Go, Live: after.Live - before.Live}, nil
}

// heartbeat is how often both servers send on an idle stream (the
// coordinator's default is 15 s; shorter, so that the measurement sees
// streams that have sent more than their first message).
const heartbeat = time.Second

// serve is the child: it serves kind on addr, and /memory.
func serve(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: idle serve bare|coordinator ADDR")
	}
	kind, addr := args[0], args[1]
	if os.Getenv("IDLE_PROFILE_DIR") != "" {
		runtime.MemProfileRate = 1
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mux := http.NewServeMux()
	var completed func() int
	switch kind {
	case "bare":
		mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
			// A line now and one every heartbeat, as a subscription sends.
			tick := time.NewTicker(heartbeat)
			defer tick.Stop()
			for {
				w.Write([]byte{'\n'})
				http.NewResponseController(w).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
				}
			}
		})
	case "coordinator":
		dir, err := os.MkdirTemp("", "idle-coordinator")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		// Every idle subscription is the same (anonymous) principal's:
		// the per-principal bound (100 by default) would refuse --streams
		// of them.
		c, err := coordinator.New(coordinator.Config{WorkDir: dir, Logger: quiet, FrameworkHeartbeatInterval: heartbeat,
			Limits: coordinator.Limits{MaxFrameworksPerPrincipal: 1 << 20}})
		if err != nil {
			return err
		}
		defer c.Close()
		go c.Run(context.Background())
		mux.Handle("/", c.Handler())
		operator := slacklinev1connect.NewOperatorServiceClient(http.DefaultClient, "http://"+addr)
		completed = func() int {
			resp, err := operator.GetTasks(context.Background(), connect.NewRequest(&slacklinev1.GetTasksRequest{}))
			if err != nil {
				return -1
			}
			n := 0
			for _, t := range resp.Msg.GetTasks() {
				if t.GetState() == slacklinev1.TaskState_TASK_STATE_FINISHED {
					n++
				}
			}
			return n
		}
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/memory", func(w http.ResponseWriter, r *http.Request) {
		var m memory
		if completed != nil {
			m.Tasks = completed()
		}
		// Two collections empty the sync.Pools (a pool's victim cache
		// survives one); FreeOSMemory returns freed pages, so RSS counts
		// what is kept, not garbage not yet given back.
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		m.Go, m.Stack = int64(ms.HeapInuse+ms.StackInuse), int64(ms.StackInuse)
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(live)
		m.Live = int64(live[0].Value.Uint64()) + m.Stack
		m.RSS, _ = benchutil.RSSBytes(os.Getpid())
		m.Anon = rssAnon()
		m.Runtime = int64(ms.MSpanInuse + ms.MCacheInuse + ms.GCSys + ms.OtherSys + ms.BuckHashSys)
		json.NewEncoder(w).Encode(m)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return server.Serve(context.Background(), server.Config{Listener: ln, Logger: quiet}, mux)
}
