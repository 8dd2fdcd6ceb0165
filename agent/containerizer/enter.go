package containerizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
)

// Exec's bounds and conventions.
const (
	// execOutputLimit is how much of a command's output Exec returns.
	execOutputLimit = 4096
	// execSetupFailed is the helper's exit code when it could not enter
	// the container (its stderr says why).
	execSetupFailed = 125
	// execTimedOut is the helper's exit code when it killed a command that
	// outlived its timeout.
	execTimedOut = 124
)

// enterRequest is what the agent hands the "supervise enter" helper on its
// standard input.
type enterRequest struct {
	Task        procRef           `json:"task"`
	Shell       bool              `json:"shell,omitempty"`
	Value       string            `json:"value"`
	Arguments   []string          `json:"arguments,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
	Timeout     time.Duration     `json:"timeout"`
}

// Exec runs cmd inside a running container, as its task runs: in the
// task's namespaces (mount, PID, IPC, network, UTS and cgroup, as far as
// they differ from the agent's), in its cgroups (so it counts against its
// limits), as its user, in its working directory, with its environment
// plus cmd.Environment, under no_new_privs and the task's seccomp filter.
// It returns the command's exit code (128+n for signal n) and up to 4 KiB
// of its output; an error when the command could not run (container
// unknown or ended, executable not found) or ctx ended first.
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
	helper := exec.Command(argv[0], append(append([]string{}, argv[1:]...), "enter", dir)...)
	helper.Stdin = bytes.NewReader(req)
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = execOutputLimit, execOutputLimit
	helper.Stdout, helper.Stderr = &stdout, &stderr
	if err := helper.Start(); err != nil {
		return 0, "", fmt.Errorf("start exec helper: %w", err)
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
	same, err := sameNamespace(task.Pid, "net")
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

// sameNamespace reports whether process pid is in the caller's namespace
// of a kind ("net", "mnt", ...).
func sameNamespace(pid int, kind string) (bool, error) {
	var own, theirs unix.Stat_t
	if err := unix.Stat("/proc/self/ns/"+kind, &own); err != nil {
		return false, fmt.Errorf("namespace %s: %w", kind, err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, kind), &theirs); err != nil {
		return false, fmt.Errorf("namespace %s of %d: %w", kind, pid, err)
	}
	return own.Dev == theirs.Dev && own.Ino == theirs.Ino, nil
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

// namespaceKinds are the namespaces Exec enters, with their clone flags.
var namespaceKinds = []struct {
	name string
	flag int
}{
	{"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS}, {"net", unix.CLONE_NEWNET},
	{"pid", unix.CLONE_NEWPID}, {"cgroup", unix.CLONE_NEWCGROUP}, {"mnt", unix.CLONE_NEWNS},
}

// enterExec is the "supervise enter <state-dir>" helper of Exec: it reads
// an enterRequest on stdin, joins the container's cgroups, enters the
// task's namespaces on its locked thread, becomes the task's user and
// runs the command there, and exits with its exit code (execSetupFailed
// when it could not, execTimedOut when it killed it at the timeout).
func enterExec(dir string) int {
	runtime.LockOSThread() // everything below happens on this thread
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return execSetupFailed
	}
	var req enterRequest
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&req); err != nil {
		return fail("read request: %v", err)
	}
	var spec launchSpec
	if err := readJSON(filepath.Join(dir, launchFile), &spec); err != nil {
		return fail("read launch spec: %v", err)
	}
	if spec.User == nil {
		return fail("launch spec names no user")
	}
	pidfd, err := unix.PidfdOpen(req.Task.Pid, 0)
	if err != nil {
		return fail("open task %d: %v", req.Task.Pid, err)
	}
	// The pidfd pins the process: checked once, it cannot be another.
	if !alive("/proc", &req.Task) {
		return fail("the task (pid %d) has ended", req.Task.Pid)
	}
	flags := 0
	for _, ns := range namespaceKinds {
		same, err := sameNamespace(req.Task.Pid, ns.name)
		if err != nil {
			return fail("%v", err)
		}
		if !same {
			flags |= ns.flag
		}
	}
	for _, procs := range spec.Cgroup.ProcsFiles() {
		if err := os.WriteFile(procs, []byte("0"), 0); err != nil {
			return fail("join cgroup %s: %v", filepath.Dir(procs), err)
		}
	}
	if flags != 0 {
		// Entering a mount namespace needs a file-system context of this
		// thread's own: the runtime's threads share one.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fail("unshare the file-system context: %v", err)
		}
		if err := unix.Setns(pidfd, flags); err != nil {
			return fail("enter the task's namespaces: %v", err)
		}
	}
	env := make([]string, 0, len(spec.Env)+len(req.Environment))
	for _, kv := range spec.Env {
		if k, _, _ := strings.Cut(kv, "="); req.Environment[k] == "" {
			env = append(env, kv)
		}
	}
	for k, v := range req.Environment {
		env = append(env, k+"="+v)
	}
	// As root, before taking the task's user (see runInit).
	if err := unix.Chdir(spec.Dir); err != nil {
		return fail("enter the task's directory %s: %v", spec.Dir, err)
	}
	path, argv, err := enterCommandLine(req, envValue(env, "PATH"))
	if err != nil {
		return fail("%v", err)
	}
	if err := restrict(spec.Seccomp); err != nil {
		return fail("%v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail("%v", err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return fail("%v", err)
	}
	u := spec.User
	child, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env: env, Files: []uintptr{devNull.Fd(), outW.Fd(), outW.Fd()},
		// No Pdeathsig: forked into the task's PID namespace, the child
		// sees no parent (getppid 0), and the runtime would take that for
		// its parent's death. The helper kills it at the timeout instead.
		Sys: &syscall.SysProcAttr{Setsid: true,
			Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: append([]uint32{}, u.Groups...)}},
	})
	outW.Close()
	if err != nil {
		return fail("exec %s: %v", path, err)
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, io.TeeReader(io.LimitReader(outR, execOutputLimit), os.Stdout))
		_, _ = io.Copy(io.Discard, outR)
		close(copied)
	}()
	timedOut := make(chan struct{})
	timer := time.AfterFunc(req.Timeout, func() {
		close(timedOut)
		_ = unix.Kill(-child, unix.SIGKILL) // its session: the command and what it started
		_ = unix.Kill(child, unix.SIGKILL)
	})
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(child, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	timer.Stop()
	select {
	case <-timedOut:
		return execTimedOut
	default:
	}
	_ = unix.Kill(-child, unix.SIGKILL) // nothing of the check outlives it
	select {
	case <-copied:
	case <-time.After(time.Second):
	}
	if err != nil {
		return fail("wait: %v", err)
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// enterCommandLine is the path and argv of an Exec request, the executable
// looked up in the task's PATH inside its mount namespace.
func enterCommandLine(req enterRequest, pathEnv string) (string, []string, error) {
	if req.Shell {
		return "/bin/sh", []string{"/bin/sh", "-c", req.Value}, nil
	}
	argv := req.Arguments
	if len(argv) == 0 {
		argv = []string{req.Value}
	}
	if strings.Contains(req.Value, "/") {
		return req.Value, argv, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			continue
		}
		p := filepath.Join(d, req.Value)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, argv, nil
		}
	}
	return "", nil, fmt.Errorf("executable %q not found in PATH %q", req.Value, pathEnv)
}
