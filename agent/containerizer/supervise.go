package containerizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// statusFD is the descriptor on which Launch hears from its supervisor, and
// on which the exec shim reports a failed exec to the supervisor.
const statusFD = 3

// leftoverKillTimeout bounds how long a supervisor waits for the processes
// left in the cgroup after the main process ended to die.
const leftoverKillTimeout = 30 * time.Second

// SuperviseMain is the entry point of the supervisor and of its exec shim.
// The agent binary calls it for "supervise" with the arguments that follow
// (Config.SupervisorCommand is that prefix), and exits with its result:
//
//	supervise run <state-dir>    the supervisor of one container
//	supervise exec <state-dir>   the shim: joins the cgroups, then execs the task
//
// The shim never returns when the exec succeeds.
func SuperviseMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: supervise run|exec <container-state-dir>")
		return 2
	}
	switch args[0] {
	case "run":
		return supervise(args[1])
	case "exec":
		return execShim(args[1])
	}
	fmt.Fprintf(os.Stderr, "supervise: unknown mode %q\n", args[0])
	return 2
}

// supervise runs one container: it starts the task through the shim, tells
// Launch the task's pid, waits for the task, kills what it left in the
// cgroup and records its exit status atomically in exit.json. It runs in its
// own session, outside the task's cgroups, and survives the agent.
func supervise(dir string) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s supervisor[%d]: %s\n", time.Now().Format(time.RFC3339Nano), os.Getpid(), fmt.Sprintf(format, args...))
	}
	unix.CloseOnExec(statusFD)
	status := os.NewFile(statusFD, "status")
	report := func(st statusRecord) {
		data, _ := json.Marshal(st)
		// EPIPE if the agent died meanwhile: the task runs on regardless.
		_, _ = status.Write(data)
		_ = status.Close()
	}
	// Terminal-style signals do not end a supervisor (they would orphan the
	// task's status). Caught, not ignored: ignored dispositions would be
	// inherited by the task through exec.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	go func() {
		for s := range sigs {
			logf("ignoring %v", s)
		}
	}()

	var spec launchSpec
	if err := readJSON(filepath.Join(dir, launchFile), &spec); err != nil {
		logf("%v", err)
		report(statusRecord{Error: err.Error()})
		return 1
	}
	// Out of the agent's cgroup, so that what ends the agent's cgroup does
	// not end the supervisor. The shim, started after, inherits it until it
	// joins the task's cgroups.
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, procs := range spec.SupervisorCgroup {
		if err := os.WriteFile(procs, self, 0); err != nil {
			logf("join %s (staying in the agent's cgroup): %v", filepath.Dir(procs), err)
		}
	}
	// The task's output goes through the supervisor, which keeps at most
	// spec.OutputLimit of each stream (output.go).
	stdout, stderr, output, err := taskOutput(spec)
	if err != nil {
		report(statusRecord{Error: err.Error()})
		return 1
	}
	execR, execW, err := os.Pipe()
	if err != nil {
		report(statusRecord{Error: err.Error()})
		return 1
	}
	shim := &exec.Cmd{
		Path:   "/proc/self/exe", // this very binary, even if replaced on disk since
		Args:   append(append([]string{}, spec.SupervisorArgv...), "exec", dir),
		Dir:    spec.Dir,
		Stdout: stdout, Stderr: stderr,
		ExtraFiles: []*os.File{execW}, // fd 3 in the shim
		// The task's own session (and process group, so Kill's SIGTERM
		// reaches its children): no controlling terminal, no signals from
		// the supervisor's group.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = shim.Start()
	execW.Close()
	stdout.Close()
	stderr.Close()
	if err != nil {
		execR.Close()
		report(statusRecord{Error: fmt.Sprintf("start exec shim: %v", err)})
		return 1
	}
	// EOF without data: the shim exec'd the task (the pipe is close-on-exec).
	msg, _ := io.ReadAll(execR)
	execR.Close()
	if len(msg) > 0 {
		_ = shim.Wait()
		report(statusRecord{Error: string(msg)})
		return 1
	}
	pid := shim.Process.Pid
	taskStart, err := procStartTime("/proc", pid)
	if err != nil {
		logf("start time of task %d: %v", pid, err)
	}
	supStart, _ := procStartTime("/proc", os.Getpid())
	st := statusRecord{
		Supervisor: &procRef{Pid: os.Getpid(), StartTime: supStart},
		Task:       &procRef{Pid: pid, StartTime: taskStart},
		StartedAt:  time.Now(),
	}
	if err := writeJSON(filepath.Join(dir, statusFile), st); err != nil {
		logf("write status: %v", err)
	}
	report(st)
	logf("task started: pid %d in %s", pid, spec.Cgroup.Rel)

	rec := exitRecord{ExitCode: -1}
	if err := shim.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			rec.Error = "wait for the task: " + err.Error()
		}
	}
	if ps := shim.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Exited():
				rec.ExitCode = ws.ExitStatus()
			case ws.Signaled():
				rec.Signal = int(ws.Signal())
			}
		}
	}
	rec.FinishedAt = time.Now()
	// The container ends with its main process: nothing may outlive it.
	if pids, _ := spec.Cgroup.Procs(); len(pids) > 0 {
		rec.Leftover = len(pids)
		ctx, cancel := context.WithTimeout(context.Background(), leftoverKillTimeout)
		if err := spec.Cgroup.KillAndWait(ctx); err != nil {
			logf("kill leftover processes: %v", err)
		}
		cancel()
	}
	output.wait(leftoverKillTimeout) // its last lines are on disk before its exit is known
	if err := writeJSON(filepath.Join(dir, exitFile), rec); err != nil {
		logf("write exit status: %v", err)
		return 1
	}
	logf("task %d ended: exit code %d, signal %d, %d leftover process(es) killed", pid, rec.ExitCode, rec.Signal, rec.Leftover)
	return 0
}

// execShim runs inside the task's future process, as root: it writes its
// own pid to the cgroup.procs file of each of the container's cgroups, so
// the task is in all of them before the user's command starts, enters a new
// cgroup namespace rooted there, becomes the task's user, sets
// no_new_privs, then execs the command. A failure is written to fd 3
// (close-on-exec, so a successful exec closes it silently) and the shim
// exits 127.
//
// The namespace, the supplementary groups and no_new_privs are attributes
// of one thread until exec: everything from the unshare on happens on this
// goroutine's locked thread, which is the one that execs.
func execShim(dir string) int {
	runtime.LockOSThread()
	unix.CloseOnExec(statusFD)
	errPipe := os.NewFile(statusFD, "exec-status")
	fail := func(format string, args ...any) int {
		_, _ = fmt.Fprintf(errPipe, format, args...)
		return 127
	}
	var spec launchSpec
	if err := readJSON(filepath.Join(dir, launchFile), &spec); err != nil {
		return fail("exec shim: %v", err)
	}
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, procs := range spec.Cgroup.ProcsFiles() {
		// Writing a pid to cgroup.procs moves the whole process, every
		// runtime thread included.
		if err := os.WriteFile(procs, self, 0); err != nil {
			return fail("join cgroup %s: %v", filepath.Dir(procs), err)
		}
	}
	if spec.CoreCookie {
		if err := newCoreCookie(); err != nil {
			return fail("core scheduling cookie: %v", err)
		}
	}
	if err := confine(spec.User); err != nil {
		return fail("%v", err)
	}
	// Caught signals revert to their defaults at exec; the runtime ignores none.
	err := unix.Exec(spec.Path, spec.Argv, spec.Env)
	return fail("exec %s: %v", spec.Path, err)
}

// confine makes the calling thread the task's: a cgroup namespace rooted at
// the cgroups it just joined (where the kernel has cgroup namespaces), the
// user's groups, gid and uid, and no_new_privs, so neither setuid binaries
// nor file capabilities give the task more than the user has. Without
// root, the task cannot write any cgroup.procs (they are root's, 0644), so
// it cannot move itself or its children out of its cgroups; in the
// namespace the cgroups outside its own are not even visible.
func confine(u *taskUser) error {
	if u == nil {
		return errors.New("exec shim: launch spec names no user")
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("enter a cgroup namespace: %w", err)
	}
	if err := unix.Setgroups(u.groupInts()); err != nil {
		return fmt.Errorf("set groups of user %s: %w", u.Name, err)
	}
	if err := unix.Setgid(int(u.GID)); err != nil {
		return fmt.Errorf("set gid %d of user %s: %w", u.GID, u.Name, err)
	}
	if err := unix.Setuid(int(u.UID)); err != nil {
		return fmt.Errorf("set uid %d of user %s: %w", u.UID, u.Name, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}
