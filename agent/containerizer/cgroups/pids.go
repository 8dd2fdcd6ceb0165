package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The pids controller bounds the processes (and threads) of a container,
// so that a fork bomb stops at the container's pids.max instead of
// exhausting the host's. On v2 it is one more controller of the unified
// tree, handed down with cpu and memory when the parent of the root
// delegates it; on hybrid hosts it is the v1 pids hierarchy at
// <mountpoint>/pids, one more directory (Paths.Pids) the container's
// processes join. A host without it runs containers unbounded, as before.

// v1PidsHierarchy returns the v1 pids hierarchy under mountpoint, or ""
// when it is not mounted there.
func v1PidsHierarchy(mountpoint string) string {
	dir := filepath.Join(mountpoint, "pids")
	if !exists(filepath.Join(dir, "cgroup.procs")) || !exists(filepath.Join(dir, "tasks")) {
		return ""
	}
	// The root of a v1 hierarchy has no pids.* files; its name and mount
	// say which controller it is.
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && fields[4] == dir && strings.Contains(line, " - cgroup ") && slices.Contains(strings.Split(fields[len(fields)-1], ","), "pids") {
			return dir
		}
	}
	return ""
}

// WithUsablePids returns l without the pids controller when the cgroup
// root cannot have it: on v2, the parent of root must delegate "pids" (it
// is not Slackline's to change). Hybrid layouts are returned as they are.
func (l Layout) WithUsablePids(root string) Layout {
	if l.Mode != ModeV2 || l.Pids == "" {
		return l
	}
	parent := filepath.Dir(filepath.Join(l.Unified, root))
	data, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil || !slices.Contains(strings.Fields(string(data)), "pids") {
		l.Pids = ""
	}
	return l
}

// setPidsMax writes a container's pids.max; max <= 0 or a layout without
// the pids controller writes nothing.
func (l Layout) setPidsMax(p Paths, max int64) error {
	if max <= 0 || l.Pids == "" {
		return nil
	}
	dir := p.Unified
	if l.Mode == ModeHybrid {
		dir = p.Pids
	}
	file := filepath.Join(dir, "pids.max")
	if err := os.WriteFile(file, []byte(strconv.FormatInt(max, 10)), 0); err != nil {
		return wrap("write", file, err)
	}
	return nil
}

// PidsCurrent returns the number of processes and threads in the cgroup,
// and false where the layout has no pids controller.
func (l Layout) PidsCurrent(p Paths) (int64, bool) {
	if l.Pids == "" {
		return 0, false
	}
	dir := p.Unified
	if l.Mode == ModeHybrid {
		dir = p.Pids
	}
	data, err := os.ReadFile(filepath.Join(dir, "pids.current"))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}

// SetSubtreePidsMax bounds the processes and threads of all the containers
// of each subtree of root together (pids.max of <root>/guaranteed and of
// the revocable subtree), so that tasks together cannot exhaust the host's
// pids, whatever each one's own pids.max. max <= 0 removes the bound
// ("max"); a layout without the pids controller writes nothing.
func (l Layout) SetSubtreePidsMax(root string, max int64) error {
	if l.Pids == "" {
		return nil
	}
	value := "max"
	if max > 0 {
		value = strconv.FormatInt(max, 10)
	}
	for _, class := range []Class{Guaranteed, Revocable} {
		file := filepath.Join(l.Pids, Subtree(root, class), "pids.max")
		if err := os.WriteFile(file, []byte(value), 0); err != nil {
			return wrap("write", file, err)
		}
	}
	return nil
}

// SubtreePidsMax reads the bound SetSubtreePidsMax wrote on class's
// subtree (0: none, or no pids controller).
func (l Layout) SubtreePidsMax(root string, class Class) int64 {
	if l.Pids == "" {
		return 0
	}
	data, err := os.ReadFile(filepath.Join(l.Pids, Subtree(root, class), "pids.max"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// HostPidsBound is how many processes and threads the host can have: the
// smaller of kernel.pid_max and kernel.threads-max under procRoot.
func HostPidsBound(procRoot string) (int64, error) {
	bound := int64(0)
	for _, name := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		data, err := os.ReadFile(filepath.Join(procRoot, name))
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s: %q is not a count", filepath.Join(procRoot, name), data)
		}
		if bound == 0 || n < bound {
			bound = n
		}
	}
	return bound, nil
}
