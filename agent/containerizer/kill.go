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

// Kill ends the container: SIGTERM to the task's process group (and its main
// process, should it have left the group), then, if the main process has not
// ended within Config.KillGracePeriod, a cgroup-wide SIGKILL (cgroup.kill in
// the container's v2 cgroup, or freeze, SIGKILL each process, thaw), so no
// process escapes, daemonized ones included. It returns once the cgroup has
// no process left and the container's Exit (Killed set) is queued on Exits.
// Killing an ended container is a no-op. ctx bounds the whole wait.
//
// Errors: ErrNotFound, ErrPermission, or ctx's error if processes remain.
func (c *Containerizer) Kill(ctx context.Context, id string) error {
	ct, err := c.lookup(id)
	if err != nil {
		return err
	}
	select {
	case <-ct.ended:
		return nil
	default:
	}
	c.mu.Lock()
	if !ct.cp.KillRequested {
		ct.cp.KillRequested = true
		// Persisted so an Exit recovered after an agent restart still says Killed.
		if err := writeJSON(filepath.Join(ct.dir, checkpointFile), ct.cp); err != nil {
			c.log.Error("containerizer: checkpoint kill request", "container", id, "err", err)
		}
	}
	task := ct.cp.Task
	c.mu.Unlock()

	c.log.Info("containerizer: killing", "container", id, "grace", c.cfg.KillGracePeriod)
	if alive(c.cfg.ProcRoot, task) {
		// The process group is the task's (the shim ran in its own session).
		_ = unix.Kill(-task.Pid, unix.SIGTERM)
		_ = unix.Kill(task.Pid, unix.SIGTERM)
	}
	grace := time.NewTimer(c.cfg.KillGracePeriod)
	defer grace.Stop()
	select {
	case <-ct.ended:
	case <-grace.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := ct.cp.Cgroup.KillAndWait(ctx); err != nil {
		return fmt.Errorf("kill container %s: %w", id, err)
	}
	// The supervisor writes the exit status and exits right after the main
	// process ends; wait for its Exit so Destroy can follow at once.
	select {
	case <-ct.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Destroy removes an ended container's cgroups (in every hierarchy) and its
// checkpoint, and forgets it. The sandbox is kept. Should a process still be
// in the cgroup (it cannot once the Exit was delivered, short of outside
// interference) it is killed first.
//
// Errors: ErrNotFound, ErrRunning (no Exit yet: Kill first), ErrPermission.
func (c *Containerizer) Destroy(id string) error {
	ct, err := c.lookup(id)
	if err != nil {
		return err
	}
	select {
	case <-ct.ended:
	default:
		return fmt.Errorf("%w: %q; kill it first", ErrRunning, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ct.cp.Cgroup.KillAndWait(ctx); err != nil {
		return fmt.Errorf("destroy container %s: %w", id, err)
	}
	if err := removeCgroup(ctx, ct); err != nil {
		return fmt.Errorf("destroy container %s: %w", id, err)
	}
	if err := sealSandbox(ct.cp); err != nil {
		return fmt.Errorf("destroy container %s: seal the sandbox: %w", id, err)
	}
	// Nothing of the task's user is left on the host (its processes are
	// gone with the cgroup, its files outside the sealed sandbox with its
	// tmpfs): another task may have its id.
	c.releaseUser(ct.cp)
	if err := os.RemoveAll(ct.dir); err != nil {
		return fmt.Errorf("destroy container %s: remove checkpoint: %w", id, err)
	}
	c.mu.Lock()
	delete(c.containers, id)
	c.version++
	c.mu.Unlock()
	c.log.Debug("containerizer: destroyed", "container", id)
	return nil
}

// removeCgroup removes the container's cgroups, retrying while the kernel
// still reports them busy (a killed process can take a moment to leave).
func removeCgroup(ctx context.Context, ct *container) error {
	for {
		err := ct.cp.Cgroup.Remove()
		if err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}
