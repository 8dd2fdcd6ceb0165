package containerizer

import (
	"fmt"
	"path/filepath"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// SetRevocableCPULimit caps the whole revocable subtree at cores CPUs (CFS
// bandwidth: cpu.max on v2, cpu.cfs_quota_us on hybrid); cores <= 0 removes
// the cap. This is the QoS controllers' throttle: best-effort work slows
// down together, without being killed.
func (c *Containerizer) SetRevocableCPULimit(cores float64) error {
	rel := filepath.Join(c.cfg.CgroupRoot, string(cgroups.Revocable))
	if err := c.layout.SetCPULimit(rel, cores); err != nil {
		return fmt.Errorf("set revocable CPU limit: %w", err)
	}
	return nil
}

// RevocableCPULimit returns the revocable subtree's CPU cap in cores (0:
// none).
func (c *Containerizer) RevocableCPULimit() (float64, error) {
	return c.layout.CPULimit(filepath.Join(c.cfg.CgroupRoot, string(cgroups.Revocable)))
}

// RevocableCgroup returns the revocable subtree's path relative to each
// hierarchy, e.g. "slackline/revocable".
func (c *Containerizer) RevocableCgroup() string {
	return filepath.Join(c.cfg.CgroupRoot, string(cgroups.Revocable))
}

// Root returns the agent's cgroup root, relative to each hierarchy.
func (c *Containerizer) Root() string { return c.cfg.CgroupRoot }

// Layout returns where the cgroup hierarchies are.
func (c *Containerizer) Layout() cgroups.Layout { return c.layout }
