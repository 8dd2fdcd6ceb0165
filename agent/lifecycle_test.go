package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/fetcher"
	"github.com/slackline/slackline/agent/images"
	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/kv"
)

// fakeContainerizer starts pretend containers; Kill ends them at once.
type fakeContainerizer struct {
	mu         sync.Mutex
	containers map[string]*containerizer.Container
	exits      chan containerizer.Exit
	// refuse, when set, fails the launches it returns an error for.
	refuse func(containerizer.Spec) error
}

func newFakeContainerizer() *fakeContainerizer {
	return &fakeContainerizer{containers: map[string]*containerizer.Container{}, exits: make(chan containerizer.Exit, 16)}
}

func (f *fakeContainerizer) Launch(_ context.Context, spec containerizer.Spec) (*containerizer.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		if err := f.refuse(spec); err != nil {
			return nil, err
		}
	}
	c := &containerizer.Container{ID: spec.ContainerID, Spec: spec, CgroupPath: "fake/" + spec.ContainerID, Sandbox: "/sandbox/" + spec.TaskID, Pid: 42}
	f.containers[c.ID] = c
	return c, nil
}

func (f *fakeContainerizer) Kill(_ context.Context, id string) error {
	f.exits <- containerizer.Exit{ContainerID: id, ExitCode: -1, Killed: true, Message: "killed"}
	return nil
}

func (f *fakeContainerizer) Destroy(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, id)
	return nil
}

func (f *fakeContainerizer) Exits() <-chan containerizer.Exit { return f.exits }
func (f *fakeContainerizer) Recover(context.Context) ([]*containerizer.Container, error) {
	return nil, nil
}
func (f *fakeContainerizer) Containers() []*containerizer.Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*containerizer.Container
	for _, c := range f.containers {
		out = append(out, c)
	}
	return out
}
func (f *fakeContainerizer) Mode() containerizer.Mode                          { return containerizer.Mode("fake") }
func (f *fakeContainerizer) SetRevocableCPULimit(float64, time.Duration) error { return nil }
func (f *fakeContainerizer) RevocableCPULimit() (float64, error)               { return 0, nil }
func (f *fakeContainerizer) SetRevocableCPUs([]int) error                      { return containerizer.ErrUnsupported }
func (f *fakeContainerizer) RevocableCPUs() ([]int, error)                     { return nil, containerizer.ErrUnsupported }
func (f *fakeContainerizer) CPUs() []int                                       { return []int{0} }

// gatedStore holds every checkpoint write until the test opens the gate.
type gatedStore struct {
	kv.Store
	gate chan struct{}
}

func (g gatedStore) Apply(ctx context.Context, m ...kv.Mutation) error {
	<-g.gate
	return g.Store.Apply(ctx, m...)
}

type sent struct {
	frameworkID string
	status      *slacklinev1.TaskStatus
	// durable reports whether the update was in the checkpoint when it
	// was handed to the session.
	durable bool
	// sandbox is the task's sandbox record in the checkpoint then.
	sandbox string
}

func newTestLifecycle(t *testing.T, store kv.Store, cz Containerizer, sends chan<- sent) *lifecycle {
	ckpt := &checkpoint{kv: store}
	l := &lifecycle{
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), cz: cz, ckpt: ckpt,
		agentID: func() string { return "agent-1" }, containersChanged: func() {}, now: time.Now,
		machine: tasks.New(tasks.Config{}), wake: make(chan struct{}, 1),
	}
	l.send = func(frameworkID string, st *slacklinev1.TaskStatus) {
		updates, err := ckpt.updates(context.Background())
		if err != nil {
			t.Error(err)
		}
		durable := false
		for _, u := range updates {
			durable = durable || u.GetStatus().GetUuid() == st.GetUuid()
		}
		sandbox, _, err := ckpt.sandbox(context.Background(), frameworkID, st.GetTaskId())
		if err != nil {
			t.Error(err)
		}
		sends <- sent{frameworkID, st, durable, sandbox}
	}
	return l
}

func runTaskCommand(taskID string) *slacklinev1.RunTaskCommand {
	return &slacklinev1.RunTaskCommand{
		Framework: &slacklinev1.FrameworkInfo{Id: "fw"},
		Task: &slacklinev1.TaskInfo{TaskId: taskID, Resources: []*slacklinev1.Resource{{Name: "cpus", Scalar: 1}},
			Command: &slacklinev1.CommandInfo{Value: "true", Shell: true}},
	}
}

// TestLifecycleOrdersCheckpointBeforeSend drives the executor through a
// task's life: every update reaches the session only once it is in the
// checkpoint, and a restart recovers exactly what is unacknowledged.
func TestLifecycleOrdersCheckpointBeforeSend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.db")
	store, err := kv.OpenBolt(path, kv.BoltOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sends := make(chan sent, 16)
	cz := newFakeContainerizer()
	l := newTestLifecycle(t, store, cz, sends)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()

	next := func(want slacklinev1.TaskState) sent {
		t.Helper()
		s := <-sends
		if s.status.GetState() != want || !s.durable {
			t.Fatalf("sent %v (durable %v), want %v durable", s.status.GetState(), s.durable, want)
		}
		return s
	}
	key := tasks.Key{FrameworkID: "fw", TaskID: "t1"}
	l.step(tasks.SessionOpened{Now: time.Now()})
	l.step(tasks.Launch{Command: runTaskCommand("t1"), Now: time.Now()})
	running := next(slacklinev1.TaskState_TASK_STATE_RUNNING)
	if got := running.status.GetMessage(); got != "running in fake/"+cz.Containers()[0].ID+" (pid 42)" {
		t.Fatalf("RUNNING message %q", got)
	}
	// The sandbox's record is durable with the update that reveals the task.
	if running.sandbox != "/sandbox/t1" {
		t.Fatalf("sandbox record %q when RUNNING was sent, want /sandbox/t1", running.sandbox)
	}
	l.step(tasks.Kill{Key: key, Now: time.Now()})
	// KILLED is queued behind RUNNING until RUNNING is acknowledged.
	l.step(tasks.Acknowledge{Key: key, UUID: running.status.GetUuid(), Now: time.Now()})
	next(slacklinev1.TaskState_TASK_STATE_KILLED)
	if len(cz.Containers()) != 0 {
		t.Fatal("the killed container was not destroyed")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	// After a restart, KILLED is still owed and nothing else.
	store, err = kv.OpenBolt(path, kv.BoltOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ckpt := &checkpoint{kv: store}
	recs, _ := ckpt.tasks(context.Background())
	updates, _ := ckpt.updates(context.Background())
	m, eff := tasks.Recover(tasks.Config{}, tasks.Recovery{Tasks: recs, Updates: updates, Now: time.Now()})
	if !eff.IsZero() {
		t.Fatalf("recovering an ended task owing one update has effects: %+v", eff)
	}
	if v, ok := m.Task(key); !ok || v.State != slacklinev1.TaskState_TASK_STATE_KILLED || v.Unacknowledged != 1 {
		t.Fatalf("recovered %+v %v", v, ok)
	}
}

// TestSlowCheckpointDoesNotStallTheNode holds every checkpoint write (a
// disk that does not answer) and checks that events are still accepted and
// the task table still answers, while nothing is started or sent before
// the write is durable.
func TestSlowCheckpointDoesNotStallTheNode(t *testing.T) {
	store, err := kv.OpenBolt(filepath.Join(t.TempDir(), "checkpoint.db"), kv.BoltOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	gate := make(chan struct{})
	sends := make(chan sent, 16)
	cz := newFakeContainerizer()
	l := newTestLifecycle(t, gatedStore{store, gate}, cz, sends)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()

	l.step(tasks.SessionOpened{Now: time.Now()})
	for _, id := range []string{"t1", "t2", "t3"} {
		l.step(tasks.Launch{Command: runTaskCommand(id), Now: time.Now()}) // returns while the write hangs
	}
	var n int
	l.read(func(m *tasks.Machine) { n = m.Len() })
	if n != 3 {
		t.Fatalf("machine has %d tasks, want 3", n)
	}
	if len(cz.Containers()) != 0 {
		t.Fatal("a container started before its task was checkpointed")
	}
	close(gate)
	for range 3 {
		if s := <-sends; s.status.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING || !s.durable {
			t.Fatalf("sent %v durable=%v", s.status.GetState(), s.durable)
		}
	}
	cancel()
	<-done
}

// TestLifecycleTaskUser: the container runs as the task's user, else its
// framework's, else the containerizer's default (empty); a user the
// containerizer refuses fails the task as invalid, not as a node failure.
func TestLifecycleTaskUser(t *testing.T) {
	for _, tt := range []struct {
		name, taskUser, frameworkUser, wantUser string
	}{
		{"task's", "alice", "bob", "alice"},
		{"framework's", "", "bob", "bob"},
		{"default", "", "", ""},
		{"refused", "root", "", "root"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := kv.OpenBolt(filepath.Join(t.TempDir(), "checkpoint.db"), kv.BoltOptions{LockTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			sends := make(chan sent, 16)
			cz := newFakeContainerizer()
			var launched []string
			cz.refuse = func(spec containerizer.Spec) error {
				launched = append(launched, spec.User)
				if spec.User == "root" {
					return fmt.Errorf("%w: user %q is root", containerizer.ErrTaskUser, spec.User)
				}
				return nil
			}
			l := newTestLifecycle(t, store, cz, sends)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- l.Run(ctx) }()
			defer func() { cancel(); <-done }()

			cmd := runTaskCommand("t1")
			cmd.Task.User, cmd.Framework.User = tt.taskUser, tt.frameworkUser
			l.step(tasks.SessionOpened{Now: time.Now()})
			l.step(tasks.Launch{Command: cmd, Now: time.Now()})
			st := (<-sends).status
			cz.mu.Lock()
			defer cz.mu.Unlock()
			if len(launched) != 1 || launched[0] != tt.wantUser {
				t.Errorf("launched as %q, want %q", launched, tt.wantUser)
			}
			wantState, wantReason := slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.Reason_REASON_UNSPECIFIED
			if tt.wantUser == "root" {
				wantState, wantReason = slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_TASK_INVALID
			}
			if st.GetState() != wantState || st.GetReason() != wantReason {
				t.Errorf("update %v %v %q, want %v %v", st.GetState(), st.GetReason(), st.GetMessage(), wantState, wantReason)
			}
		})
	}
}

// TestLaunchFailure: a failed fetch is REASON_FETCH_FAILED with a message
// that starts with the URL; a refused user is the task's fault; anything
// else is a launch failure.
func TestLaunchFailure(t *testing.T) {
	t.Parallel()
	fetchErr := fmt.Errorf("launch container c1: %w", &fetcher.Error{URL: "https://example.com/app.tgz", Err: fetcher.ErrChecksum})
	tests := []struct {
		err     error
		reason  slacklinev1.Reason
		message string
	}{
		{fetchErr, slacklinev1.Reason_REASON_FETCH_FAILED, "fetch https://example.com/app.tgz: sha256 mismatch"},
		{fmt.Errorf("x: %w", containerizer.ErrTaskUser), slacklinev1.Reason_REASON_TASK_INVALID, "launch: x: "},
		{errors.New("exec format error"), slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED, "launch: exec format error"},
	}
	for _, tt := range tests {
		reason, message := launchFailure(tt.err)
		if reason != tt.reason || !strings.HasPrefix(message, tt.message) {
			t.Errorf("launchFailure(%v) = %v %q, want %v %q...", tt.err, reason, message, tt.reason, tt.message)
		}
	}
}

// fakeImages hands out images from a map and records leases.
type fakeImages struct {
	mu       sync.Mutex
	images   map[string]*images.Image
	leases   map[string]string // holder -> reference
	released chan string
}

func (f *fakeImages) Acquire(_ context.Context, ref, holder string) (*images.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img, ok := f.images[ref]
	if !ok {
		return nil, fmt.Errorf("%w: docker://%s: not_found: MANIFEST_UNKNOWN", images.ErrPull, ref)
	}
	f.leases[holder] = ref
	return img, nil
}

func (f *fakeImages) Release(holder string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.leases[holder]; ok {
		f.released <- holder
		delete(f.leases, holder)
	}
	return nil
}

// TestLifecycleImage: a task's image reaches the containerizer with its
// config, leased to the container until the container is destroyed; a
// pull that fails fails the task with REASON_IMAGE_PULL_FAILED naming the
// image, without a launch.
func TestLifecycleImage(t *testing.T) {
	store, err := kv.OpenBolt(filepath.Join(t.TempDir(), "checkpoint.db"), kv.BoltOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sends := make(chan sent, 16)
	cz := newFakeContainerizer()
	var launched []*containerizer.Image
	cz.refuse = func(spec containerizer.Spec) error { launched = append(launched, spec.Image); return nil }
	l := newTestLifecycle(t, store, cz, sends)
	imgs := &fakeImages{leases: map[string]string{}, released: make(chan string, 4), images: map[string]*images.Image{
		"registry:5000/app:v1": {Reference: "docker://registry:5000/app:v1", Digest: "sha256:1", LayerDirs: []string{"/l/1", "/l/2"},
			Config: images.ImageConfig{Entrypoint: []string{"/app"}, WorkingDir: "/srv"}},
	}}
	l.images = imgs
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	l.step(tasks.SessionOpened{Now: time.Now()})

	good := runTaskCommand("good")
	good.Task.Image = "registry:5000/app:v1"
	l.step(tasks.Launch{Command: good, Now: time.Now()})
	if st := (<-sends).status; st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("good: %v %q", st.GetState(), st.GetMessage())
	}
	bad := runTaskCommand("bad")
	bad.Task.Image = "registry:5000/gone:v1"
	l.step(tasks.Launch{Command: bad, Now: time.Now()})
	st := (<-sends).status
	if st.GetState() != slacklinev1.TaskState_TASK_STATE_FAILED || st.GetReason() != slacklinev1.Reason_REASON_IMAGE_PULL_FAILED ||
		!strings.Contains(st.GetMessage(), "registry:5000/gone:v1") {
		t.Errorf("bad: %v %v %q; want FAILED, REASON_IMAGE_PULL_FAILED naming the image", st.GetState(), st.GetReason(), st.GetMessage())
	}
	cz.mu.Lock()
	if len(launched) != 1 || launched[0] == nil || launched[0].WorkingDir != "/srv" || len(launched[0].LayerDirs) != 2 {
		t.Errorf("launched images %+v, want only good's, with its config", launched)
	}
	var id string
	for cid := range cz.containers {
		id = cid
	}
	cz.mu.Unlock()
	imgs.mu.Lock()
	if imgs.leases[id] != "registry:5000/app:v1" {
		t.Errorf("leases %v, want good's container %s to hold its image", imgs.leases, id)
	}
	imgs.mu.Unlock()
	// The container ends and is acknowledged: destroyed, its lease released.
	cz.exits <- containerizer.Exit{ContainerID: id, ExitCode: 0, Message: "exited with code 0"}
	fin := (<-sends).status
	l.step(tasks.Acknowledge{Key: tasks.Key{FrameworkID: "fw", TaskID: "good"}, UUID: fin.GetUuid(), Now: time.Now()})
	select {
	case holder := <-imgs.released:
		if holder != id {
			t.Errorf("released %s, want %s", holder, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the destroyed container's image lease was not released")
	}
}

// gatedImages hands out one image, after the test opens the gate; entered
// says a pull has begun.
type gatedImages struct {
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedImages) Acquire(ctx context.Context, ref, _ string) (*images.Image, error) {
	g.entered <- struct{}{}
	<-g.gate
	return &images.Image{Reference: "docker://" + ref, Digest: "sha256:1", LayerDirs: []string{"/l/1"}}, nil
}

func (g *gatedImages) Release(string) error { return nil }

// TestKillBeforeTheFetchStartsCancelsIt: a kill that arrives while a task
// is still being prepared (its image being pulled, before its artifact
// fetch began) cancels the fetch before any download starts: the task ends
// KILLED with REASON_TASK_KILLED_DURING_LAUNCH at once, and the artifact's
// server sees no request (before the fix the download ran until its
// timeout).
func TestKillBeforeTheFetchStartsCancelsIt(t *testing.T) {
	t.Parallel()
	store, err := kv.OpenBolt(filepath.Join(t.TempDir(), "checkpoint.db"), kv.BoltOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	sends := make(chan sent, 16)
	cz := newFakeContainerizer()
	sandbox := t.TempDir()
	cz.refuse = func(spec containerizer.Spec) error {
		if spec.Fetch == nil {
			return errors.New("no fetch")
		}
		return spec.Fetch(context.Background(), sandbox, os.Getuid(), os.Getgid())
	}
	l := newTestLifecycle(t, store, cz, sends)
	if l.fetch, err = fetcher.New(fetcher.Config{CacheDir: t.TempDir(), Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	imgs := &gatedImages{entered: make(chan struct{}), gate: make(chan struct{})}
	l.images = imgs
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	l.step(tasks.SessionOpened{Now: time.Now()})

	cmd := runTaskCommand("t")
	cmd.Task.Image = "registry:5000/app:v1"
	cmd.Task.Command.Uris = []*slacklinev1.CommandInfo_URI{{Value: srv.URL + "/app.tgz"}}
	l.step(tasks.Launch{Command: cmd, Now: time.Now()})
	<-imgs.entered // the launch is pulling its image, its fetch not begun
	l.step(tasks.Kill{Key: tasks.Key{FrameworkID: "fw", TaskID: "t"}, Now: time.Now()})
	close(imgs.gate)
	st := (<-sends).status
	if st.GetState() != slacklinev1.TaskState_TASK_STATE_KILLED || st.GetReason() != slacklinev1.Reason_REASON_TASK_KILLED_DURING_LAUNCH {
		t.Errorf("%v %v %q; want KILLED, REASON_TASK_KILLED_DURING_LAUNCH", st.GetState(), st.GetReason(), st.GetMessage())
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the artifact server got %d requests after the kill, want none", n)
	}
}
