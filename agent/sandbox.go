package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/taskstate"
)

// Defaults of the sandbox subsystem (Config.Sandbox).
const (
	// DefaultSandboxGCDelay is how long an ended task's sandbox is kept
	// (Mesos's --gc_delay).
	DefaultSandboxGCDelay = 7 * 24 * time.Hour
	// DefaultSandboxDiskWatermark is the fraction of the work dir's file
	// system in use beyond which ended tasks' sandboxes go before their
	// delay, oldest first.
	DefaultSandboxDiskWatermark = 0.9
	// DefaultSandboxCheckInterval is how often sandboxes are measured.
	DefaultSandboxCheckInterval = 15 * time.Second
)

// SandboxConfig configures how the agent bounds its tasks' disk use.
type SandboxConfig struct {
	// Dir is the parent of the sandboxes (default <WorkDir>/sandboxes, where
	// the containerizer puts them).
	Dir string
	// RevocableDir, when set, is the parent of revocable tasks' sandboxes
	// (--revocable-sandbox-dir, a file system of its own): collected as
	// Dir is, against its own file system's watermark.
	RevocableDir string
	// GCDelay is how long the sandbox of an ended task is kept, counted
	// from its last change (default DefaultSandboxGCDelay).
	GCDelay time.Duration
	// DiskWatermark: while more of the file system holding Dir than this
	// fraction is used, ended tasks' sandboxes are removed before their
	// delay, oldest first (default DefaultSandboxDiskWatermark; 1 turns it
	// off).
	DiskWatermark float64
	// CheckInterval is how often sandboxes are measured and collected
	// (default DefaultSandboxCheckInterval).
	CheckInterval time.Duration
}

func (c *SandboxConfig) setDefaults(workDir string) {
	if c.Dir == "" {
		c.Dir = filepath.Join(workDir, "sandboxes")
	}
	if c.GCDelay <= 0 {
		c.GCDelay = DefaultSandboxGCDelay
	}
	if c.DiskWatermark <= 0 {
		c.DiskWatermark = DefaultSandboxDiskWatermark
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = DefaultSandboxCheckInterval
	}
}

// sandboxes is the subsystem that bounds the disk the agent's tasks use,
// as Mesos's disk/du isolator and its sandbox garbage collector do:
//
//   - a running task whose sandbox grows beyond its disk resource is killed
//     and ends TASK_STATE_FAILED with REASON_CONTAINER_LIMITATION_DISK (a
//     task without a disk resource is not limited);
//   - the sandbox of a task that is not live (ended, or unknown to the task
//     machine and the containerizer) is removed GCDelay after its last
//     change, and sooner, oldest first, while the file system is fuller
//     than DiskWatermark. A live task's sandbox is never removed.
//
// It owns no lock: each check reads the task machine and the containers,
// then measures and removes with no lock held.
type sandboxes struct {
	cfg SandboxConfig
	log *slog.Logger
	cz  Containerizer
	// live returns the container ids of the tasks the machine has not
	// seen end (launching ones included).
	live func() map[string]bool
	// limit kills a container over its disk allowance.
	limit func(containerID, message string)
	// usage returns the fraction of the file system holding a path in use.
	usage func(path string) (float64, error)
	now   func() time.Time
}

// Run checks every CheckInterval until ctx ends.
func (s *sandboxes) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			s.check()
		}
	}
}

// check enforces the running tasks' disk limits, then collects sandboxes.
func (s *sandboxes) check() {
	live := s.live()
	for _, c := range s.cz.Containers() {
		if c.Exit != nil {
			continue
		}
		live[c.ID] = true
		limit := c.Spec.Resources.Disk()
		if limit <= 0 || c.Sandbox == "" {
			continue
		}
		used, err := diskUsage(c.Sandbox)
		if err != nil {
			s.log.Debug("measure sandbox", "container", c.ID, "err", err)
		}
		if mib := float64(used) / (1 << 20); mib > limit {
			msg := fmt.Sprintf("disk limit exceeded: the sandbox uses %.1f MiB of its %.0f MiB", mib, limit)
			s.log.Warn("killing a task over its disk allowance", "container", c.ID, "task", c.Spec.TaskID, "used_mib", mib, "disk_mib", limit)
			s.limit(c.ID, msg)
		}
	}
	s.collect(live)
}

// collect removes the sandboxes of tasks that are not live from each
// sandbox directory.
func (s *sandboxes) collect(live map[string]bool) {
	s.collectDir(s.cfg.Dir, live)
	if s.cfg.RevocableDir != "" {
		s.collectDir(s.cfg.RevocableDir, live)
	}
}

// collectDir removes the sandboxes under dir of tasks that are not live:
// those older than GCDelay, then the oldest while dir's file system is
// above the watermark.
func (s *sandboxes) collectDir(dir string, live map[string]bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("list sandboxes", "err", err)
		}
		return
	}
	type candidate struct {
		path    string
		changed time.Time
	}
	var old []candidate
	now := s.now()
	for _, e := range entries {
		if !e.IsDir() || live[e.Name()] {
			continue
		}
		path := filepath.Join(dir, e.Name())
		changed, err := lastChange(path)
		if err != nil {
			continue
		}
		if now.Sub(changed) > s.cfg.GCDelay {
			s.remove(path, "older than the gc delay")
			continue
		}
		old = append(old, candidate{path, changed})
	}
	if s.cfg.DiskWatermark >= 1 || len(old) == 0 {
		return
	}
	slices.SortFunc(old, func(a, b candidate) int { return a.changed.Compare(b.changed) })
	for _, c := range old {
		used, err := s.usage(dir)
		if err != nil || used <= s.cfg.DiskWatermark {
			return
		}
		s.remove(c.path, fmt.Sprintf("the disk is %.0f%% full", used*100))
	}
}

func (s *sandboxes) remove(path, why string) {
	if err := os.RemoveAll(path); err != nil {
		s.log.Warn("remove sandbox", "path", path, "err", err)
		return
	}
	s.log.Info("sandbox removed", "path", path, "reason", why)
}

// lastChange is when a sandbox last changed: its directory's or its
// output's modification time, whichever is newest.
func lastChange(path string) (time.Time, error) {
	info, err := os.Lstat(path)
	if err != nil {
		return time.Time{}, err
	}
	latest := info.ModTime()
	for _, name := range []string{"stdout", "stderr"} {
		if fi, err := os.Lstat(filepath.Join(path, name)); err == nil && fi.ModTime().After(latest) {
			latest = fi.ModTime()
		}
	}
	return latest, nil
}

// diskUsage is the disk space the files under path take (blocks
// allocated, as du counts them; a file linked twice counts once), without
// following links. Files that vanish while it walks are skipped.
func diskUsage(path string) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			total += info.Size()
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			id := [2]uint64{st.Dev, st.Ino}
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// fileSystemUsage returns the fraction of the file system holding path in
// use, as df counts it (blocks available to unprivileged users are free).
func fileSystemUsage(path string) (float64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	used := st.Blocks - st.Bfree
	if total := used + st.Bavail; total > 0 {
		return float64(used) / float64(total), nil
	}
	return 0, nil
}

// newSandboxes wires the sandbox subsystem to the agent's task machine and
// containerizer.
func newSandboxes(a *Agent) *sandboxes {
	cfg := a.cfg.Sandbox
	cfg.setDefaults(a.cfg.WorkDir)
	return &sandboxes{
		cfg: cfg, log: a.log, cz: a.cfg.Containerizer, usage: fileSystemUsage, now: time.Now,
		live: func() map[string]bool {
			live := map[string]bool{}
			a.tasks.read(func(m *tasks.Machine) {
				for _, t := range m.Tasks() {
					if t.ContainerID != "" && !taskstate.IsTerminal(t.State) {
						live[t.ContainerID] = true
					}
				}
			})
			return live
		},
		limit: a.limitDisk,
	}
}

// limitDisk kills a container over its disk allowance through the task
// machine: the task ends TASK_STATE_FAILED with
// REASON_CONTAINER_LIMITATION_DISK.
func (a *Agent) limitDisk(containerID, message string) {
	var key tasks.Key
	var ok bool
	a.tasks.read(func(m *tasks.Machine) { key, ok = m.Container(containerID) })
	if ok {
		a.tasks.step(tasks.Kill{Key: key, StateOverride: slacklinev1.TaskState_TASK_STATE_FAILED,
			Reason: slacklinev1.Reason_REASON_CONTAINER_LIMITATION_DISK, Message: message, Now: time.Now()})
	}
}
