package supervisor

import (
	"bufio"
	"bytes"
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
	"slices"
	"strconv"
	"strings"
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

// Main is the entry point of the supervisor and of its exec shim.
// The agent binary calls it for "supervise" with the arguments that follow
// (Config.SupervisorCommand is that prefix), and exits with its result:
//
//	supervise run <state-dir>    the supervisor of one container
//	supervise wait <state-root>  a warm supervisor: reads its container's state
//	                             directory, a child of state-root, on stdin, then
//	                             is that container's (as run)
//	supervise exec <state-dir>   the shim: joins the cgroups, then execs the task
//	supervise enter <state-dir>  Exec's helper: runs a command inside the container
//
// The shim never returns when the exec succeeds.
func Main(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: supervise run|exec|enter <container-state-dir>")
		return 2
	}
	switch args[0] {
	case "run":
		return supervise(args[1], time.Now())
	case "wait":
		return superviseWarm(args[1])
	case "exec":
		return execShim(args[1])
	case "enter":
		return enterExec(args[1])
	}
	fmt.Fprintf(os.Stderr, "supervise: unknown mode %q\n", args[0])
	return 2
}

// maxStateDirLine bounds the line a warm supervisor reads on stdin.
const maxStateDirLine = 4096

// superviseWarm is a supervisor started before its container (a "warm"
// one, Launch's way around a fork and exec on its path): it holds nothing
// of a task until the agent writes the container's state directory, a
// direct child of root, and a newline on its stdin; then it sends its
// output to the directory's LogFile, puts /dev/null on stdin and runs the
// container as supervise does. End of file first (the agent closed the
// pipe, or ended) ends it with status 0, having done nothing.
func superviseWarm(root string) int {
	line, err := bufio.NewReaderSize(io.LimitReader(os.Stdin, maxStateDirLine), maxStateDirLine).ReadString('\n')
	if len(line) == 0 && (err == nil || errors.Is(err, io.EOF)) {
		return 0
	}
	at := time.Now()
	dir := strings.TrimSuffix(line, "\n")
	if err != nil || !isChildDir(root, dir) {
		fmt.Fprintf(os.Stderr, "supervise wait: %q (%v): not a directory directly under %s\n", line, err, root)
		return 2
	}
	logFile, err := os.OpenFile(filepath.Join(dir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervise wait: %v\n", err)
		return 1
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervise wait: %v\n", err)
		return 1
	}
	for _, d := range []struct {
		f  *os.File
		fd int
	}{{null, 0}, {logFile, 1}, {logFile, 2}} {
		if err := unix.Dup3(int(d.f.Fd()), d.fd, 0); err != nil {
			fmt.Fprintf(os.Stderr, "supervise wait: dup onto fd %d: %v\n", d.fd, err)
			return 1
		}
	}
	logFile.Close()
	null.Close()
	return supervise(dir, at)
}

// isChildDir reports whether dir is an absolute, clean path directly under
// root.
func isChildDir(root, dir string) bool {
	base := filepath.Base(dir)
	return filepath.IsAbs(dir) && filepath.Clean(dir) == dir && filepath.Dir(dir) == filepath.Clean(root) &&
		base != "." && base != ".." && base != "/"
}

// supervise runs one container: it starts the task through the shim, tells
// Launch the task's pid, waits for the task, kills what it left in the
// cgroup and records its exit status atomically in exit.json. It runs in its
// own session, outside the task's cgroups, and survives the agent.
// supervisorAt is when it started to run the container (Status.SupervisorAt).
func supervise(dir string, supervisorAt time.Time) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s supervisor[%d]: %s\n", time.Now().Format(time.RFC3339Nano), os.Getpid(), fmt.Sprintf(format, args...))
	}
	bornInto := bornIn() // before anything is started: the shim does not inherit it
	unix.CloseOnExec(statusFD)
	status := os.NewFile(statusFD, "status")
	report := func(st Status) {
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

	var spec LaunchSpec
	if err := ReadJSON(filepath.Join(dir, LaunchFile), &spec); err != nil {
		logf("%v", err)
		report(Status{Error: err.Error()})
		return 1
	}
	// The task's output goes through the supervisor, which keeps at most
	// spec.OutputLimit of each stream (output.go).
	stdout, stderr, output, err := taskOutput(spec)
	if err != nil {
		report(Status{Error: err.Error()})
		return 1
	}
	execR, execW, err := os.Pipe()
	if err != nil {
		report(Status{Error: err.Error()})
		return 1
	}
	// The shim as the task's init reports the task's wait status on fd 4.
	initR, initW, err := os.Pipe()
	if err != nil {
		report(Status{Error: err.Error()})
		return 1
	}
	// The supervisor tells the shim on fd 5 when it may go on ("ok", or
	// why not): at once when the shim was born in the task's v2 cgroup,
	// after moving it there otherwise.
	joinR, joinW, err := os.Pipe()
	if err != nil {
		report(Status{Error: err.Error()})
		return 1
	}
	// The task's own session (and process group, so Kill's SIGTERM
	// reaches its children): no controlling terminal, no signals from
	// the supervisor's group.
	newShim := func() *exec.Cmd {
		attr := &syscall.SysProcAttr{Setsid: true}
		if spec.Namespaces {
			attr.Cloneflags = unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC
		}
		return &exec.Cmd{
			Path:   "/proc/self/exe", // this very binary, even if replaced on disk since
			Args:   append(append([]string{}, spec.SupervisorArgv...), "exec", dir),
			Dir:    spec.Dir,
			Stdout: stdout, Stderr: stderr,
			ExtraFiles:  []*os.File{execW, initW, joinR}, // fds 3, 4 and 5 in the shim
			SysProcAttr: attr,
		}
	}
	spawnAt := time.Now()
	shim, born, err := StartInCgroups(newShim, spec.Cgroup)
	execW.Close()
	initW.Close()
	joinR.Close()
	stdout.Close()
	stderr.Close()
	defer initR.Close()
	if err != nil {
		execR.Close()
		joinW.Close()
		report(Status{Error: fmt.Sprintf("start exec shim: %v", err)})
		return 1
	}
	// Born in the task's v1 cgroups (hybrid hosts; StartInCgroups). Not
	// born in its v2 cgroup (a kernel before 5.7): moved there now,
	// while it starts, before it does anything else.
	joined := "ok"
	if !born {
		if err := joinCgroup([]string{filepath.Join(spec.Cgroup.Unified, "cgroup.procs")}, shim.Process.Pid); err != nil {
			joined = err.Error()
		}
	}
	_, _ = joinW.WriteString(joined) // EPIPE if the shim failed already: execR says why
	joinW.Close()
	// Out of the agent's cgroup, so that what ends the agent's cgroup does
	// not end the supervisor. The agent started it in its v2 cgroup where
	// the kernel could (clone3 with CLONE_INTO_CGROUP): that one, which
	// the agent's cgroup is killed through, holds before the report, and
	// the v1 moves, each a grace period of RCU the shim's own joins would
	// queue behind (both hold cgroup_mutex), wait until the task runs.
	// Started elsewhere, it moves into every hierarchy before the report,
	// so that a supervisor Launch returned for is there. The v1 cgroups
	// it was born in (BornInEnv: the agent forked it from a thread in
	// them) it does not move into at all.
	movesNow, movesLater := splitSupervisorMoves(slices.DeleteFunc(slices.Clone(spec.SupervisorCgroup), func(f string) bool {
		return slices.Contains(bornInto, f)
	}), spec.Cgroup.UnifiedMount, ownV2Cgroup())
	self := os.Getpid()
	moveSelf := func(files []string) {
		for _, procs := range files {
			if err := joinCgroup([]string{procs}, self); err != nil {
				logf("%v (staying where it is)", err)
			}
		}
	}
	moveSelf(movesNow)
	// EOF without data: the shim exec'd the task, or forked it and closed
	// the pipe (it is close-on-exec).
	msg, _ := io.ReadAll(execR)
	execR.Close()
	shimAt := time.Now()
	stages, msg := parseShimStages(msg)
	if len(msg) > 0 {
		_ = shim.Wait()
		report(Status{Error: string(msg)})
		return 1
	}
	pid := shim.Process.Pid
	if spec.Namespaces {
		// The task is the init's child; its host pid is found in its
		// cgroup. Should it have ended and been reaped already, the
		// init stands for it (it exits at once then).
		if child := childIn(spec.Cgroup, pid); child > 0 {
			pid = child
		}
	}
	taskStart, err := ProcStartTime("/proc", pid)
	if err != nil {
		logf("start time of task %d: %v", pid, err)
	}
	supStart, _ := ProcStartTime("/proc", os.Getpid())
	st := Status{
		Supervisor:   &ProcRef{Pid: os.Getpid(), StartTime: supStart},
		Task:         &ProcRef{Pid: pid, StartTime: taskStart},
		StartedAt:    time.Now(),
		SupervisorAt: supervisorAt, ShimAt: shimAt, SpawnAt: spawnAt,
		ShimMainAt: stages.main, JoinedAt: stages.joined, IsolatedAt: stages.isolated,
	}
	if err := WriteVolatileJSON(filepath.Join(dir, StatusFile), st); err != nil {
		logf("write status: %v", err)
	}
	report(st)
	logf("task started: pid %d in %s", pid, spec.Cgroup.Rel)
	moveSelf(movesLater)

	rec := ExitRecord{ExitCode: -1}
	if err := shim.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			rec.Error = "wait for the task: " + err.Error()
		}
	}
	var ws syscall.WaitStatus
	var haveStatus bool
	if ps := shim.ProcessState; ps != nil {
		ws, haveStatus = ps.Sys().(syscall.WaitStatus)
	}
	if spec.Namespaces {
		// The init's report is the task's own status; without one (the
		// init was killed with the rest of the cgroup) the init's stands.
		if data, _ := io.ReadAll(initR); len(data) > 0 {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32); err == nil {
				ws, haveStatus = syscall.WaitStatus(n), true
			}
		}
	}
	if haveStatus {
		switch {
		case ws.Exited():
			rec.ExitCode = ws.ExitStatus()
		case ws.Signaled():
			rec.Signal = int(ws.Signal())
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
	if err := WriteJSON(filepath.Join(dir, ExitFile), rec); err != nil {
		logf("write exit status: %v", err)
		return 1
	}
	logf("task %d ended: exit code %d, signal %d, %d leftover process(es) killed", pid, rec.ExitCode, rec.Signal, rec.Leftover)
	return 0
}

// initStatusFD is the descriptor on which the shim, as the task's init,
// reports the task's wait status to the supervisor.
const initStatusFD = 4

// joinFD is the descriptor on which the shim hears from the supervisor
// that it is in every cgroup of the task ("ok"), or why not.
const joinFD = 5

// joinCgroup moves process pid, the whole thread group at once, into the
// cgroup of each cgroup.procs file.
func joinCgroup(files []string, pid int) error {
	for _, procs := range files {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", filepath.Dir(procs), err)
		}
	}
	return nil
}

// execShim runs inside the task's future process, as root: born in the
// task's v1 cgroups and its v2 cgroup (StartInCgroups; or moved into the
// v2 one by the supervisor, which says when on fd 5: "ok", else why not),
// so the task is in all of them before the user's command starts, it
// enters a new cgroup namespace rooted there. Without namespaces it then becomes
// the task's user, sets no_new_privs (and the seccomp filter), and execs
// the command. With namespaces (the supervisor cloned it into new PID,
// mount and IPC namespaces: it is their pid 1) it mounts the task's
// private tmpfs and /proc, sets no_new_privs and the seccomp filter, forks
// the command as the task's user and stays its init (runInit). A failure
// is written to fd 3 (close-on-exec, so a successful exec closes it
// silently; the init closes it once the task runs) and the shim exits 127.
//
// The namespace, the supplementary groups and no_new_privs are attributes
// of one thread until exec: everything from the unshare on happens on this
// goroutine's locked thread, which is the one that execs or forks.
func execShim(dir string) int {
	stages := shimStages{main: time.Now()}
	runtime.LockOSThread()
	unix.CloseOnExec(statusFD)
	unix.CloseOnExec(initStatusFD)
	unix.CloseOnExec(joinFD)
	errPipe := os.NewFile(statusFD, "exec-status")
	fail := func(format string, args ...any) int {
		_, _ = fmt.Fprintf(errPipe, format, args...)
		return 127
	}
	var spec LaunchSpec
	if err := ReadJSON(filepath.Join(dir, LaunchFile), &spec); err != nil {
		return fail("exec shim: %v", err)
	}
	// Born in the task's v2 cgroup, or moved there by the supervisor
	// while it started: nothing happens here before it says so on fd 5.
	joinPipe := os.NewFile(joinFD, "join-status")
	answer, err := io.ReadAll(io.LimitReader(joinPipe, 4096))
	joinPipe.Close()
	switch {
	case err != nil:
		return fail("exec shim: read the supervisor's cgroup moves: %v", err)
	case len(answer) == 0:
		return fail("exec shim: the supervisor ended before it moved the shim into the task's cgroups")
	case string(answer) != "ok":
		return fail("%s", answer)
	}
	// The v1 hierarchies (hybrid hosts): the shim was born in them, every
	// thread of it (StartInCgroups), so that all it has or makes, as the
	// task's init too, is counted by the task's pids.max and the rest of
	// its limits from the start, without a move (a move of the whole
	// process waits for an RCU grace period; a move of its other threads
	// after the report pushed pids.current past pids.max).
	stages.joined = time.Now()
	if spec.CoreCookie {
		if err := newCoreCookie(); err != nil {
			return fail("core scheduling cookie: %v", err)
		}
	}
	if spec.User == nil {
		return fail("exec shim: launch spec names no user")
	}
	if err := enterCgroupNamespace(); err != nil {
		return fail("%v", err)
	}
	if spec.Namespaces && spec.Root != nil {
		if err := enterImageRoot(spec.Root, spec.TmpfsBytes); err != nil {
			return fail("%v", err)
		}
		if spec.Root.Lookup {
			p, err := lookPathIn(spec.Path, EnvValue(spec.Env, "PATH"))
			if err != nil {
				return fail("%v", err)
			}
			spec.Path = p
		}
		if err := restrict(spec.Seccomp); err != nil {
			return fail("%v", err)
		}
		stages.isolated = time.Now()
		stages.write(errPipe)
		return runInit(spec, errPipe)
	}
	if spec.Namespaces {
		if err := enterNamespaces(spec.TmpfsBytes, spec.Keep); err != nil {
			return fail("%v", err)
		}
		if err := restrict(spec.Seccomp); err != nil {
			return fail("%v", err)
		}
		stages.isolated = time.Now()
		stages.write(errPipe)
		return runInit(spec, errPipe)
	}
	if err := becomeUser(spec.User); err != nil {
		return fail("%v", err)
	}
	if err := restrict(spec.Seccomp); err != nil {
		return fail("%v", err)
	}
	stages.isolated = time.Now()
	stages.write(errPipe)
	// Caught signals revert to their defaults at exec; the runtime ignores none.
	err = unix.Exec(spec.Path, spec.Argv, spec.Env)
	return fail("exec %s: %v", spec.Path, err)
}

// enterCgroupNamespace unshares a cgroup namespace rooted at the cgroups
// the caller just joined (where the kernel has cgroup namespaces): the
// task sees its own cgroup as "/" and the cgroups outside it not at all.
func enterCgroupNamespace() error {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("enter a cgroup namespace: %w", err)
	}
	return nil
}

// becomeUser makes the calling thread the task's user: its groups, gid and
// uid. Without root, the task cannot write any cgroup.procs (they are
// root's, 0644), so it cannot move itself or its children out of its
// cgroups.
func becomeUser(u *User) error {
	if err := unix.Setgroups(u.groupInts()); err != nil {
		return fmt.Errorf("set groups of user %s: %w", u.Name, err)
	}
	if err := unix.Setgid(int(u.GID)); err != nil {
		return fmt.Errorf("set gid %d of user %s: %w", u.GID, u.Name, err)
	}
	if err := unix.Setuid(int(u.UID)); err != nil {
		return fmt.Errorf("set uid %d of user %s: %w", u.UID, u.Name, err)
	}
	return nil
}

// restrict sets no_new_privs, so neither setuid binaries nor file
// capabilities give the task more than its user has, and, with filter,
// the seccomp filter (seccomp.go).
func restrict(filter bool) error {
	if filter {
		return loadSeccomp()
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// forwardedSignals are passed on by the task's init to the task.
var forwardedSignals = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT}

// runInit is the rest of the shim's life as pid 1 of the task's PID
// namespace: it forks the task (its own session, the task's user and
// groups; no_new_privs and the seccomp filter are inherited), closes the
// exec-status pipe, forwards signals it gets to the task, reaps every
// orphan of the namespace, and exits when the task does, after writing
// the task's wait status to fd 4. Its exit ends every other process of
// the namespace (the kernel kills them): a container ends with its main
// process.
func runInit(spec LaunchSpec, errPipe *os.File) int {
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, append([]os.Signal{unix.SIGCHLD}, forwardedSignals...)...)
	u := spec.User
	groups := append([]uint32{}, u.Groups...)
	// No Dir: the task inherits the shim's working directory, the sandbox,
	// which the supervisor entered as root. ForkExec would change
	// directory after taking the task's user, and a task's user cannot
	// search the agent's work dir (root's, usually 0700): every launch
	// failed with "permission denied" there.
	child, err := syscall.ForkExec(spec.Path, spec.Argv, &syscall.ProcAttr{
		Env: spec.Env, Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: groups}},
	})
	if err != nil {
		_, _ = fmt.Fprintf(errPipe, "exec %s: %v", spec.Path, err)
		return 127
	}
	errPipe.Close()
	status := os.NewFile(initStatusFD, "init-status")
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if pid == child {
				_, _ = fmt.Fprintf(status, "%d\n", uint32(ws))
				status.Close()
				if ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ws.ExitStatus()
			}
		}
		if s := <-sigs; s != unix.SIGCHLD {
			_ = unix.Kill(child, s.(syscall.Signal))
		}
	}
}

// childIn returns the process of cgroup cg whose parent is pid (the host's
// view), or 0.
func childIn(cg Cgroup, pid int) int {
	pids, _ := cg.Procs()
	for _, p := range pids {
		if p != pid && procPPid("/proc", p) == pid {
			return p
		}
	}
	return 0
}

// shimStagesPrefix starts the line on which the shim, on its exec-status
// pipe, tells the supervisor when it reached each stage, just before it
// forks or execs the task: "stages <main> <joined> <isolated>\n", Unix
// nanoseconds. Anything after that line (or without it) is an error.
const shimStagesPrefix = "stages "

// shimStages are the times the shim reached its stages (Status).
type shimStages struct {
	main, joined, isolated time.Time
}

func (st shimStages) write(w io.Writer) {
	_, _ = fmt.Fprintf(w, "%s%d %d %d\n", shimStagesPrefix, st.main.UnixNano(), st.joined.UnixNano(), st.isolated.UnixNano())
}

// parseShimStages splits what the shim wrote on its exec-status pipe into
// its stages (zero when it wrote none) and the rest: its error, if any.
func parseShimStages(msg []byte) (shimStages, []byte) {
	var st shimStages
	rest, ok := bytes.CutPrefix(msg, []byte(shimStagesPrefix))
	if !ok {
		return st, msg
	}
	line, rest, _ := bytes.Cut(rest, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) != 3 {
		return st, msg
	}
	var at [3]time.Time
	for i, v := range f {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return st, msg
		}
		at[i] = time.Unix(0, n)
	}
	return shimStages{main: at[0], joined: at[1], isolated: at[2]}, rest
}
