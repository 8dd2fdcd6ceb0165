package containerizer

import (
	"fmt"
	"runtime"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// SetRevocableCPULimit caps the whole revocable subtree at cores CPUs (CFS
// bandwidth: cpu.max on v2, cpu.cfs_quota_us on hybrid) enforced over
// period (0: the kernel's default, 100 ms); cores <= 0 removes the cap.
// This is the QoS controllers' throttle: best-effort work slows down
// together, without being killed.
func (c *Containerizer) SetRevocableCPULimit(cores float64, period time.Duration) error {
	defer c.forgetLevers()
	if err := c.layout.SetCPULimit(c.RevocableCgroup(), cores, period); err != nil {
		return fmt.Errorf("set revocable CPU limit: %w", err)
	}
	return nil
}

// RevocableCPULimit returns the revocable subtree's CPU cap in cores (0:
// none).
func (c *Containerizer) RevocableCPULimit() (float64, error) {
	return c.leverLayout().CPULimit(c.RevocableCgroup())
}

// SetRevocableCPUs confines the revocable subtree to cpus (a CPU set); nil
// or empty gives it every CPU again. It wraps ErrUnsupported on hosts
// without a usable cpuset controller.
func (c *Containerizer) SetRevocableCPUs(cpus []int) error {
	defer c.forgetLevers()
	if err := c.layout.SetCPUs(c.RevocableCgroup(), cpus); err != nil {
		return fmt.Errorf("set revocable CPUs: %w", err)
	}
	return nil
}

// RevocableCPUs returns the CPUs the revocable subtree may run on; it wraps
// ErrUnsupported on hosts without a usable cpuset controller.
func (c *Containerizer) RevocableCPUs() ([]int, error) {
	return c.leverLayout().CPUs(c.RevocableCgroup())
}

// CPUs returns the CPUs the agent's cgroup root may use: every online CPU
// unless the root itself is confined. Without a cpuset controller it
// assumes CPUs 0 to NumCPU-1.
func (c *Containerizer) CPUs() []int {
	if cpus, err := c.leverLayout().CPUs(c.cfg.CgroupRoot); err == nil && len(cpus) > 0 {
		return cpus
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// RevocableCgroup returns the revocable subtree's path relative to each
// hierarchy, e.g. "slackline-revocable" (cgroups.Subtree).
func (c *Containerizer) RevocableCgroup() string {
	return cgroups.Subtree(c.cfg.CgroupRoot, cgroups.Revocable)
}

// Root returns the agent's cgroup root, relative to each hierarchy.
func (c *Containerizer) Root() string { return c.cfg.CgroupRoot }

// Layout returns where the cgroup hierarchies are.
func (c *Containerizer) Layout() cgroups.Layout { return c.layout }
