package e2e

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/internal/taskstate"
	"github.com/slackline/slackline/resources"
)

// confinedScript exits 0 only when it runs as a user other than root, with
// no_new_privs, and cannot move itself to the root cgroup of any hierarchy
// (pure v2, or hybrid's v2 tree and v1 cpu and memory); when it is pid 1's
// child and /proc shows only its init and itself; when it cannot create a
// user namespace; and when its /tmp and /dev/shm are its own (empty, but
// for the path to its sandbox when that is under /tmp).
const confinedScript = `test "$(id -u)" != 0 || exit 2
grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status || exit 3
for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cpu/cgroup.procs /sys/fs/cgroup/memory/cgroup.procs; do
  if [ -e $f ] && echo $$ > $f; then echo "moved to $f"; exit 4; fi
done
test "$PPID" = 1 || exit 5
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; test $n = 2 || exit 6
if unshare -Ur true; then exit 7; fi
test -z "$(ls -A /dev/shm)" || exit 8
for e in /tmp/* /tmp/.[!.]*; do [ -e "$e" ] || continue; case "$HOME/" in "$e"/*) ;; *) exit 9;; esac; done`

// TestTaskUsers runs tasks on real agents as the default user, as root and
// as an unknown user: the default user's task is confined; root is refused
// by an agent without --allow-root-tasks and runs on one with it; an
// unknown user is refused. Refusals are TASK_STATE_FAILED with
// REASON_TASK_INVALID.
func TestTaskUsers(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	startAgent(t, addr, "users-plain", "cpus:2;mem:1024")
	startAgent(t, addr, "users-root", "cpus:2;mem:1024", "--allow-root-tasks")
	waitAgentsActive(t, addr, 2)

	type launch struct{ id, user, command string }
	plan := map[string][]launch{
		"users-plain": {
			{"confined", "", confinedScript},
			{"root-refused", "root", "true"},
			{"unknown-user", "no-such-user-e2e", "true"},
		},
		"users-root": {
			{"root-allowed", "root", `test "$(id -u)" = 0`},
		},
	}
	want := map[string]struct {
		state   slacklinev1.TaskState
		reason  slacklinev1.Reason
		message string
	}{
		"confined":     {slacklinev1.TaskState_TASK_STATE_FINISHED, slacklinev1.Reason_REASON_UNSPECIFIED, ""},
		"root-refused": {slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_TASK_INVALID, "--allow-root-tasks"},
		"unknown-user": {slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_TASK_INVALID, `"no-such-user-e2e" does not exist`},
		"root-allowed": {slacklinev1.TaskState_TASK_STATE_FINISHED, slacklinev1.Reason_REASON_UNSPECIFIED, ""},
	}

	var mu sync.Mutex
	final := map[string]*slacklinev1.TaskStatus{}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + addr,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Framework: &slacklinev1.FrameworkInfo{Name: "users"}})
	if err != nil {
		t.Fatal(err)
	}
	go fw.Run(ctx, frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			for _, o := range offers {
				mu.Lock()
				launches := plan[o.GetHostname()]
				delete(plan, o.GetHostname())
				mu.Unlock()
				if len(launches) == 0 {
					_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(3600))
					continue
				}
				var infos []*slacklinev1.TaskInfo
				for _, l := range launches {
					task := frameworkapi.NewTask(l.id, l.id, o, resources.MustParse("cpus:0.1;mem:32"),
						&slacklinev1.CommandInfo{Value: l.command, Shell: true})
					task.User = l.user
					infos = append(infos, task)
				}
				if err := c.Launch(ctx, []string{o.GetId()}, infos, nil); err != nil {
					t.Errorf("launch on %s: %v", o.GetHostname(), err)
				}
			}
		},
		UpdateFunc: func(_ context.Context, _ *frameworkapi.Client, st *slacklinev1.TaskStatus) {
			if !taskstate.IsTerminal(st.GetState()) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			final[st.GetTaskId()] = st
			if len(final) == len(want) {
				close(done)
			}
		},
	})
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		mu.Lock()
		t.Fatalf("tasks ended within 60 s: %v", final)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, w := range want {
		st := final[id]
		if st.GetState() != w.state || st.GetReason() != w.reason || !strings.Contains(st.GetMessage(), w.message) {
			t.Errorf("task %s: %v %v %q; want %v %v with %q", id, st.GetState(), st.GetReason(), st.GetMessage(), w.state, w.reason, w.message)
		}
	}
}
