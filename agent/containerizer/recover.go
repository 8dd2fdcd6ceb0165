package containerizer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"golang.org/x/sys/unix"
)

// Recover re-adopts the containers checkpointed in StateDir, typically by a
// new agent process after the previous one died. For each checkpoint:
//
//   - another boot id (the host rebooted: cgroups and processes are gone):
//     Exit{Lost: true};
//   - a live supervisor (pid and start time match): re-adopted and returned,
//     watched again (its Exit will come) and killable;
//   - a supervisor gone and an exit status recorded: its Exit with the real
//     outcome (exit code, signal, OOM from the cgroup's counter);
//   - a supervisor gone without an exit status (it was killed, or the agent
//     died mid-launch): whatever remains in the cgroup is killed and the Exit
//     says so; if even the cgroup is gone, Exit{Lost: true}.
//
// Exits found here are queued and delivered on Exits after Recover returns.
// Cgroups under the root's subtrees without a checkpoint (left by a crash
// before the first checkpoint cannot happen; by outside interference can)
// are killed and removed, as are those of a checkpoint that cannot be read
// (torn by a host crash: see setAside). Containers already known are skipped, so calling
// Recover twice is harmless.
func (c *Containerizer) Recover(ctx context.Context) ([]*Container, error) {
	entries, err := os.ReadDir(c.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	var running []*Container
	known := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		if !validID.MatchString(id) || id == "." || id == ".." {
			continue // not a container's (the set-aside directory)
		}
		known[id] = true
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		_, exists := c.containers[id]
		c.mu.Unlock()
		if exists {
			continue
		}
		dir := filepath.Join(c.cfg.StateDir, id)
		var cp checkpoint
		if err := readJSON(filepath.Join(dir, checkpointFile), &cp); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				// Launch stopped before its first checkpoint: nothing else exists.
				c.log.Warn("containerizer: removing state without checkpoint", "dir", dir)
				_ = os.RemoveAll(dir)
				continue
			}
			// Torn by a host crash (the checkpoint is rewritten without
			// fsync once the first is durable) or damaged from outside:
			// the container cannot be recovered. Its task is reported
			// lost by the agent (no container of that id is known), its
			// cgroups, if any, are removed with the orphans, and its
			// state is kept aside for diagnosis (bounded).
			delete(known, id)
			kept := c.setAside(dir, id)
			c.log.Error("containerizer: unreadable checkpoint: container lost, its state set aside", "container", id, "err", err, "kept", kept)
			continue
		}
		// Its dynamic id stays leased to it, now by this agent, until
		// Destroy (a lease from before host-wide leases is written now).
		if u := cp.User; u != nil && u.Dynamic && cp.BootID == c.bootID {
			lease := uidLease{Container: cp.ID, StateDir: c.cfg.StateDir, Cgroup: c.leaseCgroup(cp.ID, cp.Revocable)}
			if err := c.dynamicIDs.adopt(u.UID, lease); err != nil {
				c.log.Error("containerizer: keep the lease of a recovered container's dynamic id", "container", id, "uid", u.UID, "err", err)
			}
		}
		// Not ready (invisible) until its fate is decided.
		ct := &container{cp: &cp, dir: dir, ended: make(chan struct{})}
		c.mu.Lock()
		c.containers[id] = ct
		c.mu.Unlock()
		if c.recoverOne(ct) {
			c.mu.Lock()
			running = append(running, ct.snapshot())
			c.mu.Unlock()
		}
		c.mu.Lock()
		ct.ready = true
		c.version++
		c.mu.Unlock()
	}
	c.removeOrphans(ctx, known)
	c.log.Info("containerizer: recovered", "running", len(running))
	return running, nil
}

// recoverOne decides the fate of one checkpointed container; it reports
// whether the container is still running (and now watched).
func (c *Containerizer) recoverOne(ct *container) bool {
	cp := ct.cp
	if cp.BootID != c.bootID {
		c.deliver(ct, lostExit(cp.ID, fmt.Sprintf("the host rebooted since it started (boot id %s, now %s)", cp.BootID, c.bootID)))
		return false
	}
	// Pids the agent did not checkpoint (it died during Launch) are in the
	// supervisor's status.json.
	if cp.Supervisor == nil || cp.Task == nil {
		var st statusRecord
		if err := readJSON(filepath.Join(ct.dir, statusFile), &st); err == nil {
			cp.Supervisor, cp.Task, cp.StartedAt = st.Supervisor, st.Task, st.StartedAt
		}
	}
	// Liveness first, exit file second: a supervisor exits only after
	// writing its exit file, so this order never misses one.
	if pidfd, err := c.openSupervisor(cp.Supervisor); err == nil {
		c.mu.Lock()
		ct.watch = pidfd
		c.mu.Unlock()
		go c.watchAdopted(ct, pidfd)
		c.log.Info("containerizer: re-adopted", "container", cp.ID, "pid", cp.Task.Pid, "supervisor", cp.Supervisor.Pid)
		return true
	}
	if _, err := os.Stat(filepath.Join(ct.dir, exitFile)); err == nil {
		c.finish(ct)
		return false
	}
	if !cp.Cgroup.Exists() {
		c.deliver(ct, lostExit(cp.ID, "its supervisor and cgroup are gone and no exit status was recorded"))
		return false
	}
	c.finish(ct) // kills what remains and reports the missing status
	return false
}

// openSupervisor returns a pidfd for a live supervisor matching ref. The
// start time is checked after opening, so the pidfd cannot name a process
// that reused the pid.
func (c *Containerizer) openSupervisor(ref *procRef) (*os.File, error) {
	if ref == nil {
		return nil, errors.New("no supervisor recorded")
	}
	fd, err := unix.PidfdOpen(ref.Pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if !alive(c.cfg.ProcRoot, ref) {
		unix.Close(fd)
		return nil, errors.New("supervisor pid reused")
	}
	// Non-blocking: the runtime's poller waits for it, no thread is parked.
	return os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", ref.Pid)), nil
}

// watchAdopted waits for an adopted supervisor (not our child) to exit: its
// pidfd becomes readable then.
func (c *Containerizer) watchAdopted(ct *container, pidfd *os.File) {
	defer pidfd.Close()
	rc, err := pidfd.SyscallConn()
	if err != nil {
		c.log.Error("containerizer: watch supervisor", "container", ct.cp.ID, "err", err)
		return
	}
	if err := awaitExit(rc); err != nil {
		return // closed by Close
	}
	c.finish(ct)
}

// awaitExit waits until the process of a non-blocking pidfd (PIDFD_NONBLOCK:
// in the runtime's poller) has exited, its pidfd readable then, with no
// thread parked meanwhile. It returns an error when the pidfd is closed
// first.
func awaitExit(pidfd syscall.RawConn) error {
	return pidfd.Read(func(fd uintptr) bool {
		n, perr := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return perr != nil || n > 0
	})
}

// awaitChild waits until the child process pid has exited, in the
// runtime's poller (awaitExit), so that the (*exec.Cmd).Wait after it
// returns at once: a Wait alone parks an OS thread in waitid(2) for as long
// as the child runs, one thread per task's supervisor (#29: 101 threads
// with 100 tasks, and the Go runtime stops the process at 10,000). The pid
// cannot be reused meanwhile: the child is not reaped before that Wait.
// Where the kernel cannot open a non-blocking pidfd (PIDFD_NONBLOCK came
// in 5.10) it returns at once and the Wait parks a thread as before.
func awaitChild(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid))
	defer f.Close()
	if rc, err := f.SyscallConn(); err == nil {
		_ = awaitExit(rc)
	}
}

// legacyRevocable stands for the revocable subtree where agents put it
// before it moved beside the root (cgroups.LegacyRevocable).
const legacyRevocable cgroups.Class = "legacy-revocable"

// removeOrphans kills and removes cgroups under the root's subtrees that no
// checkpoint accounts for, and under the revocable subtree's legacy place.
// Only the containerizer creates cgroups there.
func (c *Containerizer) removeOrphans(ctx context.Context, known map[string]bool) {
	for _, class := range []cgroups.Class{cgroups.Guaranteed, cgroups.Revocable, legacyRevocable} {
		subtree := cgroups.Subtree(c.cfg.CgroupRoot, class)
		if class == legacyRevocable {
			subtree = cgroups.LegacyRevocable(c.cfg.CgroupRoot)
		}
		parent := filepath.Join(c.layout.Unified, subtree)
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			c.mu.Lock()
			_, launching := c.containers[e.Name()]
			c.mu.Unlock()
			if !e.IsDir() || known[e.Name()] || launching {
				continue
			}
			p := c.layout.PathsOf(filepath.Join(subtree, e.Name()))
			c.log.Warn("containerizer: removing orphaned cgroup", "cgroup", p.Rel)
			kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := p.KillAndWait(kctx); err != nil {
				c.log.Error("containerizer: kill orphaned cgroup", "cgroup", p.Rel, "err", err)
			}
			cancel()
			if err := p.Remove(); err != nil {
				c.log.Error("containerizer: remove orphaned cgroup", "cgroup", p.Rel, "err", err)
			}
		}
	}
}

// setAsideDir, under the state directory, keeps the state of containers
// whose checkpoint could not be read; its name is no valid container id.
// At most maxSetAside are kept, the oldest removed first.
const (
	setAsideDir = "+unreadable"
	maxSetAside = 8
)

// setAside moves a container's unrecoverable state directory into
// setAsideDir and trims it to maxSetAside entries; it returns where the
// state went ("" when it was removed instead).
func (c *Containerizer) setAside(dir, id string) string {
	aside := filepath.Join(c.cfg.StateDir, setAsideDir)
	dst := filepath.Join(aside, fmt.Sprintf("%s.%d", id, time.Now().UnixNano()))
	if err := os.MkdirAll(aside, 0o700); err != nil || os.Rename(dir, dst) != nil {
		_ = os.RemoveAll(dir)
		return ""
	}
	entries, err := os.ReadDir(aside)
	if err != nil || len(entries) <= maxSetAside {
		return dst
	}
	// Names end in the time they were set aside.
	stamp := func(name string) int64 {
		n, _ := strconv.ParseInt(name[strings.LastIndexByte(name, '.')+1:], 10, 64)
		return n
	}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i].Name(), entries[j].Name()
		return stamp(a) < stamp(b) || stamp(a) == stamp(b) && a < b
	})
	for _, e := range entries[:len(entries)-maxSetAside] {
		_ = os.RemoveAll(filepath.Join(aside, e.Name()))
	}
	return dst
}
