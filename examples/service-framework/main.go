// Command service-framework keeps --instances N copies of a long-running
// command on a Slackline cluster, at most one per agent, and honours
// maintenance: it is the service of the inverse-offers blog post.
//
// Placement: offers of agents without unavailability are used first, then
// those whose maintenance starts latest (frameworkapi.PreferAvailable);
// agents being drained are never used. Offers it has no use for are
// declined for 5 s.
//
// Maintenance: on an inverse offer for an agent that runs instances it
// starts replacements elsewhere first (reviving offers), kills the
// instances on the draining agent once the replacements are RUNNING, and
// then accepts the inverse offer. While it cannot move without dropping
// below N RUNNING instances it holds the inverse offer, and declines it
// after --move-timeout; the coordinator sends it again 5 s later. An inverse
// offer for an agent it does not use is accepted at once. The framework
// declares N as its FrameworkInfo.min_available_tasks (--min-available), so
// GetMaintenanceStatus shows when draining a window would break it.
//
// Health: with --health-check (http:PORT[/PATH], tcp:PORT or
// command:SHELL-COMMAND) every instance carries a health check run by its
// agent; an instance that fails it --health-consecutive-failures times in
// a row is killed by the agent (TASK_STATE_FAILED with
// REASON_TASK_HEALTH_CHECK_STATUS_FAILED) and replaced like any instance
// that ended.
//
// It logs one line per decision (stderr) and runs until SIGINT or SIGTERM,
// then tears the framework down (its instances are killed) unless
// --keep-on-exit is set. Exit status: 0 after a signal, 1 on errors, 2 for
// bad flags.
//
// Flags can also come from the YAML file --config names, keyed by flag name
// (the command line overrides it); --version prints the version it was
// built from.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/internal/taskspec"
	"github.com/slackline/slackline/resources"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// options are the command-line flags.
type options struct {
	coordinator     string
	ca, tokenFile   string
	name            string
	role            string
	taskResources   string
	command         string
	instances       int
	minAvailable    int
	moveTimeout     time.Duration
	labels          map[string]string
	failoverTimeout time.Duration
	keepOnExit      bool
	// healthCheck is --health-check with its --health-* timings (nil:
	// none).
	healthCheck *slacklinev1.HealthCheck
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	opts := options{labels: map[string]string{}}
	fs := flag.NewFlagSet("service-framework", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.coordinator, "coordinator", cmp.Or(os.Getenv("SLACKLINE_COORDINATOR"), frameworkapi.DefaultCoordinator), "coordinator URL, or a comma-separated list of a coordinator group's URLs (env SLACKLINE_COORDINATOR)")
	fs.StringVar(&opts.ca, "ca", os.Getenv(auth.EnvCA), "CA certificate that signs the coordinator's (env "+auth.EnvCA+")")
	fs.StringVar(&opts.tokenFile, "token-file", os.Getenv(auth.EnvTokenFile), "file holding the framework's bearer token (env "+auth.EnvTokenFile+")")
	fs.StringVar(&opts.name, "name", "service", "framework name, also the prefix of task ids")
	fs.StringVar(&opts.role, "role", "*", "role to subscribe with")
	fs.StringVar(&opts.taskResources, "task-resources", "cpus:0.5;mem:128", "resources of each instance")
	fs.StringVar(&opts.command, "command", "sleep 3600", "shell command each instance runs (restarted elsewhere when it ends)")
	fs.IntVar(&opts.instances, "instances", 2, "number of instances to keep running, at most one per agent")
	fs.IntVar(&opts.minAvailable, "min-available", -1, "RUNNING instances the service declares it needs (FrameworkInfo.min_available_tasks; -1: --instances)")
	fs.DurationVar(&opts.moveTimeout, "move-timeout", 30*time.Second, "how long to try moving instances off a draining agent before declining its inverse offer")
	fs.Func("label", "`key=value` label added to every task (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("label %q is not key=value", v)
		}
		opts.labels[k] = val
		return nil
	})
	fs.DurationVar(&opts.failoverTimeout, "failover-timeout", time.Minute, "how long the coordinator keeps the instances after this process is gone (with --keep-on-exit)")
	fs.BoolVar(&opts.keepOnExit, "keep-on-exit", false, "leave the framework (and its instances) on SIGINT/SIGTERM instead of tearing it down")
	healthCheck := fs.String("health-check", "", "health check of each instance, run by its agent: http:PORT[/PATH] (2xx or 3xx), tcp:PORT or command:SHELL-COMMAND (exit 0, inside the instance's container); an instance failing it is killed and replaced")
	healthInterval := fs.Duration("health-interval", 10*time.Second, "time between two health checks of an instance")
	healthTimeout := fs.Duration("health-timeout", 5*time.Second, "a health check taking longer fails")
	healthGrace := fs.Duration("health-grace-period", 30*time.Second, "failures within this long of an instance's start do not count until its first success")
	healthFailures := fs.Uint("health-consecutive-failures", 3, "failed health checks in a row that get an instance killed and replaced")
	if done, err := cliconfig.Parse(fs, args); done || err != nil {
		return options{}, cmp.Or(err, flag.ErrHelp) // done: help or version shown
	}
	if *healthCheck != "" {
		hc, err := parseHealthCheck(*healthCheck)
		if err != nil {
			return options{}, fmt.Errorf("--health-check: %w", err)
		}
		hc.DelaySeconds, hc.IntervalSeconds = proto.Float64(0), proto.Float64(healthInterval.Seconds())
		hc.TimeoutSeconds, hc.GracePeriodSeconds = proto.Float64(healthTimeout.Seconds()), proto.Float64(healthGrace.Seconds())
		hc.ConsecutiveFailures = proto.Uint32(uint32(min(*healthFailures, 1<<31)))
		if _, err := taskspec.HealthCheck(hc); err != nil {
			return options{}, fmt.Errorf("--health-check and --health-*: %w", err)
		}
		opts.healthCheck = hc
	}
	if opts.minAvailable < 0 {
		opts.minAvailable = opts.instances
	}
	switch {
	case fs.NArg() > 0:
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case opts.instances < 1:
		return options{}, errors.New("--instances must be at least 1")
	case opts.minAvailable > opts.instances:
		return options{}, fmt.Errorf("--min-available %d is more than --instances %d", opts.minAvailable, opts.instances)
	case opts.name == "" || strings.ContainsAny(opts.name, " /"):
		return options{}, fmt.Errorf("--name %q must be non-empty, without spaces or slashes", opts.name)
	case opts.failoverTimeout < 0, opts.moveTimeout < 0:
		return options{}, errors.New("--failover-timeout and --move-timeout must not be negative")
	}
	return opts, nil
}

// parseHealthCheck parses --health-check: http:PORT[/PATH], tcp:PORT or
// command:SHELL-COMMAND.
func parseHealthCheck(s string) (*slacklinev1.HealthCheck, error) {
	kind, rest, _ := strings.Cut(s, ":")
	port := func(p string) (uint32, error) {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("%q: want a port number 1-65535", p)
		}
		return uint32(n), nil
	}
	switch kind {
	case "http":
		p, path, hasPath := strings.Cut(rest, "/")
		n, err := port(p)
		if err != nil {
			return nil, err
		}
		if hasPath {
			path = "/" + path
		}
		return &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: n, Path: path}}, nil
	case "tcp":
		n, err := port(rest)
		if err != nil {
			return nil, err
		}
		return &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: n}}, nil
	case "command":
		if rest == "" {
			return nil, errors.New("command: needs a shell command")
		}
		return &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_COMMAND, Command: &slacklinev1.CommandInfo{Value: rest, Shell: true}}, nil
	}
	return nil, fmt.Errorf("%q: want http:PORT[/PATH], tcp:PORT or command:SHELL-COMMAND", s)
}

func run(args []string, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "service-framework:", err)
		return 2
	}
	need, err := resources.Parse(opts.taskResources)
	if err != nil || need.IsEmpty() {
		fmt.Fprintf(stderr, "service-framework: --task-resources %q: must be non-empty resources (%v)\n", opts.taskResources, err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	info := &slacklinev1.FrameworkInfo{
		Name:                   opts.name,
		Roles:                  []string{opts.role},
		FailoverTimeoutSeconds: opts.failoverTimeout.Seconds(),
		MinAvailableTasks:      uint32(opts.minAvailable),
	}
	if host, err := os.Hostname(); err == nil {
		info.Hostname = host
	}
	client, err := frameworkapi.New(frameworkapi.Config{Coordinator: opts.coordinator, CAFile: opts.ca, TokenFile: opts.tokenFile, Framework: info, Logger: logger})
	if err != nil {
		logger.Error("create client", "err", err)
		return 2
	}
	sched := newScheduler(schedulerConfig{
		name: opts.name, incarnation: incarnation(), instances: opts.instances, need: need,
		command: opts.command, labels: opts.labels, moveTimeout: opts.moveTimeout, healthCheck: opts.healthCheck,
	})

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	signals, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	go func() {
		select {
		case <-signals.Done():
			if !opts.keepOnExit {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := client.Teardown(ctx); err != nil {
					logger.Warn("teardown", "err", err)
				}
				cancel()
			}
			stopRun()
		case <-runCtx.Done():
		}
	}()
	h := &handler{sched: sched, log: logger, now: time.Now}
	runErr := client.Run(runCtx, h)
	if runErr != nil {
		logger.Error("run", "err", runErr)
		return 1
	}
	return 0
}

// handler connects the scheduler to the SDK and carries out its plans.
type handler struct {
	frameworkapi.BaseHandler
	sched *scheduler
	log   *slog.Logger
	now   func() time.Time
}

func (h *handler) Offers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
	h.execute(ctx, c, h.sched.offers(offers, h.now()))
}

func (h *handler) InverseOffers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.InverseOffer) {
	for _, io := range offers {
		w, _ := frameworkapi.UnavailabilityWindow(io.GetUnavailability())
		h.log.Info("inverse offer: agent to be drained", "inverse_offer_id", io.GetId(), "agent_id", io.GetAgentId(),
			"hostname", io.GetHostname(), "start", w.Start.Format(time.RFC3339))
	}
	h.execute(ctx, c, h.sched.inverseOffers(offers, h.now()))
}

func (h *handler) RescindInverseOffer(_ context.Context, _ *frameworkapi.Client, id string) {
	h.log.Info("inverse offer rescinded", "inverse_offer_id", id)
	h.sched.rescindInverse(id)
}

func (h *handler) Update(ctx context.Context, c *frameworkapi.Client, st *slacklinev1.TaskStatus) {
	if _, known := h.sched.instances[st.GetTaskId()]; known {
		attrs := []any{"task_id", st.GetTaskId(), "state", st.GetState(), "agent_id", st.GetAgentId(), "message", st.GetMessage()}
		if st.Healthy != nil {
			attrs = append(attrs, "healthy", st.GetHealthy())
		}
		h.log.Info("instance", attrs...)
		if st.GetReason() == slacklinev1.Reason_REASON_TASK_HEALTH_CHECK_STATUS_FAILED {
			h.log.Warn("instance failed its health check: replacing it", "task_id", st.GetTaskId(), "agent_id", st.GetAgentId())
		}
	}
	h.execute(ctx, c, h.sched.update(st, h.now()))
	live, running := h.sched.counts()
	h.log.Debug("instances", "live", live, "running", running)
}

func (h *handler) Disconnected(_ context.Context, _ *frameworkapi.Client, err error) {
	h.log.Warn("disconnected; reconnecting", "err", err)
}

// execute carries out a plan. A failed launch forgets its instance, which
// a later offer replaces.
func (h *handler) execute(ctx context.Context, c *frameworkapi.Client, p plan) {
	for _, l := range p.launches {
		if err := c.Launch(ctx, []string{l.offerID}, []*slacklinev1.TaskInfo{l.task}, frameworkapi.Filters(declineSeconds)); err != nil {
			h.log.Warn("launch", "task_id", l.task.GetTaskId(), "err", err)
			h.sched.launchFailed(l)
			continue
		}
		h.log.Info("instance launched", "task_id", l.task.GetTaskId(), "agent_id", l.task.GetAgentId())
	}
	if len(p.declines) > 0 {
		if err := c.Decline(ctx, p.declines, frameworkapi.Filters(declineSeconds)); err != nil {
			h.log.Warn("decline", "offers", len(p.declines), "err", err)
		}
	}
	for _, k := range p.kills {
		h.log.Info("moving instance off a draining agent: killing it", "task_id", k.taskID, "agent_id", k.agentID)
		if err := c.Kill(ctx, k.taskID, k.agentID); err != nil {
			h.log.Warn("kill", "task_id", k.taskID, "err", err)
		}
	}
	if len(p.acceptInverse) > 0 {
		h.log.Info("accepting inverse offers: nothing of ours is left on their agents", "inverse_offer_ids", p.acceptInverse)
		if err := c.AcceptInverseOffers(ctx, p.acceptInverse, frameworkapi.Filters(acceptInverseSeconds)); err != nil {
			h.log.Warn("accept inverse offers", "err", err)
		}
	}
	if len(p.declineInverse) > 0 {
		h.log.Info("declining inverse offers: cannot move without dropping below the instance count", "inverse_offer_ids", p.declineInverse)
		if err := c.DeclineInverseOffers(ctx, p.declineInverse, frameworkapi.Filters(declineInverseSeconds)); err != nil {
			h.log.Warn("decline inverse offers", "err", err)
		}
	}
	if p.revive {
		if err := c.Revive(ctx); err != nil {
			h.log.Warn("revive", "err", err)
		}
	}
}

// incarnation returns a short random token for this process's task ids.
func incarnation() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
