package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The "enter" helper's bounds and conventions (the agent's Exec relies on
// them).
const (
	// ExecOutputLimit is how much of a command's output the helper
	// passes on (and Exec returns).
	ExecOutputLimit = 4096
	// ExecSetupFailed is the helper's exit code when it could not enter
	// the container (its stderr says why).
	ExecSetupFailed = 125
	// ExecTimedOut is the helper's exit code when it killed a command that
	// outlived its timeout.
	ExecTimedOut = 124
)

// EnterRequest is what the agent hands the "supervise enter" helper on its
// standard input.
type EnterRequest struct {
	Task        ProcRef           `json:"task"`
	Shell       bool              `json:"shell,omitempty"`
	Value       string            `json:"value"`
	Arguments   []string          `json:"arguments,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
	Timeout     time.Duration     `json:"timeout"`
}

// SameNamespace reports whether process pid is in the caller's namespace
// of a kind ("net", "mnt", ...).
func SameNamespace(pid int, kind string) (bool, error) {
	var own, theirs unix.Stat_t
	if err := unix.Stat("/proc/self/ns/"+kind, &own); err != nil {
		return false, fmt.Errorf("namespace %s: %w", kind, err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, kind), &theirs); err != nil {
		return false, fmt.Errorf("namespace %s of %d: %w", kind, pid, err)
	}
	return own.Dev == theirs.Dev && own.Ino == theirs.Ino, nil
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
// an EnterRequest on stdin, joins the container's cgroups, enters the
// task's namespaces on its locked thread, becomes the task's user and
// runs the command there, and exits with its exit code (ExecSetupFailed
// when it could not, ExecTimedOut when it killed it at the timeout).
func enterExec(dir string) int {
	bornInto := bornIn()   // before anything is started
	runtime.LockOSThread() // everything below happens on this thread
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return ExecSetupFailed
	}
	var req EnterRequest
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&req); err != nil {
		return fail("read request: %v", err)
	}
	var spec LaunchSpec
	if err := ReadJSON(filepath.Join(dir, LaunchFile), &spec); err != nil {
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
	if !Alive("/proc", &req.Task) {
		return fail("the task (pid %d) has ended", req.Task.Pid)
	}
	flags := 0
	for _, ns := range namespaceKinds {
		same, err := SameNamespace(req.Task.Pid, ns.name)
		if err != nil {
			return fail("%v", err)
		}
		if !same {
			flags |= ns.flag
		}
	}
	// The agent started it in the task's cgroups where it could
	// (StartInCgroups): it joins only the others, each a move of the
	// whole process (and an RCU grace period).
	own := ownV2Cgroup()
	for _, procs := range spec.Cgroup.ProcsFiles() {
		if slices.Contains(bornInto, procs) || own != "" && procs == filepath.Join(spec.Cgroup.Unified, "cgroup.procs") &&
			inV2Cgroup(spec.Cgroup.Unified, spec.Cgroup.UnifiedMount, own) {
			continue
		}
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
	path, argv, err := enterCommandLine(req, EnvValue(env, "PATH"))
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
		_, _ = io.Copy(io.Discard, io.TeeReader(io.LimitReader(outR, ExecOutputLimit), os.Stdout))
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
		return ExecTimedOut
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
func enterCommandLine(req EnterRequest, pathEnv string) (string, []string, error) {
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

// EnvValue returns the value of key in env ("KEY=value" entries), or "".
func EnvValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
