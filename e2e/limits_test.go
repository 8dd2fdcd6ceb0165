package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slackline/slackline/agent"
	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// TestTaskLimits runs a real coordinator and a real agent with real
// cgroups, and tasks that reach the agent's bounds: a task filling its disk
// allowance is killed with the disk reason; the sandbox of a finished task
// is collected after the GC delay and a running task's never, however old;
// a fork bomb stops at pids.max and the agent goes on running tasks.
func TestTaskLimits(t *testing.T) {
	privileged.Require(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	coord, err := coordinator.New(coordinator.Config{WorkDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go coord.Run(ctx)
	go server.Serve(ctx, server.Config{Listener: ln, Logger: quiet}, coord.Handler())

	root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-limits-%d", os.Getpid()))
	const gcDelay = 2 * time.Second
	opts := testAgentOptions(t, root, "http://"+ln.Addr().String(), quiet)
	opts.Hostname, opts.Resources, opts.TaskPidsMax = "limits", "cpus:4;mem:2048;disk:4096", 32
	opts.Sandbox = agent.SandboxConfig{GCDelay: gcDelay, CheckInterval: 100 * time.Millisecond, DiskWatermark: 1}
	a, err := opts.Build()
	if err != nil {
		t.Fatal(err)
	}
	workDir, cz := opts.WorkDir, a.Containerizer().(*containerizer.Containerizer)
	defer a.Close()
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(ctx) }()
	defer func() { cancel(); <-agentDone }()

	// Each task writes its name to "whoami" in its sandbox, so the test
	// finds the sandboxes.
	tasks := map[string]string{
		"disk-hog":    "echo disk-hog > whoami; dd if=/dev/zero of=fill bs=1M count=16 2>/dev/null; sleep 600",
		"finished":    "echo finished > whoami",
		"long-runner": "echo long-runner > whoami; exec sleep 600",
		"fork-bomb":   "echo fork-bomb > whoami; i=0; while [ $i -lt 200 ]; do sleep 600 & i=$((i+1)); done; sleep 600",
	}
	var mu sync.Mutex
	final := map[string]*slacklinev1.TaskStatus{}
	running := map[string]bool{}
	changed := make(chan struct{}, 100)
	pending := []string{"disk-hog", "finished", "long-runner", "fork-bomb"}
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + ln.Addr().String(), Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "limits"}})
	if err != nil {
		t.Fatal(err)
	}
	launch := func(ctx context.Context, c *frameworkapi.Client, o *slacklinev1.Offer, name, needs string) {
		task := frameworkapi.NewTask(name, name, o, resources.MustParse(needs), &slacklinev1.CommandInfo{Value: tasks[name], Shell: true})
		if err := c.Launch(ctx, []string{o.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(0)); err != nil {
			t.Errorf("launch %s: %v", name, err)
		}
	}
	go fw.Run(ctx, frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			for _, o := range offers {
				mu.Lock()
				var name string
				if len(pending) > 0 {
					name, pending = pending[0], pending[1:]
				}
				mu.Unlock()
				switch name {
				case "":
					_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(1))
				case "disk-hog":
					launch(ctx, c, o, name, "cpus:0.1;mem:64;disk:4")
				default:
					launch(ctx, c, o, name, "cpus:0.1;mem:64")
				}
			}
		},
		UpdateFunc: func(_ context.Context, _ *frameworkapi.Client, st *slacklinev1.TaskStatus) {
			mu.Lock()
			if st.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				running[st.GetTaskId()] = true
			} else if st.GetState() != slacklinev1.TaskState_TASK_STATE_STARTING {
				final[st.GetTaskId()] = st
			}
			mu.Unlock()
			changed <- struct{}{}
		},
	})
	// sandboxes maps each task's name to its sandbox.
	sandboxes := func() map[string]string {
		out := map[string]string{}
		entries, _ := os.ReadDir(filepath.Join(workDir, "sandboxes"))
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(workDir, "sandboxes", e.Name(), "whoami"))
			out[strings.TrimSpace(string(b))] = filepath.Join(workDir, "sandboxes", e.Name())
		}
		return out
	}
	// containers says what the agent runs, for a failure's diagnosis.
	containers := func() string {
		var b strings.Builder
		for _, c := range cz.Containers() {
			fmt.Fprintf(&b, "\n  %s (task %s) started %s", c.ID, c.Spec.TaskID, c.StartedAt.Format("15:04:05.000"))
			if c.Exit != nil {
				fmt.Fprintf(&b, ", ended %+v", *c.Exit)
			}
		}
		return b.String()
	}
	// wait waits for the framework's updates (or, for sandboxes, the file
	// system) to satisfy cond. The bound only ends a hung run: each step
	// takes a second or two, beside CPU hogs too (cgrouptest.EnterPriority).
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(3 * time.Minute)
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-changed:
			case <-time.After(100 * time.Millisecond):
			case <-deadline:
				mu.Lock()
				seen := fmt.Sprintf("running %v, ended %v", running, final)
				mu.Unlock()
				t.Fatalf("timed out waiting for %s (%s; sandboxes %v); the agent's containers:%s", what, seen, sandboxes(), containers())
			}
		}
	}

	// The disk hog fails for its disk.
	wait("the disk hog to end", func() bool { return final["disk-hog"] != nil })
	if st := final["disk-hog"]; st.GetState() != slacklinev1.TaskState_TASK_STATE_FAILED ||
		st.GetReason() != slacklinev1.Reason_REASON_CONTAINER_LIMITATION_DISK {
		t.Errorf("disk hog ended %v (%v: %s), want FAILED with REASON_CONTAINER_LIMITATION_DISK", st.GetState(), st.GetReason(), st.GetMessage())
	}

	// Sandboxes: the finished task's goes after the delay; the long
	// runner's stays however old it looks.
	wait("the others to run or end", func() bool {
		return final["finished"] != nil && running["long-runner"] && running["fork-bomb"]
	})
	long := sandboxes()["long-runner"]
	if long == "" {
		t.Fatalf("no sandbox for the long runner: %v", sandboxes())
	}
	old := time.Now().Add(-24 * time.Hour)
	for _, p := range []string{long, filepath.Join(long, "stdout"), filepath.Join(long, "stderr")} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	wait("the finished task's sandbox to go", func() bool { _, ok := sandboxes()["finished"]; return !ok })
	if _, ok := sandboxes()["long-runner"]; !ok {
		t.Error("the running task's sandbox was collected")
	}

	// The fork bomb stayed within pids.max, and the agent still runs tasks.
	for _, c := range cz.Containers() {
		if c.Spec.TaskID != "fork-bomb" {
			continue
		}
		procs, err := os.ReadFile(filepath.Join(cz.Layout().Unified, c.CgroupPath, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(procs), "\n"); n > 32 {
			t.Errorf("the fork bomb has %d processes, pids.max 32", n)
		}
	}
	mu.Lock()
	tasks["after-bomb"] = "exit 0"
	pending = append(pending, "after-bomb")
	mu.Unlock()
	if err := fw.Revive(ctx); err != nil {
		t.Fatal(err)
	}
	wait("a task launched after the bomb to finish", func() bool {
		return final["after-bomb"].GetState() == slacklinev1.TaskState_TASK_STATE_FINISHED
	})
}
