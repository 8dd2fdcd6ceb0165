package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/ids"
	"github.com/slackline/slackline/internal/kv"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/internal/taskstate"
	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

// Containerizer runs tasks in containers. *containerizer.Containerizer
// implements it.
type Containerizer interface {
	Launch(ctx context.Context, spec containerizer.Spec) (*containerizer.Container, error)
	Kill(ctx context.Context, id string) error
	Destroy(id string) error
	Exits() <-chan containerizer.Exit
	Recover(ctx context.Context) ([]*containerizer.Container, error)
	Containers() []*containerizer.Container
	Mode() containerizer.Mode
	SetRevocableCPULimit(cores float64) error
	RevocableCPULimit() (float64, error)
}

// Config configures an Agent.
type Config struct {
	// Coordinator is the coordinator's URL (default http://127.0.0.1:5050).
	Coordinator string
	// Listen is the NodeService address (default 127.0.0.1:5051).
	Listen string
	// WorkDir holds the checkpoint, container state and sandboxes. Required.
	WorkDir string
	// Hostname is the name registered (default os.Hostname()).
	Hostname string
	// Resources overrides the detected resources ("cpus:4;mem:8192").
	Resources string
	// Attributes are registered with the agent.
	Attributes map[string]string
	// Containerizer runs the tasks. Required.
	Containerizer Containerizer
	// HTTPClient talks to the coordinator (default h2c-capable client).
	HTTPClient *http.Client
	// Logger receives the agent's logs (default slog.Default()).
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound re-registration backoff (100 ms, 10 s).
	MinBackoff, MaxBackoff time.Duration
	// Monitor samples the containers' usage (optional: without it GetUsage
	// has nothing to report).
	Monitor *monitor.Monitor
	// EBPF is the loaded eBPF programs (optional: nil runs on cgroupfs,
	// PSI and procfs alone).
	EBPF EBPF
	// Features are the eBPF feature probes' results, served by GetFeatures.
	Features []bpf.FeatureResult
	// UnifiedMount is where the v2 cgroup tree is mounted (to find
	// containers' cgroup ids), e.g. /sys/fs/cgroup/unified on hybrid hosts.
	UnifiedMount string
	// Estimator computes the oversubscription estimate (nil: none is sent),
	// every EstimateInterval (default 1 s); EstimatorName is reported by
	// GetEstimate.
	Estimator        estimator.Estimator
	EstimatorName    string
	EstimateInterval time.Duration
	// QoS is the set of QoS controllers (nil: no QoS), evaluated at most
	// every QoSIntervalMin (default 250 ms) and as soon as eBPF reports a
	// guaranteed task waiting too long.
	QoS            qos.Controller
	QoSIntervalMin time.Duration
	// ProtectCgroups are cgroups of services outside Slackline (paths
	// relative to each hierarchy) that the estimator counts as guaranteed use
	// and the QoS controllers protect. The agent only reads them.
	ProtectCgroups []string
}

// Agent is a node agent. Create it with New and start it with Run.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	cz        Containerizer
	ckpt      *checkpoint
	updates   *statusUpdates
	client    slacklinev1connect.AgentServiceClient
	total     resources.Resources
	bootID    string
	wake      chan struct{}
	endpoint  string
	nodeReady chan struct{}

	mu      sync.Mutex
	agentID string
	// previousAgentID is the id this host had before a reboot, told to the
	// coordinator until the agent registered under its new id.
	previousAgentID string
	session         string
	tasks           map[taskKey]*agentTask
	// byContainer maps container ids to tasks.
	byContainer map[string]taskKey
	// launches counts launches, to prune sandbox records now and then.
	launches int
	// inflight tracks launch and kill goroutines, which Run waits for
	// before it returns (they write to the checkpoint).
	inflight sync.WaitGroup

	// obsMu guards tracked: the containers handed to the monitor and eBPF.
	obsMu       sync.Mutex
	tracked     map[string]tracked
	unifiedRoot string

	estimate estimateState
	qos      *qosState
}

// agentTask is a task the agent runs or ran and has not forgotten.
type agentTask struct {
	rec   *slacklinev1.AgentTaskRecord
	state slacklinev1.TaskState
	// launching is set while Launch runs; a kill then waits for it.
	launching       bool
	killAfterLaunch bool
	// killing is set once a kill was requested.
	killing bool
}

// New creates an agent: it detects resources and opens the checkpoint.
func New(cfg Config) (*Agent, error) {
	if cfg.WorkDir == "" {
		return nil, errors.New("agent: --work-dir is required")
	}
	if cfg.Containerizer == nil {
		return nil, errors.New("agent: a containerizer is required")
	}
	if cfg.Coordinator == "" {
		cfg.Coordinator = "http://127.0.0.1:5050"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:5051"
	}
	if cfg.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("agent: hostname: %w (set --hostname)", err)
		}
		cfg.Hostname = h
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = server.NewClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.EstimateInterval <= 0 {
		cfg.EstimateInterval = time.Second
	}
	if cfg.QoSIntervalMin <= 0 {
		cfg.QoSIntervalMin = 250 * time.Millisecond
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: create work dir: %w", err)
	}
	total, err := DetectResources(cfg.WorkDir, cfg.Resources)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	boot, err := bootID()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	ckpt, err := openCheckpoint(cfg.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{
		cfg: cfg, log: cfg.Logger, cz: cfg.Containerizer, ckpt: ckpt, total: total, bootID: boot,
		updates:     newStatusUpdates(ckpt, time.Now),
		client:      slacklinev1connect.NewAgentServiceClient(cfg.HTTPClient, cfg.Coordinator),
		wake:        make(chan struct{}, 1),
		nodeReady:   make(chan struct{}),
		tasks:       map[taskKey]*agentTask{},
		byContainer: map[string]taskKey{},
		endpoint:    "http://" + cfg.Listen,
		tracked:     map[string]tracked{},
		qos:         newQoSState(),
		unifiedRoot: cfg.UnifiedMount,
	}
	return a, nil
}

// Resources returns the resources the agent registers.
func (a *Agent) Resources() resources.Resources { return a.total }

// ID returns the agent's id ("" before its first registration).
func (a *Agent) ID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.agentID
}

// Close releases the checkpoint. Call it after Run returned.
func (a *Agent) Close() error { return a.ckpt.Close() }

// Run recovers the agent's state and runs it until ctx is cancelled.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.recover(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	a.syncTargets()
	g, ctx := errgroup.WithContext(ctx)
	if a.cfg.Monitor != nil {
		g.Go(func() error { return a.cfg.Monitor.Run(ctx) })
	}
	if a.cfg.EBPF != nil {
		g.Go(func() error { return a.cfg.EBPF.Run(ctx) })
	}
	if a.cfg.Estimator != nil {
		g.Go(func() error { return a.runEstimates(ctx) })
	}
	if a.cfg.QoS != nil {
		g.Go(func() error { return a.runQoS(ctx) })
	}
	g.Go(func() error { return a.serveNode(ctx) })
	g.Go(func() error { return a.runExits(ctx) })
	g.Go(func() error { return a.runSessions(ctx) })
	g.Go(func() error { return a.runUpdates(ctx) })
	err := g.Wait()
	a.inflight.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// recover loads the checkpoint and re-adopts containers.
func (a *Agent) recover(ctx context.Context) error {
	agentID, previousBoot, err := a.ckpt.meta(ctx)
	if err != nil {
		return err
	}
	if agentID != "" && previousBoot != a.bootID {
		a.log.Warn("host rebooted since the last run: registering as a new agent; old tasks are reported lost", "old_agent", agentID)
		a.previousAgentID = agentID
		agentID = ""
	}
	a.agentID = agentID
	if err := a.updates.load(ctx); err != nil {
		return err
	}
	recs, err := a.ckpt.tasks(ctx)
	if err != nil {
		return err
	}
	running, err := a.cz.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover containers: %w", err)
	}
	alive := map[string]bool{}
	for _, c := range running {
		alive[c.ID] = true
	}
	// Containers the containerizer knows, running or ended (their exits
	// are delivered after Recover returns).
	known := map[string]bool{}
	for _, c := range a.cz.Containers() {
		known[c.ID] = true
	}
	rebooted := a.previousAgentID != ""
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, rec := range recs {
		tk := taskKey{rec.GetTask().GetFrameworkId(), rec.GetTask().GetTask().GetTaskId()}
		t := &agentTask{rec: rec, state: rec.GetTask().GetState()}
		a.tasks[tk] = t
		id := rec.GetContainerId()
		if id != "" {
			a.byContainer[id] = tk
		}
		switch {
		case taskstate.IsTerminal(t.state):
		case rebooted:
			// Settled before the first registration under the new id, so
			// that registration never lists them as running.
			a.finishLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_RESTARTED,
				"the host rebooted")
		case alive[id]:
			if t.state == slacklinev1.TaskState_TASK_STATE_STAGING {
				// The agent died after the launch, before RUNNING was checkpointed.
				a.setStateLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.Reason_REASON_UNSPECIFIED,
					"running (re-adopted after an agent restart)")
			}
		case !known[id]:
			// The agent died before the containerizer recorded the launch.
			a.finishLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_RESTARTED,
				"the agent restarted before the task was launched")
		}
		// Otherwise the containerizer delivers the container's exit.
	}
	a.log.Info("recovered", "agent", agentID, "tasks", len(recs), "running_containers", len(running), "cgroup_mode", string(a.cz.Mode()))
	return nil
}

// setState records a task's new state and enqueues its status update.
// Caller holds a.mu.
// The task record, the update and any extra writes are checkpointed in one
// transaction.
func (a *Agent) setStateLocked(ctx context.Context, tk taskKey, t *agentTask, state slacklinev1.TaskState, reason slacklinev1.Reason, message string, extra ...kv.Mutation) {
	t.state = state
	t.rec.Task.State = state
	st := &slacklinev1.TaskStatus{
		TaskId: tk.taskID, FrameworkId: tk.frameworkID, State: state, Reason: reason, Message: message,
		Source: slacklinev1.TaskSource_TASK_SOURCE_AGENT, Timestamp: timestamppb.Now(),
	}
	if err := a.updates.enqueue(ctx, tk.frameworkID, st, append(extra, taskMutation(t.rec))...); err != nil {
		a.log.Error("status update", "task", tk.taskID, "err", err)
	}
	a.kick()
}

// finishLocked ends a task with a terminal state. Caller holds a.mu.
func (a *Agent) finishLocked(ctx context.Context, tk taskKey, t *agentTask, state slacklinev1.TaskState, reason slacklinev1.Reason, message string) {
	a.setStateLocked(ctx, tk, t, state, reason, message)
}

func (a *Agent) kick() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// runSessions registers with the coordinator and serves sessions,
// re-registering with backoff whenever a session ends.
func (a *Agent) runSessions(ctx context.Context) error {
	backoff := a.cfg.MinBackoff
	for {
		err := a.serveSession(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fatal fatalError
		if errors.As(err, &fatal) {
			return err
		}
		if errors.Is(err, errSessionServed) {
			backoff = a.cfg.MinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		a.log.Warn("coordinator session ended; registering again", "err", err, "in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, a.cfg.MaxBackoff)
	}
}

// errSessionServed wraps the end of a session that was established, so the
// next registration starts with the minimum backoff.
var errSessionServed = errors.New("session ended")

type fatalError struct{ error }

// serveSession registers once and serves the session until it fails.
func (a *Agent) serveSession(ctx context.Context) error {
	req := a.registerRequest()
	resp, err := a.client.Register(ctx, connect.NewRequest(req))
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	agentID, sessionID := resp.Msg.GetAgentId(), resp.Msg.GetSessionId()
	if req.GetAgentInfo().GetId() != agentID {
		// Durable before the agent acts as this id.
		if err := a.ckpt.setMeta(ctx, agentID, a.bootID); err != nil {
			return fatalError{fmt.Errorf("checkpoint agent id: %w", err)}
		}
	}
	a.mu.Lock()
	a.agentID, a.session = agentID, sessionID
	a.previousAgentID = ""
	a.mu.Unlock()
	a.log.Info("registered", "agent", agentID, "coordinator", a.cfg.Coordinator, "resources", a.total.String())
	a.updates.resendAll()
	a.kick()
	defer func() {
		a.mu.Lock()
		if a.session == sessionID {
			a.session = ""
		}
		a.mu.Unlock()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.readCommands(ctx, agentID, sessionID) })
	g.Go(func() error {
		return a.heartbeat(ctx, agentID, sessionID, time.Duration(resp.Msg.GetHeartbeatIntervalSeconds()*float64(time.Second)))
	})
	return fmt.Errorf("%w: %w", errSessionServed, g.Wait())
}

func (a *Agent) registerRequest() *slacklinev1.RegisterRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	var attrs []*slacklinev1.Attribute
	for k, v := range a.cfg.Attributes {
		attrs = append(attrs, &slacklinev1.Attribute{Name: k, Value: v})
	}
	req := &slacklinev1.RegisterRequest{
		PreviousAgentId: a.previousAgentID,
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo: &slacklinev1.AgentInfo{
			Id: a.agentID, Hostname: a.cfg.Hostname, Resources: a.total.Proto("", resources.Regular),
			Attributes: attrs, Endpoint: a.endpoint,
		},
	}
	for _, t := range a.tasks {
		at := proto.CloneOf(t.rec.GetTask())
		at.State = t.state
		req.Tasks = append(req.Tasks, at)
	}
	return req
}

func (a *Agent) heartbeat(ctx context.Context, agentID, sessionID string, interval time.Duration) error {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		callCtx, cancel := context.WithTimeout(ctx, interval)
		_, err := a.client.Heartbeat(callCtx, connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: agentID, SessionId: sessionID}))
		cancel()
		switch code := connect.CodeOf(err); {
		case err == nil:
			lastOK = time.Now()
		case code == connect.CodeFailedPrecondition || code == connect.CodeNotFound:
			return fmt.Errorf("heartbeat: %w", err)
		case time.Since(lastOK) > 3*interval:
			return fmt.Errorf("no heartbeat got through for %v: %w", time.Since(lastOK).Round(time.Second), err)
		}
	}
}

func (a *Agent) readCommands(ctx context.Context, agentID, sessionID string) error {
	stream, err := a.client.Connect(ctx, connect.NewRequest(&slacklinev1.ConnectRequest{AgentId: agentID, SessionId: sessionID}))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer stream.Close()
	for stream.Receive() {
		a.handleCommand(ctx, stream.Msg().GetCommand())
	}
	if err := stream.Err(); err != nil {
		return fmt.Errorf("command stream: %w", err)
	}
	return errors.New("command stream ended")
}

func (a *Agent) handleCommand(ctx context.Context, cmd *slacklinev1.AgentCommand) {
	switch c := cmd.GetCommand().(type) {
	case *slacklinev1.AgentCommand_RunTask:
		a.runTask(c.RunTask)
	case *slacklinev1.AgentCommand_KillTask:
		a.killTask(taskKey{c.KillTask.GetFrameworkId(), c.KillTask.GetTaskId()}, c.KillTask.GetStateOverride(), 0, "")
	case *slacklinev1.AgentCommand_ShutdownFramework:
		a.mu.Lock()
		var keys []taskKey
		for tk := range a.tasks {
			if tk.frameworkID == c.ShutdownFramework.GetFrameworkId() {
				keys = append(keys, tk)
			}
		}
		a.mu.Unlock()
		for _, tk := range keys {
			a.killTask(tk, slacklinev1.TaskState_TASK_STATE_UNSPECIFIED, 0, "")
		}
	case *slacklinev1.AgentCommand_Acknowledge:
		a.acknowledge(ctx, taskKey{c.Acknowledge.GetFrameworkId(), c.Acknowledge.GetTaskId()}, c.Acknowledge.GetUuid())
	case *slacklinev1.AgentCommand_ShutdownAgent:
		a.log.Warn("coordinator asks the agent to shut down its tasks", "message", c.ShutdownAgent.GetMessage())
		a.mu.Lock()
		var keys []taskKey
		for tk := range a.tasks {
			keys = append(keys, tk)
		}
		a.mu.Unlock()
		for _, tk := range keys {
			a.killTask(tk, slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR, 0, "")
		}
	case *slacklinev1.AgentCommand_Ping:
	}
}

// runTask starts a task the coordinator sent. It returns at once; the
// launch runs in its own goroutine.
func (a *Agent) runTask(cmd *slacklinev1.RunTaskCommand) {
	ctx := context.Background() // the launch outlives the session that asked for it
	info := cmd.GetTask()
	tk := taskKey{cmd.GetFramework().GetId(), info.GetTaskId()}
	a.mu.Lock()
	if _, dup := a.tasks[tk]; dup {
		a.mu.Unlock()
		return
	}
	regular, revocable, err := resources.FromProto(info.GetResources())
	t := &agentTask{
		rec: &slacklinev1.AgentTaskRecord{
			Task:        &slacklinev1.AgentTask{FrameworkId: tk.frameworkID, Task: info, Framework: cmd.GetFramework(), State: slacklinev1.TaskState_TASK_STATE_STAGING},
			ContainerId: ids.NewHex(),
		},
		state:     slacklinev1.TaskState_TASK_STATE_STAGING,
		launching: true,
	}
	a.tasks[tk] = t
	a.byContainer[t.rec.GetContainerId()] = tk
	if err != nil {
		t.launching = false
		a.finishLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_ERROR, slacklinev1.Reason_REASON_TASK_INVALID, err.Error())
		a.mu.Unlock()
		return
	}
	// Durable before the container exists, so a restart can find it.
	if err := a.ckpt.putTask(ctx, t.rec); err != nil {
		t.launching = false
		a.finishLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED, "checkpoint: "+err.Error())
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()

	spec := containerizer.Spec{
		ContainerID: t.rec.GetContainerId(), FrameworkID: tk.frameworkID, TaskID: tk.taskID,
		Revocable: !revocable.IsEmpty(), Resources: regular.Add(revocable), Command: info.GetCommand(),
		Env: map[string]string{"SLACKLINE_AGENT_ID": a.ID()},
	}
	a.inflight.Add(1)
	go func() {
		defer a.inflight.Done()
		c, err := a.cz.Launch(ctx, spec)
		a.mu.Lock()
		defer a.mu.Unlock()
		t.launching = false
		if err != nil {
			a.log.Warn("launch failed", "task", tk.taskID, "framework", tk.frameworkID, "err", err)
			a.finishLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED, "launch: "+err.Error())
			return
		}
		sandbox := sandboxMutation(tk.frameworkID, tk.taskID, c.Sandbox, time.Now())
		if !taskstate.IsTerminal(t.state) {
			a.setStateLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.Reason_REASON_UNSPECIFIED,
				fmt.Sprintf("running in %s (pid %d)", c.CgroupPath, c.Pid), sandbox)
		} else if err := a.ckpt.kv.Apply(ctx, sandbox); err != nil {
			a.log.Warn("checkpoint sandbox", "task", tk.taskID, "err", err)
		}
		if a.launches++; a.launches%100 == 0 {
			a.inflight.Add(1)
			go func() {
				defer a.inflight.Done()
				if err := a.ckpt.pruneSandboxes(context.Background()); err != nil {
					a.log.Warn("prune sandbox records", "err", err)
				}
			}()
		}
		if t.killAfterLaunch {
			a.goKill(tk, c.ID)
		}
		go a.syncTargets()
	}()
}

// killTask kills a task. override is the terminal state to report instead
// of TASK_STATE_KILLED; reason and message, when set, explain a kill the
// agent decided itself (a QoS preemption).
func (a *Agent) killTask(tk taskKey, override slacklinev1.TaskState, reason slacklinev1.Reason, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[tk]
	if t == nil {
		// Unknown here: tell the framework it will never run.
		ctx := context.Background()
		t = &agentTask{rec: &slacklinev1.AgentTaskRecord{Task: &slacklinev1.AgentTask{
			FrameworkId: tk.frameworkID, Task: &slacklinev1.TaskInfo{TaskId: tk.taskID}}}}
		a.tasks[tk] = t
		a.finishLocked(ctx, tk, t, slacklinev1.TaskState_TASK_STATE_DROPPED, slacklinev1.Reason_REASON_TASK_UNKNOWN, "task unknown to the agent")
		return
	}
	if taskstate.IsTerminal(t.state) {
		return
	}
	if t.killing && reason != slacklinev1.Reason_REASON_UNSPECIFIED {
		return // an agent-decided kill (QoS) is already under way
	}
	t.killing = true
	if override != slacklinev1.TaskState_TASK_STATE_UNSPECIFIED {
		t.rec.KillState = override
	}
	if reason != slacklinev1.Reason_REASON_UNSPECIFIED {
		t.rec.KillReason, t.rec.KillMessage = reason, message
	}
	if override != slacklinev1.TaskState_TASK_STATE_UNSPECIFIED || reason != slacklinev1.Reason_REASON_UNSPECIFIED {
		// Durable: a restart in the middle of the kill still reports why.
		if err := a.ckpt.putTask(context.Background(), t.rec); err != nil {
			a.log.Warn("checkpoint kill", "task", tk.taskID, "err", err)
		}
	}
	if t.launching {
		t.killAfterLaunch = true
		return
	}
	a.goKill(tk, t.rec.GetContainerId())
}

// goKill kills a container in the background, tracked by inflight.
func (a *Agent) goKill(tk taskKey, containerID string) {
	a.inflight.Add(1)
	go func() {
		defer a.inflight.Done()
		a.kill(tk, containerID)
	}()
}

func (a *Agent) kill(tk taskKey, containerID string) {
	if err := a.cz.Kill(context.Background(), containerID); err != nil {
		a.log.Error("kill", "task", tk.taskID, "container", containerID, "err", err)
	}
}

// acknowledge handles a framework's acknowledgement forwarded by the
// coordinator; a terminal task with no update left is forgotten.
func (a *Agent) acknowledge(_ context.Context, tk taskKey, uuid string) {
	// Checkpoint writes outlive the session that delivered the ack.
	ctx := context.Background()
	matched, drained, err := a.updates.acknowledge(ctx, tk, uuid)
	if err != nil {
		a.log.Error("acknowledge", "task", tk.taskID, "err", err)
		return
	}
	if matched {
		a.kick() // the next update of the task, if any
	}
	if !drained {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.tasks[tk]; t != nil && taskstate.IsTerminal(t.state) && !a.updates.pending(tk) {
		delete(a.tasks, tk)
		delete(a.byContainer, t.rec.GetContainerId())
		if err := a.ckpt.deleteTask(ctx, tk.frameworkID, tk.taskID); err != nil {
			a.log.Error("checkpoint", "task", tk.taskID, "err", err)
		}
	}
}

// runExits turns container exits into terminal status updates.
func (a *Agent) runExits(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ex := <-a.cz.Exits():
			a.handleExit(ctx, ex)
		}
	}
}

func (a *Agent) handleExit(ctx context.Context, ex containerizer.Exit) {
	a.mu.Lock()
	tk, ok := a.byContainer[ex.ContainerID]
	t := a.tasks[tk]
	if !ok || t == nil || taskstate.IsTerminal(t.state) {
		a.mu.Unlock()
		if err := a.cz.Destroy(ex.ContainerID); err != nil {
			a.log.Warn("destroy container", "container", ex.ContainerID, "err", err)
		}
		return
	}
	state, reason := exitStatus(ex, t.rec.GetKillState())
	message := ex.Message
	if ex.Killed && t.rec.GetKillReason() != slacklinev1.Reason_REASON_UNSPECIFIED {
		reason, message = t.rec.GetKillReason(), t.rec.GetKillMessage()
	}
	a.finishLocked(ctx, tk, t, state, reason, message)
	a.mu.Unlock()
	if err := a.cz.Destroy(ex.ContainerID); err != nil {
		a.log.Warn("destroy container", "container", ex.ContainerID, "err", err)
	}
	a.syncTargets()
}

// exitStatus maps a container's end to a task state and reason.
func exitStatus(ex containerizer.Exit, killState slacklinev1.TaskState) (slacklinev1.TaskState, slacklinev1.Reason) {
	switch {
	case ex.Lost:
		return slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_RESTARTED
	case ex.OOMKilled:
		return slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_CONTAINER_LIMITATION_MEMORY
	case ex.Killed && killState != slacklinev1.TaskState_TASK_STATE_UNSPECIFIED:
		return killState, slacklinev1.Reason_REASON_TASK_KILLED
	case ex.Killed:
		return slacklinev1.TaskState_TASK_STATE_KILLED, slacklinev1.Reason_REASON_TASK_KILLED
	case ex.ExitCode == 0:
		return slacklinev1.TaskState_TASK_STATE_FINISHED, slacklinev1.Reason_REASON_UNSPECIFIED
	}
	return slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED
}

// runUpdates sends due status updates over the current session.
func (a *Agent) runUpdates(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-a.wake:
		}
		a.mu.Lock()
		agentID, sessionID := a.agentID, a.session
		a.mu.Unlock()
		if sessionID == "" {
			continue
		}
		for _, u := range a.updates.due() {
			callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := a.client.UpdateStatus(callCtx, connect.NewRequest(&slacklinev1.UpdateStatusRequest{
				AgentId: agentID, SessionId: sessionID, FrameworkId: u.frameworkID, Status: u.status,
			}))
			cancel()
			if err != nil {
				a.log.Debug("send status update (will retry)", "task", u.status.GetTaskId(), "err", err)
			}
		}
	}
}
