package cgroups

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/internal/killwait"
)

// manager returns containerd's v2 manager for the cgroup's unified directory.
func (p Paths) manager() (*cgroup2.Manager, error) {
	m, err := cgroup2.Load("/"+p.Rel, cgroup2.WithMountpoint(p.UnifiedMount))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", p.Unified, err)
	}
	return m, nil
}

// Procs returns the pids of every process in the cgroup and its descendants,
// read from the v2 tree (which tracks membership on hybrid hosts too). A
// cgroup that no longer exists has no processes.
func (p Paths) Procs() ([]int, error) {
	if _, err := os.Stat(p.Unified); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	m, err := p.manager()
	if err != nil {
		return nil, err
	}
	pids, err := m.Procs(true)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list processes of %s: %w", p.Unified, err)
	}
	out := make([]int, 0, len(pids))
	for _, pid := range pids {
		out = append(out, int(pid))
	}
	return out, nil
}

// Kill sends SIGKILL to every process in the cgroup at once: by writing
// cgroup.kill (kernel 5.14+, atomic against forks), or else by freezing the
// cgroup, killing each process and thawing it, so no process can escape by
// forking or leaving its process group. It does not wait; see KillAndWait.
func (p Paths) Kill() error {
	if _, err := os.Stat(p.Unified); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	m, err := p.manager()
	if err != nil {
		return err
	}
	if err := m.Kill(); err != nil {
		return wrap("kill the processes of", p.Unified, err)
	}
	return nil
}

// KillAndWait kills every process in the cgroup and polls until none is
// left or ctx ends, releasing the killed processes' memory at once
// (killwait.KillAndWait): the adoption path after an agent's restart kills
// as the supervisor does.
func (p Paths) KillAndWait(ctx context.Context) error {
	return killwait.KillAndWait(ctx, p, p.Unified)
}

// WaitEmpty polls until the cgroup has no process left or ctx ends.
func (p Paths) WaitEmpty(ctx context.Context) error {
	return killwait.WaitEmpty(ctx, p, p.Unified)
}

// OOMKills returns the cgroup's OOM-kill counter: "oom_kill" of memory.events
// on v2, of memory.oom_control on the v1 memory hierarchy.
func (p Paths) OOMKills() (uint64, error) {
	file := filepath.Join(p.Unified, "memory.events")
	if p.Memory != "" {
		file = filepath.Join(p.Memory, "memory.oom_control")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read OOM counter: %w", err)
	}
	return parseKey(data, "oom_kill")
}

// parseKey returns the value of key in a flat-keyed cgroup file ("key value"
// lines). A missing key counts as 0 (older kernels).
func parseKey(data []byte, key string) (uint64, error) {
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		fields := bytes.Fields(s.Bytes())
		if len(fields) == 2 && string(fields[0]) == key {
			v, err := strconv.ParseUint(string(fields[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %q: %w", key, fields[1], err)
			}
			return v, nil
		}
	}
	return 0, s.Err()
}

// Exists reports whether the cgroup's unified directory exists (after a
// reboot it does not).
func (p Paths) Exists() bool {
	return exists(p.Unified)
}

// isCgroupfs reports whether path is on a cgroup (v1 or v2) filesystem.
func isCgroupfs(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}
