package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Service cgroups sit under the root beside the two subtrees and hold
// Slackline's own processes, each with a CPU weight of its own:
//
//	<root>/agent        the agent (AgentCgroup)
//	<root>/supervisors  the task supervisors (SupervisorsCgroup)
//
// Out of the agent's own cgroup, the supervisors outlive whatever ends that
// cgroup (a container runtime killing the agent's pod, systemd's
// KillMode=control-group); with a weight below the guaranteed subtree's,
// neither the agent's reactions nor the supervisors compete with
// guaranteed tasks on an equal footing.
const (
	AgentCgroup       = "agent"
	SupervisorsCgroup = "supervisors"
)

// ServiceLimits are a service cgroup's CPU share.
type ServiceLimits struct {
	// Weight is the CPU weight, in CPUs as a task's cpus count (CPUWeight,
	// CPUShares): 0.25 weighs a quarter of a guaranteed task with one cpu.
	Weight float64
	// Cap, when positive, caps the cgroup's CPU time at that many cores.
	Cap float64
}

// SetupService creates the service cgroup <root>/<name> in every hierarchy
// of the layout (keeping it if it exists, so a restarted agent finds it
// again) and sets its CPU weight and cap. SetupRoot must have run.
func (l Layout) SetupService(root, name string, lim ServiceLimits) (Paths, error) {
	rel := filepath.Join(root, name)
	p := l.PathsOf(rel)
	for _, dir := range p.Dirs() {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return p, wrap("create", dir, err)
		}
	}
	var file, value string
	switch l.Mode {
	case ModeV2:
		file, value = filepath.Join(p.Unified, "cpu.weight"), strconv.FormatUint(CPUWeight(lim.Weight), 10)
	case ModeHybrid:
		file, value = filepath.Join(p.CPU, "cpu.shares"), strconv.FormatUint(CPUShares(lim.Weight), 10)
	default:
		return p, fmt.Errorf("%w: unknown mode %q", ErrUnsupported, l.Mode)
	}
	if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
		return p, wrap("write", file, err)
	}
	if err := l.SetCPULimit(rel, lim.Cap, 0); err != nil {
		return p, err
	}
	return p, nil
}

// Join moves the process pid, with all its threads, into the cgroup in
// every hierarchy (its cgroup.procs files).
func (p Paths) Join(pid int) error {
	for _, file := range p.ProcsFiles() {
		if err := os.WriteFile(file, []byte(strconv.Itoa(pid)), 0); err != nil {
			return wrap("move process "+strconv.Itoa(pid)+" into", filepath.Dir(file), err)
		}
	}
	return nil
}
