package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/fetcher"
	"github.com/slackline/slackline/agent/images"
	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/internal/kv"
)

// sandboxPruneEvery is how many launches pass between prunes of the
// checkpoint's sandbox records.
const sandboxPruneEvery = 100

// lifecycle is the executor of the agent's task machine (agent/tasks). Its
// mutex guards only the machine and the effects not yet performed, and is
// held only while an event is applied: no I/O ever happens under it. The
// effects are performed by Run's goroutine, in the order the machine
// produced them: the checkpoint (one transaction, one fsync, for everything
// pending), then containers, then status updates, so an update is sent only
// once a restart would find it.
//
// Pending effects are bounded by the machine's state: at most one Start per
// task being launched and a few updates per task, whatever the rate of
// events; a burst of events is written in one transaction.
type lifecycle struct {
	log  *slog.Logger
	cz   Containerizer
	ckpt *checkpoint
	// send hands an update to the current session (non-blocking).
	send func(frameworkID string, status *slacklinev1.TaskStatus)
	// agentID returns the agent's current id, for tasks' environment.
	agentID func() string
	// containersChanged is called after containers started or ended.
	containersChanged func()
	now               func() time.Time
	// fetch downloads a task's artifacts into its sandbox during Launch.
	fetch *fetcher.Fetcher
	// healthWatch starts checking a task that runs; healthForget stops
	// checking a container being killed or destroyed.
	healthWatch  func(containerID string, task *slacklinev1.TaskInfo, started time.Time)
	healthForget func(containerID string)

	mu      sync.Mutex
	machine *tasks.Machine
	pending tasks.Effects
	// sandboxRecords are the sandbox records of launched containers, to
	// be written in the transaction of the next checkpoint batch: the one
	// with their RUNNING update, queued after them (one fsync less per
	// launch). At most one per launch under way.
	sandboxRecords []kv.Mutation

	// images provides tasks' image roots (nil: tasks with an image fail).
	images imageStore

	wake     chan struct{}
	inflight sync.WaitGroup // container starts and kills
	launches int            // guarded by mu
	// fetching cancels the artifact fetches of launches under way, by
	// container id (guarded by mu): a kill must not wait for a download.
	fetching map[string]context.CancelFunc
}

// imageStore is what the lifecycle needs of the agent's image store
// (*images.Store): a container's image, leased until Release.
type imageStore interface {
	Acquire(ctx context.Context, reference, holder string) (*images.Image, error)
	Release(holder string) error
}

// step applies one event and queues its effects for Run.
func (l *lifecycle) step(ev tasks.Event) {
	l.mu.Lock()
	eff, err := l.machine.Step(ev)
	l.pending.Append(eff)
	l.cancelFetchesLocked(ev)
	l.mu.Unlock()
	if !eff.IsZero() {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	if err != nil {
		level := slog.LevelDebug
		if errors.Is(err, tasks.ErrDuplicateLaunch) || errors.Is(err, tasks.ErrInvalidLaunch) {
			level = slog.LevelWarn
		}
		l.log.Log(context.Background(), level, "task event changed nothing", "event", fmt.Sprintf("%T", ev), "err", err)
	}
}

// cancelFetchesLocked cancels the fetches of the launches a kill event
// concerns; the launch then fails and the machine reports the kill.
func (l *lifecycle) cancelFetchesLocked(ev tasks.Event) {
	for containerID, cancel := range l.fetching {
		key, ok := l.machine.Container(containerID)
		if !ok {
			continue
		}
		switch ev := ev.(type) {
		case tasks.Kill:
			ok = ev.Key == key
		case tasks.ShutdownFramework:
			ok = ev.FrameworkID == key.FrameworkID
		case tasks.ShutdownAgent:
		default:
			ok = false
		}
		if ok {
			cancel()
		}
	}
}

// read runs f with the machine locked, for queries.
func (l *lifecycle) read(f func(m *tasks.Machine)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l.machine)
}

// Run performs effects, turns container exits into events and lets time
// pass every second, until ctx ends; then it performs what is pending and
// waits for container starts and kills under way.
func (l *lifecycle) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer func() {
		// What was decided before the end is still made durable.
		final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.perform(final)
		l.inflight.Wait()
		l.perform(final)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.wake:
		case <-tick.C:
			l.step(tasks.Tick{Now: l.now()})
		case ex := <-l.cz.Exits():
			l.step(tasks.Exited{ContainerID: ex.ContainerID, Exit: taskExit(ex), Now: l.now()})
		}
		l.perform(ctx)
	}
}

// perform executes every pending effect, in order.
func (l *lifecycle) perform(ctx context.Context) {
	for {
		l.mu.Lock()
		eff, records := l.pending, l.sandboxRecords
		l.pending, l.sandboxRecords = tasks.Effects{}, nil
		l.mu.Unlock()
		if eff.IsZero() && len(records) == 0 {
			return
		}
		persistBegan := l.now()
		if !l.persist(ctx, eff.Checkpoint, records...) {
			// Stopping before the checkpoint was durable: what it covers
			// is neither started nor sent.
			return
		}
		persisted := l.now()
		for _, s := range eff.Start {
			l.inflight.Add(1)
			go l.start(s, persisted.Sub(persistBegan))
		}
		for _, id := range eff.Kill {
			if l.healthForget != nil {
				l.healthForget(id)
			}
			l.inflight.Add(1)
			go func() {
				defer l.inflight.Done()
				if err := l.cz.Kill(context.Background(), id); err != nil {
					l.log.Error("kill container", "container", id, "err", err)
				}
			}()
		}
		for _, id := range eff.Destroy {
			if l.healthForget != nil {
				l.healthForget(id)
			}
			if err := l.cz.Destroy(id); err != nil {
				l.log.Warn("destroy container", "container", id, "err", err)
			}
			l.releaseImage(id)
		}
		if len(eff.Destroy) > 0 {
			l.containersChanged()
		}
		for _, u := range eff.Send {
			l.send(u.FrameworkID, u.Status)
			if u.Status.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				// The last stage of a launch, for the launch benchmarks:
				// from the event (Launched, or a health change) to the
				// update handed to the session, its checkpoint (durable
				// before it is sent) included.
				l.log.Info("task running sent", "task", u.Status.GetTaskId(), "framework", u.FrameworkID,
					"checkpoint_ms", ms(persisted.Sub(persistBegan)), "since_event_ms", ms(l.now().Sub(u.Status.GetTimestamp().AsTime())))
			}
		}
	}
}

// persist writes a checkpoint batch, retrying with backoff until it is
// durable: nothing after it may happen before. It returns false only when
// ctx ends first.
func (l *lifecycle) persist(ctx context.Context, writes []tasks.Write, extra ...kv.Mutation) bool {
	if len(writes) == 0 && len(extra) == 0 {
		return true
	}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := l.ckpt.apply(ctx, writes, extra...)
		if err == nil {
			if retry.Failures() > 0 {
				l.log.Info("checkpoint writable again", "failures", retry.Failures())
			}
			return true
		}
		if retry.Failures() == 0 {
			l.log.Error("checkpoint write failed; the agent holds its tasks' effects until it succeeds", "err", err)
		}
		if !retry.Wait(ctx) {
			l.log.Error("stopping with a checkpoint batch unwritten", "writes", len(writes), "err", err)
			return false
		}
	}
}

// start launches a container and reports the outcome to the machine.
// checkpointed is how long the checkpoint before it took (logged).
func (l *lifecycle) start(s tasks.Start, checkpointed time.Duration) {
	defer l.inflight.Done()
	ctx := context.Background() // a launch outlives the session that asked for it
	began := l.now()
	// The fetch is cancellable from the start: a kill that arrives while
	// the image is pulled, or before this goroutine ran at all, must not
	// wait for a download (cancelFetchesLocked cancels registered fetches;
	// one killed before it registered starts cancelled).
	fetchCtx, cancelFetch := context.WithCancel(ctx)
	l.mu.Lock()
	if l.fetching == nil {
		l.fetching = map[string]context.CancelFunc{}
	}
	l.fetching[s.ContainerID] = cancelFetch
	if l.machine.Killing(s.ContainerID) {
		cancelFetch()
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.fetching, s.ContainerID)
		l.mu.Unlock()
		cancelFetch()
	}()
	var image *containerizer.Image
	if ref := s.Task.GetImage(); ref != "" {
		img, err := l.acquireImage(fetchCtx, ref, s.ContainerID)
		if err != nil {
			l.log.Warn("image pull failed", "task", s.Key.TaskID, "framework", s.Key.FrameworkID, "image", ref, "err", err)
			l.step(tasks.LaunchFailed{ContainerID: s.ContainerID, Reason: slacklinev1.Reason_REASON_IMAGE_PULL_FAILED,
				Message: err.Error(), Now: l.now()})
			return
		}
		image = img
		l.log.Debug("image ready", "task", s.Key.TaskID, "image", ref, "seconds", l.now().Sub(began).Seconds())
	}
	spec := containerizer.Spec{
		Image:       image,
		ContainerID: s.ContainerID, FrameworkID: s.Key.FrameworkID, TaskID: s.Key.TaskID,
		Revocable: s.Revocable, Resources: s.Resources, Command: s.Task.GetCommand(),
		Env: map[string]string{"SLACKLINE_AGENT_ID": l.agentID()},
		// The task's user, else its framework's, else the containerizer's default.
		User: cmp.Or(s.Task.GetUser(), s.Framework.GetUser()),
		// Without the seccomp filter: the coordinator let only frameworks
		// with run_unconfined_tasks ask for it.
		SeccompUnconfined: s.Task.GetSeccompUnconfined(),
	}
	if uris := s.Task.GetCommand().GetUris(); len(uris) > 0 {
		spec.Fetch = func(_ context.Context, sandbox string, uid, gid int) error {
			return l.fetch.Fetch(fetchCtx, sandbox, fetcher.Owner{UID: uid, GID: gid}, uris)
		}
	}
	launchBegan := l.now()
	c, err := l.cz.Launch(ctx, spec)
	if err != nil {
		l.log.Warn("launch failed", "task", s.Key.TaskID, "framework", s.Key.FrameworkID, "err", err)
		l.releaseImage(s.ContainerID)
		reason, message := launchFailure(err)
		l.step(tasks.LaunchFailed{ContainerID: s.ContainerID, Reason: reason, Message: message, Now: l.now()})
		return
	}
	launched := l.now()
	// The agent's stages of a launch, for the launch benchmarks: the task
	// record's checkpoint, the wait for this goroutine and the image, the
	// containerizer's Launch (the RUNNING update's checkpoint and
	// hand-off follow: "task running sent").
	l.log.Info("task launch stages", "task", s.Key.TaskID, "framework", s.Key.FrameworkID, "image", s.Task.GetImage() != "",
		"checkpoint_ms", ms(checkpointed), "image_ms", ms(launchBegan.Sub(began)), "launch_ms", ms(launched.Sub(launchBegan)))
	// Where the sandbox is, so logs stay readable after the task ends:
	// queued before the Launched event, so it is durable in the same
	// transaction as the RUNNING update that reveals the task, or before.
	l.mu.Lock()
	l.sandboxRecords = append(l.sandboxRecords, sandboxRecord(s.Key, c.Sandbox, s.Framework.GetPrincipal(), l.now()))
	l.mu.Unlock()
	l.step(tasks.Launched{ContainerID: s.ContainerID, Message: fmt.Sprintf("running in %s (pid %d)", c.CgroupPath, c.Pid), Now: l.now()})
	select { // the record is written even when the event changes nothing
	case l.wake <- struct{}{}:
	default:
	}
	if l.healthWatch != nil {
		l.healthWatch(s.ContainerID, s.Task, l.now())
	}
	l.containersChanged()
	l.mu.Lock()
	l.launches++
	prune := l.launches%sandboxPruneEvery == 0
	l.mu.Unlock()
	if prune {
		if err := l.ckpt.pruneSandboxes(ctx); err != nil {
			l.log.Warn("prune sandbox records", "err", err)
		}
	}
}

// launchFailure is the reason and message of a failed launch: an artifact
// that could not be fetched (the message names its URL), a user this agent
// refuses (the task's fault, not the node's), or a launch failure.
func launchFailure(err error) (slacklinev1.Reason, string) {
	var fetchErr *fetcher.Error
	switch {
	case errors.As(err, &fetchErr):
		return slacklinev1.Reason_REASON_FETCH_FAILED, fetchErr.Error()
	case errors.Is(err, containerizer.ErrTaskUser):
		return slacklinev1.Reason_REASON_TASK_INVALID, "launch: " + err.Error()
	}
	return slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED, "launch: " + err.Error()
}

// acquireImage pulls (or finds cached) a task's image and leases its
// layers to the container.
func (l *lifecycle) acquireImage(ctx context.Context, ref, containerID string) (*containerizer.Image, error) {
	if l.images == nil {
		return nil, fmt.Errorf("image %s: this agent has no image store", ref)
	}
	img, err := l.images.Acquire(ctx, ref, containerID)
	if err != nil {
		return nil, err // names the image
	}
	return &containerizer.Image{
		Reference: img.Reference, Digest: img.Digest, LayerDirs: img.LayerDirs,
		Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, Env: img.Config.Env,
		WorkingDir: img.Config.WorkingDir, User: img.Config.User,
	}, nil
}

// releaseImage ends a container's lease on its image's layers.
func (l *lifecycle) releaseImage(containerID string) {
	if l.images == nil {
		return
	}
	if err := l.images.Release(containerID); err != nil {
		l.log.Warn("release image", "container", containerID, "err", err)
	}
}

// taskExit maps the containerizer's account of an exit to the machine's.
func taskExit(ex containerizer.Exit) tasks.Exit {
	return tasks.Exit{ExitCode: ex.ExitCode, OOMKilled: ex.OOMKilled, Killed: ex.Killed, Lost: ex.Lost, Message: ex.Message}
}

// ms is d in milliseconds, to the microsecond, for logs.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
