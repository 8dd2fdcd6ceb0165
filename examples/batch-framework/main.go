// Command batch-framework runs a queue of identical tasks on a Slackline
// cluster, optionally only on revocable resources, and exits when they are
// all done.
//
// It launches as many pending tasks as fit on each offer (at most
// --max-tasks-per-offer), accepting with a refusal of 0 s while tasks are
// pending so that the rest of each offer goes straight back to the allocator,
// declines offers that fit nothing for 5 s, and suppresses offers when
// nothing is pending. A task that ends in any terminal state other than
// TASK_STATE_FINISHED is launched again, up to --max-attempts launches in all
// (a launch refused because its offer was no longer outstanding does not
// count: it never reached an agent).
// It logs one line per task state change (stderr) and prints
// "batch: N finished, M failed" (stdout) at the end.
//
// With --revocable it subscribes with FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES
// and uses only revocable offers, declining regular ones; without it, it
// declines revocable offers.
//
// Exit status: 0 when every task finished; 1 when some task failed for good,
// the coordinator removed the framework, or an error occurred; 2 for bad
// flags; 130 after SIGINT or SIGTERM. When every task is done the framework
// tears itself down. On a signal it leaves WITHOUT tearing down, so that
// another process started with the same --framework-id-file fails over to it
// and adopts its tasks within --failover-timeout; --teardown-on-exit tears
// down instead.
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
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/resources"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command-line flags.
type options struct {
	coordinator     string
	ca, tokenFile   string
	name            string
	role            string
	taskResources   string
	command         string
	image           string // TaskInfo.image (#27)
	tasks           int
	maxPerOffer     int
	maxAttempts     int
	revocable       bool
	labels          map[string]string
	failoverTimeout time.Duration
	frameworkIDFile string
	teardownOnExit  bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	opts := options{labels: map[string]string{}}
	fs := flag.NewFlagSet("batch-framework", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.coordinator, "coordinator", cmp.Or(os.Getenv("SLACKLINE_COORDINATOR"), frameworkapi.DefaultCoordinator), "coordinator URL, or a comma-separated list of a coordinator group's URLs (env SLACKLINE_COORDINATOR)")
	fs.StringVar(&opts.ca, "ca", os.Getenv(auth.EnvCA), "CA certificate that signs the coordinator's (env "+auth.EnvCA+")")
	fs.StringVar(&opts.tokenFile, "token-file", os.Getenv(auth.EnvTokenFile), "file holding the framework's bearer token (env "+auth.EnvTokenFile+")")
	fs.StringVar(&opts.name, "name", "batch", "framework name, also the prefix of task ids")
	fs.StringVar(&opts.role, "role", "*", "role to subscribe with")
	fs.StringVar(&opts.taskResources, "task-resources", "cpus:1;mem:128", "resources of each task")
	fs.StringVar(&opts.command, "command", "sleep 1", "shell command each task runs")
	fs.StringVar(&opts.image, "image", "", "OCI image each task runs in (docker://registry/repo:tag, registry/repo@sha256:..., oci:/layout[:tag], docker-archive:/file.tar); an empty --command then runs the image's entrypoint and cmd")
	fs.IntVar(&opts.tasks, "tasks", 10, "number of tasks to run")
	fs.IntVar(&opts.maxPerOffer, "max-tasks-per-offer", 0, "most tasks launched on one offer (0: as many as fit)")
	fs.IntVar(&opts.maxAttempts, "max-attempts", 3, "launches of a task before it counts as failed")
	fs.BoolVar(&opts.revocable, "revocable", false, "run only on revocable resources")
	fs.Func("label", "`key=value` label added to every task (repeatable), e.g. sim.duration=1s", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("label %q is not key=value", v)
		}
		opts.labels[k] = val
		return nil
	})
	fs.DurationVar(&opts.failoverTimeout, "failover-timeout", time.Minute, "how long the coordinator keeps the tasks after this process is gone")
	fs.StringVar(&opts.frameworkIDFile, "framework-id-file", "", "file that keeps the framework id, to fail over after a restart (optional)")
	fs.BoolVar(&opts.teardownOnExit, "teardown-on-exit", false, "tear the framework down on SIGINT/SIGTERM instead of leaving it for failover")
	if done, err := cliconfig.Parse(fs, args); done || err != nil {
		return options{}, cmp.Or(err, flag.ErrHelp) // done: help or version shown
	}
	switch {
	case fs.NArg() > 0:
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case opts.tasks < 0:
		return options{}, errors.New("--tasks must not be negative")
	case opts.maxPerOffer < 0:
		return options{}, errors.New("--max-tasks-per-offer must not be negative")
	case opts.maxAttempts < 1:
		return options{}, errors.New("--max-attempts must be at least 1")
	case opts.name == "" || strings.ContainsAny(opts.name, " /"):
		return options{}, fmt.Errorf("--name %q must be non-empty, without spaces or slashes", opts.name)
	case opts.failoverTimeout < 0:
		return options{}, errors.New("--failover-timeout must not be negative")
	}
	return opts, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "batch-framework:", err)
		return 2
	}
	need, err := resources.Parse(opts.taskResources)
	if err != nil {
		fmt.Fprintf(stderr, "batch-framework: --task-resources: %v\n", err)
		return 2
	}
	if need.IsEmpty() {
		fmt.Fprintln(stderr, "batch-framework: --task-resources must not be empty")
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	info := &slacklinev1.FrameworkInfo{
		Name:                   opts.name,
		Roles:                  []string{opts.role},
		FailoverTimeoutSeconds: opts.failoverTimeout.Seconds(),
	}
	if host, err := os.Hostname(); err == nil {
		info.Hostname = host
	}
	if opts.revocable {
		info.Capabilities = append(info.Capabilities, slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES)
	}
	if opts.frameworkIDFile != "" {
		id, err := readFrameworkID(opts.frameworkIDFile)
		if err != nil {
			logger.Error("read framework id", "err", err)
			return 1
		}
		if id != "" {
			logger.Info("failing over", "framework_id", id)
		}
		info.Id = id
	}
	client, err := frameworkapi.New(frameworkapi.Config{Coordinator: opts.coordinator, CAFile: opts.ca, TokenFile: opts.tokenFile, Framework: info, Logger: logger})
	if err != nil {
		logger.Error("create client", "err", err)
		return 2
	}

	sched := newScheduler(schedulerConfig{
		name:        opts.name,
		incarnation: incarnation(),
		tasks:       opts.tasks,
		need:        need,
		command:     opts.command,
		image:       opts.image,
		labels:      opts.labels,
		maxPerOffer: opts.maxPerOffer,
		revocable:   opts.revocable,
		maxAttempts: opts.maxAttempts,
	})

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	signals, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	var interrupted atomic.Bool
	go func() {
		select {
		case <-signals.Done():
			interrupted.Store(true)
			if opts.teardownOnExit {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := client.Teardown(ctx); err != nil {
					logger.Warn("teardown", "err", err)
				}
				cancel()
			} else {
				logger.Info("leaving without teardown; the framework can fail over", "framework_id", client.FrameworkID(),
					"failover_timeout", opts.failoverTimeout)
			}
			stopRun()
		case <-runCtx.Done():
		}
	}()

	h := &handler{sched: sched, log: logger, idFile: opts.frameworkIDFile, stop: stopRun}
	if sched.done() { // --tasks 0
		stopRun()
	}
	runErr := client.Run(runCtx, h)

	finished, failed := sched.summary()
	fmt.Fprintf(stdout, "batch: %d finished, %d failed\n", finished, failed)
	switch {
	case errors.Is(runErr, frameworkapi.ErrTornDown):
		logger.Error("subscription ended by the coordinator", "err", runErr)
		// A refused resubscription means the id is dead. After an Error
		// event the framework may live on in another process that failed
		// over to it, so its id is kept.
		if code := connect.CodeOf(runErr); code == connect.CodeNotFound || code == connect.CodeFailedPrecondition {
			removeFrameworkID(logger, opts.frameworkIDFile)
		}
		return 1
	case runErr != nil:
		logger.Error("run", "err", runErr)
		return 1
	case h.tornDown:
		removeFrameworkID(logger, opts.frameworkIDFile)
	}
	switch {
	case interrupted.Load() && !sched.done():
		logger.Info("interrupted", "unfinished", opts.tasks-finished-failed)
		return 130
	case failed > 0:
		return 1
	}
	return 0
}

// handler connects the scheduler to the SDK.
type handler struct {
	frameworkapi.BaseHandler
	sched    *scheduler
	log      *slog.Logger
	idFile   string
	stop     context.CancelFunc // ends Run
	tornDown bool               // this process tore the framework down
}

func (h *handler) Subscribed(_ context.Context, _ *frameworkapi.Client, ev *slacklinev1.SubscribedEvent) {
	h.sched.subscribed()
	if h.idFile != "" {
		if err := writeFrameworkID(h.idFile, ev.GetFrameworkId()); err != nil {
			h.log.Warn("save framework id", "err", err)
		}
	}
}

func (h *handler) Offers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
	plan := h.sched.offers(offers)
	for _, l := range plan.launches {
		if err := c.Launch(ctx, l.offerIDs(), l.tasks, l.filters); err != nil {
			h.log.Warn("launch", "offer_id", l.offerID, "tasks", len(l.tasks), "err", err)
			h.sched.launchFailed(l)
			continue
		}
		for _, t := range l.tasks {
			h.log.Info("task launched", "task_id", t.GetTaskId(), "agent_id", t.GetAgentId(), "offer_id", l.offerID)
		}
	}
	if len(plan.declines) > 0 {
		if err := c.Decline(ctx, plan.declines, frameworkapi.Filters(declineSeconds)); err != nil {
			h.log.Warn("decline", "offers", len(plan.declines), "err", err)
		}
	}
	if len(plan.shortDeclines) > 0 {
		if err := c.Decline(ctx, plan.shortDeclines, frameworkapi.Filters(shortDeclineSeconds)); err != nil {
			h.log.Warn("decline", "offers", len(plan.shortDeclines), "err", err)
		}
	}
	if plan.suppress {
		if err := c.Suppress(ctx); err != nil {
			h.log.Warn("suppress", "err", err)
		} else {
			h.sched.setSuppressed(true)
		}
	}
}

// Rescind forgets a held offer the coordinator took back.
func (h *handler) Rescind(_ context.Context, _ *frameworkapi.Client, offerID string) {
	h.sched.rescind(offerID)
}

func (h *handler) Update(ctx context.Context, c *frameworkapi.Client, status *slacklinev1.TaskStatus) {
	out := h.sched.update(status)
	if out.changed {
		attrs := []any{"task_id", status.GetTaskId(), "state", status.GetState(), "agent_id", status.GetAgentId()}
		if status.GetReason() != slacklinev1.Reason_REASON_UNSPECIFIED {
			attrs = append(attrs, "reason", status.GetReason())
		}
		if status.GetMessage() != "" {
			attrs = append(attrs, "message", status.GetMessage())
		}
		switch {
		case out.requeued:
			attrs = append(attrs, "next", "retry")
		case out.gaveUp:
			attrs = append(attrs, "next", "give up")
		}
		h.log.Info("task", attrs...)
	}
	if out.kill {
		h.log.Info("killing stale task", "task_id", status.GetTaskId(), "state", status.GetState())
		if err := c.Kill(ctx, status.GetTaskId(), status.GetAgentId()); err != nil {
			h.log.Warn("kill", "task_id", status.GetTaskId(), "err", err)
		}
	}
	if out.revive {
		if err := c.Revive(ctx); err != nil {
			h.log.Warn("revive", "err", err)
		} else {
			h.sched.setSuppressed(false)
		}
	}
	if out.done {
		if err := c.Teardown(ctx); err != nil {
			h.log.Warn("teardown", "err", err)
		} else {
			h.tornDown = true
		}
		h.stop()
	}
}

func (h *handler) Failure(_ context.Context, _ *frameworkapi.Client, agentID string) {
	h.log.Warn("agent lost", "agent_id", agentID)
}

func (h *handler) Error(_ context.Context, _ *frameworkapi.Client, message string) {
	h.log.Error("coordinator error", "message", message)
}

func (h *handler) Disconnected(_ context.Context, _ *frameworkapi.Client, err error) {
	h.log.Warn("disconnected; reconnecting", "err", err)
}

// incarnation returns a short random token that keeps this process's task
// ids apart from those of an earlier process of the same framework.
func incarnation() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// readFrameworkID returns the id saved in path, "" when there is none.
func readFrameworkID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read framework id file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeFrameworkID saves id in path atomically.
func writeFrameworkID(path, id string) error {
	if old, err := readFrameworkID(path); err == nil && old == id {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write framework id file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write framework id file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write framework id file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write framework id file: %w", err)
	}
	return nil
}

// removeFrameworkID forgets a framework id that can no longer be used.
func removeFrameworkID(logger *slog.Logger, path string) {
	if path == "" {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		logger.Warn("remove framework id file", "err", err)
	}
}
