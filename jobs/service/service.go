package service

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/jobs"
)

// maxReconcile bounds the tasks of one explicit Reconcile call (the
// coordinator's limit per call).
const maxReconcile = 1000

// Config configures a Service.
type Config struct {
	// Store keeps the state; the Service does not close it.
	Store Store
	// Framework is the framework to subscribe as (its Id is replaced by
	// the stored one); Roles are the queues' roles.
	Framework *slacklinev1.FrameworkInfo
	// Client is the SDK configuration without Framework.
	Client frameworkapi.Config
	// Authz authorizes JobService calls (nil: insecure, everything
	// allowed, jobs have no owner).
	Authz *auth.Authorizer
	// MaxJobs bounds the jobs kept.
	MaxJobs int
	// Logger receives the logs.
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// omitProcessMetrics leaves the Go and process metrics to the caller
	// (a Member serves them once for all its terms).
	omitProcessMetrics bool
}

// Service is the job service: the jobs core behind a lock, its store, the
// framework client and the JobService handler.
//
// Locks: mu guards the core and the acknowledgements waiting for a write;
// persistMu orders writes (held from taking the dirty records to the
// end of their transaction), so that a later snapshot never lands before an
// earlier one. No RPC or fsync happens under mu.
type Service struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	client *frameworkapi.Client

	mu      sync.Mutex
	core    *jobs.Core
	acks    []*slacklinev1.TaskStatus // applied, waiting for a write
	persist sync.Mutex
	// unwritten is a batch whose write failed, written again with the
	// next (guarded by persist).
	unwritten Batch
	kick      chan struct{} // wakes the flusher
	tick      chan struct{} // wakes the ticker (new work, new schedule)

	registry *prometheus.Registry
}

// New loads the stored jobs and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, log: cfg.Logger, now: cfg.Now, kick: make(chan struct{}, 1), tick: make(chan struct{}, 1)}
	s.core = jobs.New(jobs.Config{Roles: cfg.Framework.GetRoles(), MaxJobs: cfg.MaxJobs})
	stored, err := cfg.Store.Load()
	if err != nil {
		return nil, err
	}
	for _, j := range stored {
		s.core.Restore(j)
	}
	id, err := cfg.Store.FrameworkID()
	if err != nil {
		return nil, err
	}
	s.log.Info("job store loaded", "jobs", len(stored), "framework_id", id)
	s.registry = prometheus.NewRegistry()
	s.registry.MustRegister(collector{s})
	if !cfg.omitProcessMetrics {
		s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return s, nil
}

// Handler serves JobService, health, reflection and /metrics, authorized
// with Config.Authz, and the jobs page at /ui/ (static files; the page calls
// JobService with the caller's token).
func (s *Service) Handler() http.Handler {
	opts := append(server.HandlerOptions(), connect.WithInterceptors(s.cfg.Authz.Interceptor()))
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewJobServiceHandler(api{s}, opts...))
	server.MountStandard(mux, slacklinev1connect.JobServiceName)
	mux.Handle(auth.MetricsPath, promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	root := http.NewServeMux()
	// The jobs page's files hold no data and need no credentials; the
	// page calls JobService as any client, with the caller's token.
	root.Handle("GET /ui/", uiHandler())
	root.Handle("/", s.cfg.Authz.Middleware(mux))
	return root
}

//go:embed static
var static embed.FS

// uiHandler serves the jobs page (static/) at /ui/, with a content security
// policy that lets it load only its own script and style and talk only to
// its own origin.
func uiHandler() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	fileServer := http.StripPrefix("/ui/", http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy",
			"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		fileServer.ServeHTTP(w, r)
	})
}

// Run subscribes (failing over to the stored framework id) and runs the
// flusher and the ticker until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.flusher(ctx) }()
	go func() { defer wg.Done(); s.ticker(ctx) }()
	defer wg.Wait()
	defer cancel()
	for {
		id, err := s.cfg.Store.FrameworkID()
		if err != nil {
			return err
		}
		info := proto.CloneOf(s.cfg.Framework)
		info.Id = id
		cc := s.cfg.Client
		cc.Framework = info
		cc.ManualAcknowledge = true
		cc.Logger = s.log
		client, err := frameworkapi.New(cc)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.client = client
		s.mu.Unlock()
		err = client.Run(ctx, handler{s: s})
		if ctx.Err() != nil {
			return nil
		}
		code := connect.CodeOf(err)
		if errors.Is(err, frameworkapi.ErrTornDown) && (code == connect.CodeNotFound || code == connect.CodeFailedPrecondition) {
			// The framework id is dead (failover timeout passed): start
			// a new framework; reconciliation re-queues the lost tasks.
			s.log.Warn("framework removed by the coordinator; subscribing as a new framework", "framework_id", id, "err", err)
			if err := s.cfg.Store.SetFrameworkID(""); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// persistNow writes the dirty records and then acknowledges the updates
// applied before them.
func (s *Service) persistNow(ctx context.Context) error {
	s.persist.Lock()
	s.mu.Lock()
	b, err := encode(s.core, s.core.TakeDirty())
	acks := s.acks
	s.acks = nil
	client := s.client
	s.mu.Unlock()
	if err == nil {
		b = s.unwritten.merge(b)
		s.unwritten = Batch{}
		if err = s.cfg.Store.Write(b); err != nil {
			s.unwritten = b
		}
	}
	s.persist.Unlock()
	if err != nil {
		// The records stay in memory and are written with the next
		// batch; the updates are not acknowledged, so the agents re-send
		// them.
		s.log.Error("persist jobs", "err", err)
		return err
	}
	if client == nil {
		return nil
	}
	// In batches (#30): a few calls for a burst of updates.
	if err := client.AcknowledgeBatch(ctx, acks); err != nil && ctx.Err() == nil {
		s.log.Debug("acknowledge", "updates", len(acks), "err", err)
	}
	return nil
}

// flusher writes applied updates in groups: while one transaction syncs,
// the next updates gather.
func (s *Service) flusher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			_ = s.persistNow(ctx)
		}
	}
}

func (s *Service) wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ticker calls Tick when the core's next deadline, backoff or cron run is
// due, and at least every second.
func (s *Service) ticker(ctx context.Context) {
	for {
		s.mu.Lock()
		next := s.core.NextWake()
		s.mu.Unlock()
		wait := time.Second
		if !next.IsZero() {
			wait = min(wait, max(0, next.Sub(s.now())))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-s.tick:
			timer.Stop()
		case <-timer.C:
		}
		s.mu.Lock()
		eff := s.core.Tick(s.now())
		s.mu.Unlock()
		if err := s.persistNow(ctx); err == nil {
			s.apply(ctx, eff)
		}
	}
}

// apply performs the core's effects.
func (s *Service) apply(ctx context.Context, eff jobs.Effects) {
	s.mu.Lock()
	c := s.client
	s.mu.Unlock()
	if c == nil {
		return
	}
	if len(eff.Declines) > 0 {
		if err := c.Decline(ctx, eff.Declines, frameworkapi.Filters(jobs.DeclineSeconds)); err != nil {
			s.log.Warn("decline held offers", "offers", len(eff.Declines), "err", err)
		}
	}
	for _, k := range eff.Kills {
		if err := c.Kill(ctx, k.TaskID, k.AgentID); err != nil {
			s.log.Warn("kill", "task_id", k.TaskID, "err", err)
		}
	}
	// A reconciliation that fails is asked again by the core's Tick (and
	// on the next subscription, with every launched task).
	s.reconcile(ctx, c, eff.Reconcile)
	if len(eff.Revive) > 0 {
		if err := c.Revive(ctx, eff.Revive...); err != nil {
			s.log.Warn("revive", "roles", eff.Revive, "err", err)
			s.setSuppressed(eff.Revive, true)
		}
	}
	if len(eff.Suppress) > 0 {
		if err := c.Suppress(ctx, eff.Suppress...); err != nil {
			s.log.Warn("suppress", "roles", eff.Suppress, "err", err)
			s.setSuppressed(eff.Suppress, false)
		}
	}
}

func (s *Service) setSuppressed(roles []string, suppressed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range roles {
		s.core.SetSuppressed(r, suppressed)
	}
}

// handler connects the core to the SDK.
type handler struct {
	frameworkapi.BaseHandler
	s *Service
}

func (h handler) Subscribed(ctx context.Context, c *frameworkapi.Client, ev *slacklinev1.SubscribedEvent) {
	s := h.s
	if err := s.cfg.Store.SetFrameworkID(ev.GetFrameworkId()); err != nil {
		s.log.Error("save framework id", "err", err)
	}
	s.log.Info("subscribed", "framework_id", ev.GetFrameworkId())
	s.mu.Lock()
	eff := s.core.Subscribed(s.now())
	launched := s.core.Launched()
	s.mu.Unlock()
	s.apply(ctx, eff)
	// Explicit reconciliation finds tasks the coordinator does not know
	// (launched before a crash, lost with it): they come back LOST or
	// GONE and are re-queued.
	go s.reconcile(ctx, c, launched)
}

// reconcile asks the coordinator about tasks (explicit reconciliation), in
// calls of at most maxReconcile tasks; the answers come as updates.
func (s *Service) reconcile(ctx context.Context, c *frameworkapi.Client, launched []jobs.Kill) {
	for len(launched) > 0 {
		n := min(len(launched), maxReconcile)
		var tasks []*slacklinev1.ReconcileTask
		for _, k := range launched[:n] {
			tasks = append(tasks, &slacklinev1.ReconcileTask{TaskId: k.TaskID, AgentId: k.AgentID})
		}
		launched = launched[n:]
		if err := c.Reconcile(ctx, tasks); err != nil {
			s.log.Warn("reconcile", "tasks", len(tasks), "err", err)
			return
		}
	}
}

func (h handler) Offers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
	s := h.s
	s.mu.Lock()
	plan, eff := s.core.Offers(offers, s.now())
	s.mu.Unlock()
	// Task ids are recorded before they are launched.
	if err := s.persistNow(ctx); err != nil {
		s.mu.Lock()
		for _, l := range plan.Launches {
			s.core.NotLaunched(l.Tasks, s.now(), "the job store failed: "+err.Error())
		}
		s.mu.Unlock()
		var ids []string
		for _, l := range plan.Launches {
			ids = append(ids, l.OfferIDs...)
		}
		plan.Declines = append(plan.Declines, ids...)
		plan.Launches = nil
	}
	for _, l := range plan.Launches {
		var filters *slacklinev1.Filters
		if l.RefuseSeconds >= 0 {
			filters = frameworkapi.Filters(l.RefuseSeconds)
		}
		if err := c.Launch(ctx, l.OfferIDs, l.Tasks, filters); err != nil {
			s.log.Warn("launch", "offers", l.OfferIDs, "tasks", len(l.Tasks), "err", err)
			// The coordinator may have launched them, or may still
			// receive the Accept: declining its offers first makes a
			// late Accept fail (its offers gone, its tasks DROPPED), so
			// that the reconciliation that follows (in apply, after
			// this call returned) answers for good. NotFound: the
			// Accept used them.
			if derr := c.Decline(ctx, l.OfferIDs, frameworkapi.Filters(jobs.ShortDeclineSeconds)); derr != nil {
				s.log.Debug("decline the offers of a failed launch", "offers", l.OfferIDs, "err", derr)
			}
			// Reconcile before any relaunch.
			s.mu.Lock()
			more := s.core.LaunchFailed(l.Tasks, s.now(), err.Error())
			s.mu.Unlock()
			eff.Revive = append(eff.Revive, more.Revive...)
			eff.Reconcile = append(eff.Reconcile, more.Reconcile...)
			s.wake(s.kick)
		}
	}
	if len(plan.Declines) > 0 {
		if err := c.Decline(ctx, plan.Declines, frameworkapi.Filters(jobs.DeclineSeconds)); err != nil {
			s.log.Warn("decline", "offers", len(plan.Declines), "err", err)
		}
	}
	if len(plan.ShortDeclines) > 0 {
		if err := c.Decline(ctx, plan.ShortDeclines, frameworkapi.Filters(jobs.ShortDeclineSeconds)); err != nil {
			s.log.Warn("decline", "offers", len(plan.ShortDeclines), "err", err)
		}
	}
	s.apply(ctx, eff)
}

func (h handler) Rescind(_ context.Context, _ *frameworkapi.Client, offerID string) {
	h.s.mu.Lock()
	h.s.core.Rescind(offerID)
	h.s.mu.Unlock()
}

func (h handler) Update(ctx context.Context, _ *frameworkapi.Client, st *slacklinev1.TaskStatus) {
	s := h.s
	s.mu.Lock()
	_, eff := s.core.Update(st, s.now())
	if len(st.GetUuid()) > 0 {
		s.acks = append(s.acks, st)
	}
	s.mu.Unlock()
	s.wake(s.kick)
	s.apply(ctx, eff)
	if len(eff.Revive) > 0 {
		s.wake(s.tick)
	}
}

func (h handler) Disconnected(_ context.Context, _ *frameworkapi.Client, err error) {
	h.s.log.Warn("disconnected from the coordinator; reconnecting", "err", err)
}

func (h handler) Error(_ context.Context, _ *frameworkapi.Client, message string) {
	h.s.log.Error("coordinator error", "message", message)
}

// errorf maps the core's errors to connect codes.
func connectError(err error) error {
	switch {
	case errors.Is(err, jobs.ErrInvalidSpec), errors.Is(err, jobs.ErrRole):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, jobs.ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, jobs.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, jobs.ErrFull):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, jobs.ErrFinal):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// api is the JobService handler: decode, authorize, one core operation,
// persist, encode.
type api struct{ s *Service }

var _ slacklinev1connect.JobServiceHandler = api{}

func owner(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.Name
	}
	return ""
}

// visible reports whether the caller may see a job.
func (a api) visible(ctx context.Context, j *jobs.Job) bool {
	if !a.s.cfg.Authz.Enabled() {
		return true
	}
	p := auth.FromContext(ctx)
	return p != nil && (p.Name == j.Owner || a.s.cfg.Authz.Allowed(p, auth.ViewJobs, j.Owner))
}

func (a api) SubmitJob(ctx context.Context, req *connect.Request[slacklinev1.SubmitJobRequest]) (*connect.Response[slacklinev1.SubmitJobResponse], error) {
	s := a.s
	spec, err := jobs.ParseSpec([]byte(req.Msg.GetSpec()))
	if err != nil {
		return nil, connectError(err)
	}
	if p := auth.FromContext(ctx); s.cfg.Authz.Enabled() && !s.cfg.Authz.Allowed(p, auth.SubmitJobs, spec.Role) {
		return nil, auth.Denied(p, auth.SubmitJobs, spec.Role)
	}
	s.mu.Lock()
	j, err := s.core.Submit(spec, owner(ctx), s.now())
	var summary *slacklinev1.JobSummary
	var eff jobs.Effects
	if err == nil {
		summary = j.Summary()
		eff = s.core.Sync(s.now())
	}
	s.mu.Unlock()
	if err != nil {
		return nil, connectError(err)
	}
	if err := s.persistNow(ctx); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("job %q queued but not yet stored: %w", spec.Name, err))
	}
	s.apply(ctx, eff)
	s.wake(s.tick)
	s.log.Info("job submitted", "job", spec.Name, "owner", summary.GetOwner(), "role", spec.Role)
	return connect.NewResponse(&slacklinev1.SubmitJobResponse{Job: summary}), nil
}

func (a api) GetJobs(ctx context.Context, _ *connect.Request[slacklinev1.GetJobsRequest]) (*connect.Response[slacklinev1.GetJobsResponse], error) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	resp := &slacklinev1.GetJobsResponse{}
	for _, j := range a.s.core.Jobs() {
		if a.visible(ctx, j) {
			resp.Jobs = append(resp.Jobs, j.Summary())
		}
	}
	return connect.NewResponse(resp), nil
}

func (a api) GetJob(ctx context.Context, req *connect.Request[slacklinev1.GetJobRequest]) (*connect.Response[slacklinev1.GetJobResponse], error) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	j := a.s.core.Job(req.Msg.GetName())
	if j == nil || !a.visible(ctx, j) {
		return nil, connectError(fmt.Errorf("%w: %q", jobs.ErrNotFound, req.Msg.GetName()))
	}
	return connect.NewResponse(&slacklinev1.GetJobResponse{Job: j.Detail()}), nil
}

func (a api) CancelJob(ctx context.Context, req *connect.Request[slacklinev1.CancelJobRequest]) (*connect.Response[slacklinev1.CancelJobResponse], error) {
	s := a.s
	name := req.Msg.GetName()
	s.mu.Lock()
	j := s.core.Job(name)
	if j == nil || !a.visible(ctx, j) {
		s.mu.Unlock()
		return nil, connectError(fmt.Errorf("%w: %q", jobs.ErrNotFound, name))
	}
	if p := auth.FromContext(ctx); s.cfg.Authz.Enabled() && p.Name != j.Owner && !s.cfg.Authz.Allowed(p, auth.CancelJobs, j.Owner) {
		s.mu.Unlock()
		return nil, auth.Denied(p, auth.CancelJobs, j.Owner)
	}
	eff, err := s.core.Cancel(name, s.now())
	summary := j.Summary()
	s.mu.Unlock()
	if err != nil {
		return nil, connectError(err)
	}
	if err := s.persistNow(ctx); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("job %q cancelled but not yet stored: %w", name, err))
	}
	s.apply(ctx, eff)
	s.log.Info("job cancelled", "job", name, "by", owner(ctx))
	return connect.NewResponse(&slacklinev1.CancelJobResponse{Job: summary}), nil
}

// collector exports the core's counts.
type collector struct{ s *Service }

var (
	descJobs  = prometheus.NewDesc("slackline_jobs_jobs", "Jobs kept by the job service, by state.", []string{"state"}, nil)
	descTasks = prometheus.NewDesc("slackline_jobs_tasks", "Indexes of the jobs kept, by state (queued, running, succeeded, failed); "+
		"preempted and lost count the tasks re-queued after a preemption or a loss.", []string{"state"}, nil)
	descFailures = prometheus.NewDesc("slackline_jobs_task_failures", "Failed task attempts of the jobs kept (each counts against its index's retries).", nil, nil)
	descLimits   = prometheus.NewDesc("slackline_jobs_limit_hits_total", "Times a limit of the job service was hit, by limit.", []string{"limit"}, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descJobs
	ch <- descTasks
	ch <- descFailures
	ch <- descLimits
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	n := c.s.core.Counts()
	hits := map[string]int{}
	for k, v := range c.s.core.LimitHits {
		hits[k] = v
	}
	c.s.mu.Unlock()
	for _, st := range []jobs.State{jobs.Queued, jobs.Running, jobs.Succeeded, jobs.Failed, jobs.Cancelled, jobs.Scheduled} {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n.Jobs[st]), stateLabel(st.String(), "JOB_STATE_"))
	}
	for label, v := range map[string]int{
		"queued": n.Tasks[jobs.IndexPending], "running": n.Tasks[jobs.IndexLaunched], "succeeded": n.Tasks[jobs.IndexSucceeded],
		"failed": n.Tasks[jobs.IndexFailed], "preempted": n.Preempted, "lost": n.Lost,
	} {
		ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(v), label)
	}
	ch <- prometheus.MustNewConstMetric(descFailures, prometheus.GaugeValue, float64(n.Failures))
	for _, l := range []string{jobs.LimitJobs, jobs.LimitEvents, jobs.LimitRuns} {
		ch <- prometheus.MustNewConstMetric(descLimits, prometheus.CounterValue, float64(hits[l]), l)
	}
}

func stateLabel(s, prefix string) string {
	out := []byte(s[len(prefix):])
	for i, b := range out {
		if b >= 'A' && b <= 'Z' {
			out[i] = b + 'a' - 'A'
		}
	}
	return string(out)
}
