// Package nodecgroup makes the cgroup that bounds a test's or a
// benchmark's node: a cgroup with a memory limit under which the agent's
// --cgroup-root goes (its revocable subtree, beside the root, is then
// under it too), so that the node's memory is that limit and what the
// agent's tasks leave of it, whatever the host's other tenants do (#28:
// the agent's monitor bounds the node by the lowest memory limit of its
// root and its ancestors).
//
// It is apart from cgrouptest because it reads the layout from
// agent/containerizer/cgroups, whose own tests import cgrouptest. The
// caller removes the cgroup (cgrouptest.RemoveRoot) once the agent and its
// tasks are gone. Errors name the file that could not be written.
package nodecgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// Make creates the cgroup rel in every hierarchy of l with a memory limit
// of limit bytes: v2 memory.max, with every controller its parent has
// handed down to its children; v1 memory.limit_in_bytes on hybrid hosts,
// where its v1 cpuset is also filled with the hierarchy's CPUs and memory
// nodes (a v1 cpuset with none takes no tasks, and the agent makes only
// its own root's).
func Make(l cgroups.Layout, rel string, limit uint64) error {
	for _, dir := range l.PathsOf(rel).Dirs() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	p := l.PathsOf(rel)
	value := []byte(strconv.FormatUint(limit, 10))
	if l.Mode == cgroups.ModeV2 {
		ctrls, err := os.ReadFile(filepath.Join(p.Unified, "cgroup.controllers"))
		if err != nil {
			return err
		}
		for _, c := range strings.Fields(string(ctrls)) {
			if err := os.WriteFile(filepath.Join(p.Unified, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
				return fmt.Errorf("enable %s under %s: %w", c, rel, err)
			}
		}
		return os.WriteFile(filepath.Join(p.Unified, "memory.max"), value, 0)
	}
	if l.CPUSet != "" {
		dir := filepath.Join(l.CPUSet, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, name := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(l.CPUSet, name))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, name), v, 0); err != nil {
				return fmt.Errorf("%s of %s: %w", name, rel, err)
			}
		}
	}
	return os.WriteFile(filepath.Join(p.Memory, "memory.limit_in_bytes"), value, 0)
}
