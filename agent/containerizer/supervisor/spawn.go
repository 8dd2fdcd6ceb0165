package supervisor

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// StartInCgroup starts the command newCmd builds (its SysProcAttr set) in
// the v2 cgroup dir where the kernel can: clone3 with CLONE_INTO_CGROUP
// (Linux 5.7+) places the child there as part of the fork, with
// cgroup_threadgroup_rwsem held only for reading, where a write of its pid
// to cgroup.procs afterwards takes it for writing and waits for an RCU
// grace period (milliseconds, tens of them on a busy host, unless the
// hierarchy is mounted with favordynmods). It reports whether the child
// was born there. If not (an older kernel, a cgroup that refuses it,
// dir ""), it starts the command again without, where the caller is, and
// the caller moves it.
func StartInCgroup(newCmd func() *exec.Cmd, dir string) (cmd *exec.Cmd, born bool, err error) {
	if dir != "" {
		// O_PATH would not do: the kernel wants a cgroupfs directory
		// opened for reading.
		fd, oerr := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if oerr == nil {
			cmd = newCmd()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
			err = cmd.Start()
			unix.Close(fd)
			if err == nil {
				return cmd, true, nil
			}
		}
	}
	cmd = newCmd()
	return cmd, false, cmd.Start()
}

// BornInEnv is the environment variable in which the agent tells a
// supervisor the cgroup.procs files of the v1 cgroups it was born in
// (StartInCgroups), separated by newlines: the supervisor leaves them out
// of its moves (LaunchSpec.SupervisorCgroup). The supervisor removes it
// from its environment at start, before it starts anything.
const BornInEnv = "SLACKLINE_SUPERVISOR_BORN_IN"

// bornIn reads and unsets BornInEnv.
func bornIn() []string {
	v, ok := os.LookupEnv(BornInEnv)
	if !ok {
		return nil
	}
	_ = os.Unsetenv(BornInEnv)
	return strings.Split(v, "\n")
}

// ownV2Cgroup returns the calling process's cgroup in the v2 tree (the
// "0::" line of /proc/self/cgroup, e.g. "/slackline/supervisors"), or "".
func ownV2Cgroup() string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	return v2CgroupOf(data)
}

func v2CgroupOf(procCgroup []byte) string {
	for line := range bytes.SplitSeq(procCgroup, []byte("\n")) {
		if rel, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			return string(rel)
		}
	}
	return ""
}

// splitSupervisorMoves splits the cgroup.procs files the supervisor moves
// itself into (LaunchSpec.SupervisorCgroup) into those it moves into
// before it reports the task and those after. A supervisor already in its
// v2 cgroup (own, as in /proc/self/cgroup; the agent started it there)
// leaves the rest, v1 hierarchies of hybrid hosts, until after; one
// elsewhere moves into every hierarchy before. unifiedMount is where the
// v2 tree is mounted.
func splitSupervisorMoves(files []string, unifiedMount, own string) (now, later []string) {
	for i, f := range files {
		dir := filepath.Dir(f)
		if unifiedMount == "" || !strings.HasPrefix(dir+"/", strings.TrimSuffix(unifiedMount, "/")+"/") {
			continue
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(dir, unifiedMount), "/")
		if own == "" || rel != own {
			return files, nil
		}
		return nil, append(append([]string{}, files[:i]...), files[i+1:]...)
	}
	return files, nil
}

// JoinError is StartInCgroups' error when the spawning thread could not
// join one of the v1 cgroups: nothing was started.
type JoinError struct{ Err error }

func (e *JoinError) Error() string { return e.Err.Error() }
func (e *JoinError) Unwrap() error { return e.Err }

// StartInCgroups starts the command newCmd builds born in every cgroup of
// cg: in its v2 cgroup as StartInCgroup does (born reports it), and in its
// v1 cgroups (hybrid hosts) by inheritance. A child is born in the cgroups
// of the thread that forks it, so the fork happens on an OS thread of its
// own that first moves itself into each v1 directory of cg by writing 0
// to its tasks file (Cgroup.joinThread: the one migration the kernel does
// without taking cgroup_threadgroup_rwsem for writing, so no RCU grace
// period and nothing the next cgroup write queues behind), and ends with
// the fork: Go never runs another goroutine on it. Every thread the child
// has or makes (a Go child starts its runtime threads after exec) is then
// in cg from its first instruction: counted by pids.max, charged to the
// memory cgroup, with no move of the whole process afterwards. A failed
// v1 join is a *JoinError, and nothing is started.
func StartInCgroups(newCmd func() *exec.Cmd, cg Cgroup) (cmd *exec.Cmd, born bool, err error) {
	if len(cg.V1Dirs()) == 0 {
		return StartInCgroup(newCmd, cg.Unified)
	}
	onDisposableThread(func() {
		if jerr := cg.joinThread(); jerr != nil {
			err = &JoinError{Err: jerr}
			return
		}
		cmd, born, err = StartInCgroup(newCmd, cg.Unified)
	})
	return cmd, born, err
}

// onDisposableThread runs fn on a goroutine locked to an OS thread that
// ends with it (runtime.LockOSThread without unlocking: the thread exits),
// so whatever fn does to its thread (cgroups) dies with it. The process's
// main thread is never that thread: the runtime would keep it, wedged, for
// the life of the process. A goroutine that finds itself on the main
// thread keeps it locked while it runs fn on another goroutine, which
// therefore runs on another thread.
func onDisposableThread(fn func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			defer close(done)
			fn()
			return // locked: this thread ends
		}
		inner := make(chan struct{})
		go func() {
			runtime.LockOSThread() // not the main thread: it is locked to the goroutine above
			defer close(inner)
			fn()
		}()
		<-inner
		runtime.UnlockOSThread()
		close(done)
	}()
	<-done
}

// inV2Cgroup reports whether the v2 cgroup directory dir (under the v2
// tree mounted at unifiedMount) is own, a process's cgroup as
// /proc/self/cgroup names it.
func inV2Cgroup(dir, unifiedMount, own string) bool {
	mount := strings.TrimSuffix(unifiedMount, "/")
	if unifiedMount == "" || !strings.HasPrefix(dir+"/", mount+"/") {
		return false
	}
	return "/"+strings.TrimPrefix(strings.TrimPrefix(dir, mount), "/") == own
}
