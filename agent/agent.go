package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	idgen "github.com/slackline/slackline/internal/ids"

	"golang.org/x/sync/errgroup"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/fetcher"
	"github.com/slackline/slackline/agent/health"
	"github.com/slackline/slackline/agent/images"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/agent/session"
	"github.com/slackline/slackline/agent/shadow"
	"github.com/slackline/slackline/agent/tasks"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/internal/leaderclient"
	"github.com/slackline/slackline/internal/server"
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
	SetRevocableCPULimit(cores float64, period time.Duration) error
	RevocableCPULimit() (float64, error)
	// SetRevocableCPUs and RevocableCPUs confine the revocable subtree to
	// CPUs (a cpuset); both wrap containerizer.ErrUnsupported without a
	// usable cpuset controller. CPUs lists the CPUs the agent's root may use.
	SetRevocableCPUs(cpus []int) error
	RevocableCPUs() ([]int, error)
	CPUs() []int
}

// Config configures an Agent.
type Config struct {
	// Coordinator is the coordinator's URL (default http://127.0.0.1:5050),
	// or a comma-separated list of a coordinator group's URLs, whose leader
	// the agent follows (internal/leaderclient).
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
	// HTTPClient talks to the coordinator (default h2c-capable client); for
	// a secured coordinator it presents the agent's certificate.
	HTTPClient *http.Client
	// TLS, when set, serves the NodeService over TLS (the agent's
	// certificate, and the CA whose client certificates it verifies).
	TLS *tls.Config
	// Authz authenticates and authorizes NodeService callers (nil: none;
	// see internal/auth).
	Authz *auth.Authorizer
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
	// QuietDeferMax is how long an estimate or QoS evaluation that falls
	// due at a quiet monitor pass (nothing it published changed, and the
	// containers idle for 2 s: monitor.Monitor.QuietSince) may wait for
	// one that is not (#29: an idle node then estimates and evaluates
	// about once a second instead of at every pass); 0: never.
	QuietDeferMax time.Duration
	// QoSControllerNames names QoS's controllers (#31): their
	// slackline_qos_corrections_total series are exported at 0 from the
	// start, so that dashboards and alerts see them before a correction.
	QoSControllerNames []string
	// Shadows are candidate estimator and QoS settings run in shadow on
	// the active ones' inputs (#29 part 4; at most shadow.MaxShadows, each
	// with its own estimator and controllers): scored, never applied.
	Shadows []*shadow.Shadow
	// ProtectCgroups are cgroups of services outside Slackline (paths
	// relative to each hierarchy) that the estimator counts as guaranteed use
	// and the QoS controllers protect. The agent only reads them.
	ProtectCgroups []string
	// NetworkQoS paces revocable tasks' egress (nil: no network QoS; see
	// NetworkQoS and agent/network).
	NetworkQoS *NetworkQoS
	// TCP counts containers' TCP round trips and retransmissions (nil:
	// none); the agent watches the cgroups it tracks.
	TCP TCPSignals
	// Sandbox bounds the disk tasks use: sandbox garbage collection and
	// per-task disk limits (see SandboxConfig).
	Sandbox SandboxConfig
	// Fetch configures the fetcher of tasks' artifacts (CommandInfo.uris);
	// its CacheDir defaults to <WorkDir>/fetch. See agent/fetcher.
	Fetch fetcher.Config
	// Images pulls and stores the images tasks name (TaskInfo.image); nil:
	// a task with an image fails with REASON_IMAGE_PULL_FAILED.
	Images *images.Store
	// ReloadOnHangup re-reads Authz's files (the authorization file and
	// the revocation list) on SIGHUP while Run runs.
	ReloadOnHangup bool

	// profiles builds a node profile's estimator and QoS controllers over
	// the agent's flags (#29; Options.Build sets it); nil: profiles are
	// refused.
	profiles func(name, settings string) (profileSettings, error)
	// lateEBPF is EBPF when Options.Build loads the eBPF monitor in the
	// background: its features join Features.
	lateEBPF *lateEBPF
	// Pprof serves the Go runtime's profiles at /debug/pprof/ on the
	// NodeService's listener (--pprof; authorized as debug_processes).
	Pprof bool
	// startup is the timeline of Options.Build's phases, logged at the
	// first registration.
	startup *startupTimeline
}

// Agent is a node agent: it only wires its subsystems, each of which owns
// its state and runs with Run(ctx). Create it with New and start it with
// Run.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	total   resources.Resources
	bootID  string
	ckpt    *checkpoint
	session *session.Session
	tasks   *lifecycle
	watch   *observer
	slack   *estimateLoop // runs only with an estimator
	qos     *qosLoop      // runs only with QoS controllers
	// shadows are the settings run in shadow and the active ones' score;
	// nil without --shadow.
	shadows *shadowSet
	// rollout is the shadow a profile rollout asks for (#29 item 5).
	rollout *rolloutShadow
	// network paces revocable egress; nil without network QoS.
	network *network.Network
	disk    *sandboxes
	// fetch downloads tasks' artifacts into their sandboxes.
	fetch *fetcher.Fetcher
	// health checks the tasks that have a health check.
	health *health.Runner
	// history keeps the monitor's recent series for the live view
	// (GetHistory, GetDelays); nil without a monitor.
	history *viewHistory
	// closers release what Options.Build opened for the agent (eBPF
	// programs, the monitor), in reverse order, after the agent's own.
	closers []func() error

	// ids are the agent's id and, after a host reboot and until the first
	// registration, the id it had before.
	ids atomic.Pointer[agentIDs]
	// runStart is when Run began (startup timeline).
	runStart time.Time
	// profile is the node profile the agent runs (#29).
	profile profileState
}

// agentIDs: current is empty until the first registration of a fresh
// agent (or of one whose host rebooted), which proposes proposed instead:
// the same id on every try, so that a retry of a registration whose answer
// never arrived registers as the agent the first try made.
type agentIDs struct{ current, previous, proposed string }

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
	// A streamed message (a heartbeat) goes out as one HTTP/2 frame, not
	// two: half the coordinator's work per beat (#30).
	cfg.HTTPClient = server.WholeMessagesClient(cfg.HTTPClient)
	// A comma-separated list is a coordinator group: follow its leader.
	coordinatorClient, coordinatorURL, err := leaderclient.New(cfg.Coordinator, cfg.HTTPClient, leaderclient.Options{})
	if err != nil {
		return nil, fmt.Errorf("agent: --coordinator: %w", err)
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
	var memBound MemoryBound
	if cfg.Monitor != nil {
		memBound = cfg.Monitor.MemoryLimit
	}
	total, err := DetectResources(cfg.WorkDir, cfg.Resources, cfg.Logger, memBound)
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
	if cfg.Fetch.CacheDir == "" {
		cfg.Fetch.CacheDir = filepath.Join(cfg.WorkDir, "fetch")
	}
	if cfg.Fetch.Logger == nil {
		cfg.Fetch.Logger = cfg.Logger
	}
	fetch, err := fetcher.New(cfg.Fetch)
	if err != nil {
		_ = ckpt.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, total: total, bootID: boot, ckpt: ckpt, fetch: fetch}
	a.network, a.cfg.Features = newNetwork(cfg, total)
	a.ids.Store(&agentIDs{})
	a.session = session.New(session.Config{
		Client:  slacklinev1connect.NewAgentServiceClient(coordinatorClient, coordinatorURL),
		Handler: sessionHandler{a},
		Backoff: backoff.Backoff{Min: cfg.MinBackoff, Max: cfg.MaxBackoff},
		Logger:  cfg.Logger,
		Profile: a.profileReport,
	})
	a.watch = &observer{log: a.log, cz: cfg.Containerizer, ebpf: cfg.EBPF, monitor: cfg.Monitor,
		unifiedRoot: cfg.UnifiedMount, protect: cfg.ProtectCgroups, tracked: map[string]tracked{},
		network: a.network, tcp: cfg.TCP}
	a.history = newViewHistory(cfg.Monitor, a.watch)
	a.tasks = &lifecycle{
		log: a.log, cz: cfg.Containerizer, ckpt: ckpt, send: a.session.Send, agentID: a.ID,
		containersChanged: a.watch.sync, now: time.Now, wake: make(chan struct{}, 1), fetch: fetch,
	}
	if cfg.Images != nil {
		a.tasks.images = cfg.Images
	}
	a.shadows = newShadowSet(cfg)
	a.slack = newEstimateLoop(cfg, total, a.session, a.network)
	a.slack.shadows = a.shadows
	a.rollout = newRolloutShadow(cfg)
	a.slack.rollout = a.rollout
	a.qos = newQoSLoop(cfg, total, a.watch, a.preempt, a.network)
	if a.history != nil {
		// Estimates and QoS evaluations follow the monitor's samples (#29).
		a.qos.follows = true
		a.history.after = func() { a.slack.sampleTaken(); a.qos.sampleTaken() }
	}
	a.qos.shadows = a.shadows
	a.qos.rollout = a.rollout
	a.disk = newSandboxes(a)
	a.health = newHealthRunner(a)
	a.tasks.healthWatch, a.tasks.healthForget = a.watchHealth, a.health.Forget
	return a, nil
}

// features returns the feature probes' results (GetFeatures): the eBPF
// monitor's (loading until it is loaded) and the others.
func (a *Agent) features() []bpf.FeatureResult {
	if a.cfg.lateEBPF == nil {
		return a.cfg.Features
	}
	return append(slices.Clip(a.cfg.lateEBPF.features()), a.cfg.Features...)
}

// Resources returns the resources the agent registers.
func (a *Agent) Resources() resources.Resources { return a.total }

// Containerizer returns the containerizer running the agent's tasks
// (*containerizer.Containerizer when built by Options.Build).
func (a *Agent) Containerizer() Containerizer { return a.cfg.Containerizer }

// ID returns the agent's id ("" before its first registration).
func (a *Agent) ID() string { return a.ids.Load().current }

// Close releases the checkpoint and restores the managed interfaces (Run
// does on its way out) and the sandbox disk's own request size (the
// diskio controller lowers it while revocable I/O is capped: a setting of
// the whole device, which must not outlive the agent), then what
// Options.Build opened. Call it after Run returned.
func (a *Agent) Close() error {
	if a.network != nil {
		_ = a.network.Close()
	}
	err := restoreDiskRequests(a.cfg.Containerizer)
	err = errors.Join(err, a.ckpt.Close())
	for i := len(a.closers) - 1; i >= 0; i-- {
		err = errors.Join(err, a.closers[i]())
	}
	a.closers = nil
	return err
}

// Run recovers the agent's state and runs its subsystems until ctx is
// cancelled.
func (a *Agent) Run(ctx context.Context) error {
	a.runStart = time.Now()
	if err := a.recover(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	a.watch.sync()
	// The NodeService listens before the session registers the agent: the
	// endpoint the coordinator hands out then accepts at once (an e2e
	// test's first GetUsage right after registration was refused).
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.Listen, err)
	}
	g, ctx := errgroup.WithContext(ctx)
	if a.cfg.Monitor != nil {
		g.Go(func() error { return a.cfg.Monitor.Run(ctx) })
	}
	if a.cfg.EBPF != nil {
		g.Go(func() error { return a.cfg.EBPF.Run(ctx) })
	}
	if a.cfg.Estimator != nil {
		g.Go(func() error { return a.slack.Run(ctx) })
	}
	if a.cfg.QoS != nil {
		g.Go(func() error { return a.qos.Run(ctx) })
	}
	if a.network != nil {
		g.Go(func() error { return a.network.Run(ctx) })
	}
	if a.cfg.ReloadOnHangup {
		g.Go(func() error { a.cfg.Authz.ReloadOnHangup(ctx, a.log); return nil })
	}
	g.Go(func() error {
		return server.Serve(ctx, server.Config{Listener: ln, TLS: a.cfg.TLS, Logger: a.log}, a.Handler())
	})
	g.Go(func() error { return a.tasks.Run(ctx) })
	g.Go(func() error { return a.disk.Run(ctx) })
	g.Go(func() error { return a.health.Run(ctx) })
	g.Go(func() error { return a.session.Run(ctx) })
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// recover loads the checkpoint, re-adopts containers and rebuilds the task
// machine; what recovery settled is checkpointed before the agent
// registers, so that registration never lists lost tasks as running.
func (a *Agent) recover(ctx context.Context) error {
	agentID, previousBoot, err := a.ckpt.meta(ctx)
	if err != nil {
		return err
	}
	ids := &agentIDs{current: agentID}
	if agentID != "" && previousBoot != a.bootID {
		a.log.Warn("host rebooted since the last run: registering as a new agent; old tasks are reported lost", "old_agent", agentID)
		ids = &agentIDs{previous: agentID}
	}
	if ids.current == "" {
		ids.proposed = idgen.New()
	}
	a.ids.Store(ids)
	recs, err := a.ckpt.tasks(ctx)
	if err != nil {
		return err
	}
	updates, err := a.ckpt.updates(ctx)
	if err != nil {
		return err
	}
	cz := a.cfg.Containerizer
	running, err := cz.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover containers: %w", err)
	}
	r := tasks.Recovery{Tasks: recs, Updates: updates, Running: map[string]bool{}, Known: map[string]bool{},
		Rebooted: ids.previous != "", Now: time.Now()}
	for _, c := range running {
		r.Running[c.ID] = true
	}
	// Containers that ended meanwhile deliver their exits after Recover.
	var known []string
	for _, c := range cz.Containers() {
		r.Known[c.ID] = true
		known = append(known, c.ID)
	}
	if a.cfg.Images != nil {
		// Layers stay leased to the containers that still exist; those
		// of containers gone meanwhile may be collected.
		a.cfg.Images.Retain(known)
	}
	// Running tasks with a health check are checked again, as if they
	// had just started (delay and grace period anew).
	for _, rec := range recs {
		if r.Running[rec.GetContainerId()] {
			a.watchHealth(rec.GetContainerId(), rec.GetTask().GetTask(), r.Now)
		}
	}
	machine, eff := tasks.Recover(tasks.Config{}, r)
	a.tasks.machine, a.tasks.pending = machine, eff
	a.tasks.perform(ctx)
	a.log.Info("recovered", "agent", ids.current, "tasks", len(recs), "running_containers", len(running), "cgroup_mode", string(cz.Mode()))
	return nil
}

// endpoint is the NodeService URL the agent registers. A secured
// coordinator keeps only its scheme and port: the host is where the agent
// connects from.
func (a *Agent) endpoint() string {
	if a.cfg.TLS != nil {
		return "https://" + a.cfg.Listen
	}
	return "http://" + a.cfg.Listen
}

// preempt kills a revocable container for the QoS controllers.
func (a *Agent) preempt(containerID, reason string) {
	var key tasks.Key
	var ok bool
	a.tasks.read(func(m *tasks.Machine) { key, ok = m.Container(containerID) })
	if ok {
		a.tasks.step(tasks.Kill{Key: key, StateOverride: slacklinev1.TaskState_TASK_STATE_KILLED,
			Reason: slacklinev1.Reason_REASON_CONTAINER_PREEMPTED, Message: reason, Now: time.Now()})
	}
}

// sessionHandler connects the coordinator session to the task machine.
type sessionHandler struct{ a *Agent }

func (h sessionHandler) Registration() *slacklinev1.RegisterRequest {
	a := h.a
	ids := a.ids.Load()
	var attrs []*slacklinev1.Attribute
	for k, v := range a.cfg.Attributes {
		attrs = append(attrs, &slacklinev1.Attribute{Name: k, Value: v})
	}
	req := &slacklinev1.RegisterRequest{
		PreviousAgentId: ids.previous,
		ProposedAgentId: ids.proposed,
		AgentInfo: &slacklinev1.AgentInfo{
			Id: ids.current, Hostname: a.cfg.Hostname, Resources: a.total.Proto("", resources.Regular),
			Attributes: attrs, Endpoint: a.endpoint(),
		},
	}
	a.tasks.read(func(m *tasks.Machine) { req.Tasks = m.Registration() })
	return req
}

func (h sessionHandler) Opened(ctx context.Context, agentID, _ string) error {
	a := h.a
	if agentID != a.ID() {
		// Durable before the agent acts as this id.
		if err := a.ckpt.setMeta(ctx, agentID, a.bootID); err != nil {
			return session.Fatal(fmt.Errorf("checkpoint agent id: %w", err))
		}
	}
	a.ids.Store(&agentIDs{current: agentID})
	a.log.Info("registered", "agent", agentID, "coordinator", a.cfg.Coordinator, "resources", a.total.String())
	if t := a.cfg.startup; t.first() {
		t.phase("registration", a.runStart)
		a.log.Info("agent start to registered", "took", t.sinceStart().Round(time.Millisecond), "phases", t.String())
	}
	a.tasks.step(tasks.SessionOpened{Now: time.Now()})
	return nil
}

func (h sessionHandler) Command(_ context.Context, cmd *slacklinev1.AgentCommand) error {
	a, now := h.a, time.Now()
	switch c := cmd.GetCommand().(type) {
	case *slacklinev1.AgentCommand_RunTask:
		a.tasks.step(tasks.Launch{Command: c.RunTask, Now: now})
	case *slacklinev1.AgentCommand_KillTask:
		a.tasks.step(tasks.Kill{Key: tasks.Key{FrameworkID: c.KillTask.GetFrameworkId(), TaskID: c.KillTask.GetTaskId()},
			StateOverride: c.KillTask.GetStateOverride(), Now: now})
	case *slacklinev1.AgentCommand_ShutdownFramework:
		a.tasks.step(tasks.ShutdownFramework{FrameworkID: c.ShutdownFramework.GetFrameworkId(), Now: now})
	case *slacklinev1.AgentCommand_Acknowledge:
		a.tasks.step(tasks.Acknowledge{Key: tasks.Key{FrameworkID: c.Acknowledge.GetFrameworkId(), TaskID: c.Acknowledge.GetTaskId()},
			UUID: c.Acknowledge.GetUuid(), Now: now})
	case *slacklinev1.AgentCommand_ShutdownAgent:
		a.log.Warn("coordinator asks the agent to shut down its tasks", "message", c.ShutdownAgent.GetMessage())
		a.tasks.step(tasks.ShutdownAgent{Now: now})
	case *slacklinev1.AgentCommand_ApplyProfile:
		a.applyProfile(c.ApplyProfile, now)
	case *slacklinev1.AgentCommand_ProfileShadow:
		a.applyProfileShadow(c.ProfileShadow)
	}
	return nil
}

func (h sessionHandler) Closed(string, string, error) {
	h.a.tasks.step(tasks.SessionLost{}) // the session logs why it ended
}
