package containerizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"

	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

// Exec's bounds and conventions (the helper's, in package supervisor).
const (
	execOutputLimit = supervisor.ExecOutputLimit
	execSetupFailed = supervisor.ExecSetupFailed
	execTimedOut    = supervisor.ExecTimedOut
)

// Exec runs cmd inside a running container, as its task runs: in the
// task's namespaces (mount, PID, IPC, network, UTS and cgroup, as far as
// they differ from the agent's), in its cgroups (so it counts against its
// limits), as its user, in its working directory, with its environment
// plus cmd.Environment, under no_new_privs and the task's seccomp filter.
// It returns the command's exit code (128+n for signal n) and up to 4 KiB
// of its output; an error when the command could not run (container
// unknown or ended, executable not found) or ctx ended first; ErrFrozen
// at once when the container's cgroup or an ancestor is frozen (the QoS
// freezer pauses the revocable subtree), since a helper born there would
// freeze before it ran. Exec never waits past ctx for the helper's start.
//
// Exec starts the supervisor binary ("supervise enter <state-dir>"): a
// fresh single-purpose process joins the cgroups, enters the namespaces
// through a pidfd of the task's main process on one locked thread (the
// agent's threads are never moved), and forks the command from there. A
// command still running when ctx's deadline passes is killed with its
// session.
func (c *Containerizer) Exec(ctx context.Context, id string, cmd *slacklinev1.CommandInfo) (int, string, error) {
	ct, err := c.lookup(id)
	if err != nil {
		return 0, "", err
	}
	c.mu.Lock()
	task, dir, ended := ct.cp.Task, ct.dir, ct.exit != nil
	c.mu.Unlock()
	if ended || task == nil {
		return 0, "", fmt.Errorf("%w: container %q is not running", ErrNotFound, id)
	}
	timeout := time.Minute
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	req, err := json.Marshal(enterRequest{Task: *task, Shell: cmd.GetShell(), Value: cmd.GetValue(),
		Arguments: cmd.GetArguments(), Environment: cmd.GetEnvironment(), Timeout: timeout})
	if err != nil {
		return 0, "", err
	}
	argv := c.cfg.SupervisorCommand
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = execOutputLimit, execOutputLimit
	// Born in the task's cgroups (v2 where the kernel can, v1 of hybrid
	// hosts from a thread that joined them), so that the helper joins
	// none itself: a process's move (a write to cgroup.procs, "0"
	// included) waits for an RCU grace period holding cgroup_mutex, which
	// every COMMAND health check would make each launch's cgroup writes
	// queue behind. supervisor.BornInEnv tells it its v1 cgroups.
	cg := supervisorCgroup(ct.cp.Cgroup)
	v1 := v1ProcsFiles(cg)
	newHelper := func(bornIn bool) func() *exec.Cmd {
		return func() *exec.Cmd {
			helper := exec.Command(argv[0], append(append([]string{}, argv[1:]...), "enter", dir)...)
			helper.Stdin = bytes.NewReader(req)
			helper.Stdout, helper.Stderr = &stdout, &stderr
			helper.SysProcAttr = &syscall.SysProcAttr{}
			if bornIn && len(v1) > 0 {
				helper.Env = append(os.Environ(), supervisor.BornInEnv+"="+strings.Join(v1, "\n"))
			}
			return helper
		}
	}
	// A child born in a frozen cgroup freezes before it execs, and its
	// start (clone3 with CLONE_VFORK) returns only once it is thawed: a
	// task paused by the QoS freezer gets no check until it is thawed.
	if ct.stuckStarts.Load() > 0 {
		return 0, "", fmt.Errorf("%w: exec in container %s: an earlier exec helper's start is still blocked", ErrFrozen, id)
	}
	if frozen := frozenCgroup(cg.Unified, cg.UnifiedMount); frozen != "" {
		return 0, "", fmt.Errorf("%w: exec in container %s: cgroup %s is frozen", ErrFrozen, id, frozen)
	}
	helper, err := startWithin(ctx, &ct.stuckStarts, func() (*exec.Cmd, error) {
		helper, _, err := supervisor.StartInCgroups(newHelper(true), cg)
		var jerr *supervisor.JoinError
		if errors.As(err, &jerr) { // it joins them itself
			helper, _, err = supervisor.StartInCgroup(newHelper(false), cg.Unified)
		}
		return helper, err
	})
	if err != nil {
		return 0, "", fmt.Errorf("exec in container %s: start exec helper: %w", id, err)
	}
	// The helper kills the command at the deadline and exits; this is the
	// backstop should it not.
	var backstopped atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(time.Second, func() { backstopped.Store(true); _ = helper.Process.Kill() })
	})
	err = helper.Wait()
	stop()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), nil
	case backstopped.Load() && ctx.Err() != nil:
		// Past the deadline either way: a helper too slow to report its
		// own timeout (an emulated guest's, starting beside busy CPUs) is
		// the caller's deadline all the same, not a helper failure.
		return 0, stdout.String(), fmt.Errorf("exec in container %s: %w (the exec helper did not stop by itself within 1 s: killed)", id, ctx.Err())
	case errors.As(err, &exit) && exit.ExitCode() == execSetupFailed:
		return 0, "", fmt.Errorf("exec in container %s: %s", id, strings.TrimSpace(stderr.String()))
	case errors.As(err, &exit) && exit.ExitCode() == execTimedOut && ctx.Err() != nil:
		return 0, stdout.String(), fmt.Errorf("exec in container %s: %w", id, ctx.Err())
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), stdout.String(), nil
	}
	return 0, "", fmt.Errorf("exec helper: %w", err)
}

// DialTask connects to a TCP port of a running container's task on its
// own loopback address: 127.0.0.1 of the host when the task shares the
// agent's network namespace (tasks have none of their own today), else
// 127.0.0.1 inside its network namespace, dialled from a thread that
// entered it (and dies afterwards). Nothing else can be reached through
// it.
func (c *Containerizer) DialTask(ctx context.Context, id string, port uint16) (net.Conn, error) {
	ct, err := c.lookup(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	task := ct.cp.Task
	c.mu.Unlock()
	if task == nil {
		return nil, fmt.Errorf("%w: container %q has no task", ErrNotFound, id)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	var d net.Dialer
	same, err := supervisor.SameNamespace(task.Pid, "net")
	if err != nil {
		return nil, err
	}
	if same {
		return d.DialContext(ctx, "tcp", addr)
	}
	return dialInNamespace(ctx, task, addr)
}

// dialInNamespace dials addr from the network namespace of process ref,
// on a thread that enters it and ends afterwards.
func dialInNamespace(ctx context.Context, ref *procRef, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, moved to the task's network
		// namespace, ends with this goroutine instead of serving others.
		runtime.LockOSThread()
		pidfd, err := unix.PidfdOpen(ref.Pid, 0)
		if err != nil {
			done <- result{nil, fmt.Errorf("open process %d: %w", ref.Pid, err)}
			return
		}
		defer unix.Close(pidfd)
		if !alive("/proc", ref) {
			done <- result{nil, fmt.Errorf("%w: process %d ended", ErrNotFound, ref.Pid)}
			return
		}
		if err := unix.Setns(pidfd, unix.CLONE_NEWNET); err != nil {
			done <- result{nil, fmt.Errorf("enter the network namespace of process %d: %w", ref.Pid, err)}
			return
		}
		// The socket belongs to the namespace it is created in: this one.
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// Frozen reports whether container id's cgroup or one of its ancestors
// is frozen (the QoS freezer pauses the revocable subtree): its task
// cannot answer a health check until it is thawed, so the health checks
// skip it instead of failing it. An unknown or ended container, or a
// cgroup that cannot be read, is not frozen.
func (c *Containerizer) Frozen(id string) bool {
	ct, err := c.lookup(id)
	if err != nil {
		return false
	}
	if ct.stuckStarts.Load() > 0 {
		return true
	}
	cg := supervisorCgroup(ct.cp.Cgroup)
	return frozenCgroup(cg.Unified, cg.UnifiedMount) != ""
}

// ErrFrozen is Exec's error for a container whose cgroup (or one of its
// ancestors) is frozen, as the QoS freezer pauses the revocable subtree:
// nothing ran, and nothing can run in it until it is thawed.
var ErrFrozen = errors.New("container frozen")

// frozenCgroup returns the first of the v2 cgroup dir and its ancestors up
// to (not including) mount asked to freeze (cgroup.freeze 1), or "". A
// cgroup that cannot be read counts as not frozen: the start then finds
// out, within its deadline (startWithin).
func frozenCgroup(dir, mount string) string {
	if dir == "" || mount == "" {
		return ""
	}
	mount = filepath.Clean(mount)
	for d := filepath.Clean(dir); d != mount && strings.HasPrefix(d, mount+"/"); d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.freeze"))
		if err == nil && strings.TrimSpace(string(data)) == "1" {
			return d
		}
	}
	return ""
}

// startWithin runs start (which starts a process) and returns what it
// returns, or ctx's error as soon as ctx ends first: a process started in
// a cgroup frozen meanwhile does not return from its start until thawed.
// Such a start goes on by itself, counted in stuck until it returns; the
// process it eventually starts is killed and reaped.
func startWithin(ctx context.Context, stuck *atomic.Int32, start func() (*exec.Cmd, error)) (*exec.Cmd, error) {
	type started struct {
		cmd *exec.Cmd
		err error
	}
	done := make(chan started, 1)
	go func() {
		cmd, err := start()
		done <- started{cmd, err}
	}()
	select {
	case s := <-done:
		return s.cmd, s.err
	case <-ctx.Done():
	}
	stuck.Add(1)
	go func() {
		s := <-done
		stuck.Add(-1)
		if s.err == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	}()
	return nil, fmt.Errorf("%w (the start did not return: a cgroup frozen?)", ctx.Err())
}

// limitedBuffer keeps the first limit bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
