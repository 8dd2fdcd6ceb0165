package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/internal/killwait"
)

// Cgroup is a container's cgroup as the supervisor and its shim use it:
// the directories of cgroups.Paths, with the same JSON names (launch.json
// holds one), and only the operations the supervisor needs, on plain
// cgroupfs files. The containerizer's cgroups package builds on
// containerd's cgroup managers, whose packages (and their dependencies'
// initialisation) this binary, started twice per launch, leaves out.
type Cgroup struct {
	Rel          string `json:"rel"`
	UnifiedMount string `json:"unified_mount"`
	Unified      string `json:"unified"`
	CPU          string `json:"cpu,omitempty"`
	Memory       string `json:"memory,omitempty"`
	CPUSet       string `json:"cpuset,omitempty"`
	Pids         string `json:"pids,omitempty"`
	Blkio        string `json:"blkio,omitempty"`
}

// ProcsFiles returns the cgroup.procs file of every directory of c (as
// cgroups.Paths.ProcsFiles does): a process that writes its pid to each is
// in the cgroup everywhere.
func (c Cgroup) ProcsFiles() []string {
	var files []string
	for _, d := range []string{c.Unified, c.CPU, c.Memory, c.Pids, c.CPUSet, c.Blkio} {
		if d != "" {
			files = append(files, filepath.Join(d, "cgroup.procs"))
		}
	}
	return files
}

// V1Dirs returns the directories of c in cgroup v1 hierarchies (hybrid
// hosts; none on a pure v2 host).
func (c Cgroup) V1Dirs() []string {
	var dirs []string
	for _, d := range []string{c.CPU, c.Memory, c.Pids, c.CPUSet, c.Blkio} {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// joinThread moves the calling thread, which must be locked to its
// goroutine (runtime.LockOSThread), into every v1 directory of c by writing
// "0" to its tasks file. A thread that moves itself this way is the one
// migration the kernel does without taking cgroup_threadgroup_rwsem for
// writing (cgroup_procs_write_start: only a write of another pid, or of a
// whole thread group, takes it), so it does not wait for an RCU grace
// period as every cgroup.procs write does on a hierarchy not mounted with
// favordynmods. The thread's other threads stay where they were; what it
// forks is born in c (StartInCgroups forks from such a thread, which then
// ends).
func (c Cgroup) joinThread() error {
	for _, d := range c.V1Dirs() {
		if err := os.WriteFile(filepath.Join(d, "tasks"), []byte("0"), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", d, err)
		}
	}
	return nil
}

// Procs returns the pids of every process in the cgroup and its
// descendants, read from the v2 tree (which tracks membership on hybrid
// hosts too). A cgroup that no longer exists has no processes.
func (c Cgroup) Procs() ([]int, error) {
	var pids []int
	err := filepath.WalkDir(c.Unified, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		if err != nil {
			return err
		}
		for f := range bytes.FieldsSeq(data) {
			pid, err := strconv.Atoi(string(f))
			if err != nil {
				return fmt.Errorf("%s: pid %q", filepath.Join(path, "cgroup.procs"), f)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list processes of %s: %w", c.Unified, err)
	}
	return pids, nil
}

// Kill sends SIGKILL to every process in the cgroup at once: by writing
// cgroup.kill (kernel 5.14+, atomic against forks), or else by freezing the
// cgroup, killing each process and thawing it, so that no process escapes
// by forking (as containerd's cgroup2 manager does).
func (c Cgroup) Kill() error {
	err := os.WriteFile(filepath.Join(c.Unified, "cgroup.kill"), []byte("1"), 0)
	if err == nil || errors.Is(err, fs.ErrNotExist) && !exists(c.Unified) {
		return nil
	}
	freeze := filepath.Join(c.Unified, "cgroup.freeze")
	frozen := os.WriteFile(freeze, []byte("1"), 0) == nil
	pids, err := c.Procs()
	for _, pid := range pids {
		if kerr := unix.Kill(pid, unix.SIGKILL); kerr != nil && !errors.Is(kerr, unix.ESRCH) && err == nil {
			err = fmt.Errorf("kill %d: %w", pid, kerr)
		}
	}
	if frozen {
		_ = os.WriteFile(freeze, []byte("0"), 0) // killed processes die once thawed
	}
	if err != nil {
		return fmt.Errorf("kill the processes of %s: %w", c.Unified, err)
	}
	return nil
}

// KillAndWait kills every process in the cgroup and polls until none is
// left or ctx ends, releasing the killed processes' memory at once
// (killwait.KillAndWait).
func (c Cgroup) KillAndWait(ctx context.Context) error {
	return killwait.KillAndWait(ctx, c, c.Unified)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
