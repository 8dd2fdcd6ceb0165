package containerizer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// finish records how ct ended, once its supervisor has exited (or is known
// to be gone), and queues the Exit.
func (c *Containerizer) finish(ct *container) {
	ct.finish.Do(func() {
		var rec exitRecord
		err := readJSON(filepath.Join(ct.dir, exitFile), &rec)
		if err != nil {
			// The supervisor died without recording the task's end (it was
			// killed, or crashed): the task's status is lost, so its
			// remaining processes are killed rather than left unwatched.
			c.log.Error("containerizer: supervisor ended without an exit status", "container", ct.cp.ID, "err", err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := ct.cp.Cgroup.KillAndWait(ctx); err != nil {
				c.log.Error("containerizer: kill orphaned container", "container", ct.cp.ID, "err", err)
			}
			cancel()
			rec = exitRecord{ExitCode: -1, Error: "the supervisor ended without recording the task's exit status; the container was killed"}
		}
		oom := false
		if n, err := ct.cp.Cgroup.OOMKills(); err == nil {
			oom = n > ct.cp.OOMBaseline
		} else if !errors.Is(err, os.ErrNotExist) {
			c.log.Warn("containerizer: read OOM counter", "container", ct.cp.ID, "err", err)
		}
		c.mu.Lock()
		killed := ct.cp.KillRequested
		c.mu.Unlock()
		c.deliver(ct, describeExit(ct.cp.ID, rec, oom, killed, ct.cp.Limits.MemoryBytes))
	})
}

// deliver sets ct's Exit and queues it, unless the containerizer is closed
// (the next Recover delivers it then).
func (c *Containerizer) deliver(ct *container, e Exit) {
	c.mu.Lock()
	if ct.exit != nil { // already delivered: exactly once
		c.mu.Unlock()
		return
	}
	ct.exit = &e
	c.version++
	close(ct.ended)
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	c.log.Info("containerizer: container ended", "container", e.ContainerID, "exit_code", e.ExitCode,
		"signal", e.Signal, "oom_killed", e.OOMKilled, "killed", e.Killed, "lost", e.Lost, "message", e.Message)
	c.exits.push(e)
}

// describeExit turns the supervisor's record into an Exit with its message.
func describeExit(id string, rec exitRecord, oom, killed bool, memoryBytes int64) Exit {
	e := Exit{ContainerID: id, ExitCode: rec.ExitCode, Signal: rec.Signal, OOMKilled: oom, Killed: killed}
	var how string
	switch {
	case rec.Error != "":
		how = rec.Error
	case rec.Signal != 0:
		e.ExitCode = -1
		how = fmt.Sprintf("killed by signal %d (%s)", rec.Signal, unix.SignalName(unix.Signal(rec.Signal)))
	default:
		how = fmt.Sprintf("exited with code %d", rec.ExitCode)
	}
	switch {
	case oom && memoryBytes > 0:
		e.Message = fmt.Sprintf("OOM-killed: memory limit %s (%s)", formatMiB(memoryBytes), how)
	case oom:
		e.Message = fmt.Sprintf("OOM-killed (%s)", how)
	case killed:
		e.Message = "killed on request (" + how + ")"
	default:
		e.Message = how
	}
	return e
}

// lostExit is the Exit of a container that vanished without a status.
func lostExit(id, why string) Exit {
	return Exit{ContainerID: id, ExitCode: -1, Lost: true, Message: "container lost: " + why}
}

func formatMiB(bytes int64) string {
	mib := float64(bytes) / (1 << 20)
	if mib == float64(int64(mib)) {
		return fmt.Sprintf("%d MiB", int64(mib))
	}
	return fmt.Sprintf("%.1f MiB", mib)
}
