package cgroups

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// CFSPeriodMicros is the CFS bandwidth period used for hard CPU limits
// (the kernel's default, 100 ms).
const CFSPeriodMicros = 100000

// minCFSQuotaMicros is the smallest quota the kernel accepts (1 ms).
const minCFSQuotaMicros = 1000

// Limits is what a container's cgroup enforces.
type Limits struct {
	// CPUs is the task's cpus: its CPU weight and, with HardCPU, its cap.
	CPUs float64 `json:"cpus"`
	// HardCPU also caps CPU time at CPUs with CFS bandwidth control.
	HardCPU bool `json:"hard_cpu,omitempty"`
	// MemoryBytes is the memory limit; 0 means unlimited.
	MemoryBytes int64 `json:"memory_bytes"`
	// PidsMax bounds the processes and threads in the cgroup (pids.max),
	// where the layout has the pids controller; 0 means unlimited.
	PidsMax int64 `json:"pids_max,omitempty"`
	// Revocable says the container runs on revocable resources: its memory
	// is shaped by reclaim (memory.high below memory.max, swap allowed,
	// v1 soft limit 0) instead of protected (see MemoryQoS).
	Revocable bool `json:"revocable,omitempty"`
}

// CPUWeight is the cgroup v2 cpu.weight for cpus: cpus*100 clamped to the
// kernel's range [1, 10000], so one cpu weighs as much as the default (100).
func CPUWeight(cpus float64) uint64 {
	w := math.Round(cpus * 100)
	return uint64(min(max(w, 1), 10000))
}

// CPUShares is the cgroup v1 cpu.shares for cpus: cpus*1024, at least 2 (the
// kernel's minimum), so one cpu weighs as much as the default (1024).
func CPUShares(cpus float64) uint64 {
	s := math.Round(cpus * 1024)
	return uint64(max(s, 2))
}

// CFSQuota returns the CFS bandwidth quota and period (microseconds) that cap
// a cgroup at cpus CPUs, and false when cpus is 0 (no cap is possible: the
// container only gets a weight).
func CFSQuota(cpus float64) (quota int64, period uint64, ok bool) {
	if cpus <= 0 {
		return 0, 0, false
	}
	q := int64(math.Round(cpus * CFSPeriodMicros))
	return max(q, minCFSQuotaMicros), CFSPeriodMicros, true
}

// MemoryBytes converts a mem resource (MiB) to a limit in bytes; 0 stays 0
// (unlimited).
func MemoryBytes(mib float64) int64 {
	if mib <= 0 {
		return 0
	}
	return int64(math.Round(mib * 1024 * 1024))
}

// v2Resources is what a container's cgroup gets on cgroup v2. swap tells
// whether the kernel accounts swap (memory.swap.max exists).
func v2Resources(lim Limits, swap bool) *cgroup2.Resources {
	weight := CPUWeight(lim.CPUs)
	res := &cgroup2.Resources{CPU: &cgroup2.CPU{Weight: &weight}, Memory: &cgroup2.Memory{}}
	if quota, period, ok := CFSQuota(lim.CPUs); lim.HardCPU && ok {
		res.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
	}
	if lim.MemoryBytes > 0 {
		limit := lim.MemoryBytes
		res.Memory.Max = &limit
		q := MemoryQoSOf(lim)
		if q.High > 0 {
			res.Memory.High = &q.High
		}
		if q.Min > 0 {
			res.Memory.Min, res.Memory.Low = &q.Min, &q.Low
		}
		if swap && !lim.Revocable {
			zero := int64(0)
			res.Memory.Swap = &zero
		}
	}
	return res
}

// v1Resources is what a container's cgroups get on the v1 cpu and memory
// hierarchies. swap tells whether memory.memsw.limit_in_bytes exists.
func v1Resources(lim Limits, swap bool) *specs.LinuxResources {
	shares := CPUShares(lim.CPUs)
	res := &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}, Memory: &specs.LinuxMemory{}}
	if quota, period, ok := CFSQuota(lim.CPUs); lim.HardCPU && ok {
		res.CPU.Quota, res.CPU.Period = &quota, &period
	}
	if lim.MemoryBytes > 0 {
		limit := lim.MemoryBytes
		res.Memory.Limit = &limit
		soft := MemoryQoSOf(lim).SoftLimit
		res.Memory.Reservation = &soft
		if swap && !lim.Revocable {
			// memory+swap equal to memory: no swap.
			res.Memory.Swap = &limit
		}
	}
	return res
}

// SetupRoot creates root, its guaranteed subtree and the revocable subtree
// beside it (Subtree) in every hierarchy of the layout (keeping what
// exists), delegates the cpu and memory controllers down on v2, and puts
// the revocable subtree at the lowest CPU priority: v2 cpu.weight 1 and
// cpu.idle 1, v1 cpu.shares 2 and cpu.idle 1 (cpu.idle only where the
// kernel has it).
func (l Layout) SetupRoot(root string) error {
	if err := ValidateRoot(root); err != nil {
		return err
	}
	if l.Mode == ModeV2 {
		if err := l.checkDelegated(root); err != nil {
			return err
		}
	}
	var hierarchies []string
	switch l.Mode {
	case ModeV2:
		hierarchies = []string{l.Unified}
	case ModeHybrid:
		hierarchies = []string{l.CPU, l.Memory, l.Unified}
		if l.Pids != "" {
			hierarchies = append(hierarchies, l.Pids)
		}
	default:
		return fmt.Errorf("%w: unknown mode %q", ErrUnsupported, l.Mode)
	}
	for _, h := range hierarchies {
		for _, rel := range []string{root, Subtree(root, Guaranteed), Subtree(root, Revocable)} {
			dir := filepath.Join(h, rel)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return wrap("create", dir, err)
			}
			if l.Mode == ModeV2 {
				if err := enableControllers(dir, l.Pids != ""); err != nil {
					return err
				}
			}
		}
	}
	if err := l.setupMemoryQoS(root); err != nil {
		return err
	}
	revocable := Subtree(root, Revocable)
	switch l.Mode {
	case ModeV2:
		dir := filepath.Join(l.Unified, revocable)
		if !isIdle(dir) {
			weight := uint64(1)
			m, err := cgroup2.Load("/"+revocable, cgroup2.WithMountpoint(l.Unified))
			if err != nil {
				return fmt.Errorf("load %s: %w", dir, err)
			}
			if err := m.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Weight: &weight}}); err != nil {
				return wrap("write cpu.weight in", dir, err)
			}
		}
		return setIdle(dir)
	default:
		dir := filepath.Join(l.CPU, revocable)
		if !isIdle(dir) {
			shares := uint64(2)
			if err := cgroup1.NewCpu(l.Mountpoint).Create(revocable, &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}}); err != nil {
				return wrap("write cpu.shares in", dir, err)
			}
		}
		return setIdle(dir)
	}
}

// checkDelegated verifies that the parent of root hands the cpu and memory
// controllers down. It never changes that parent: it is not Slackline's.
func (l Layout) checkDelegated(root string) error {
	parent := filepath.Dir(filepath.Join(l.Unified, root))
	data, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s does not exist or is not a cgroup; create it or choose another cgroup root", ErrUnsupported, parent)
		}
		return wrap("read", filepath.Join(parent, "cgroup.subtree_control"), err)
	}
	enabled := strings.Fields(string(data))
	var missing []string
	for _, c := range []string{"cpu", "memory"} {
		if !slices.Contains(enabled, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s does not delegate the %s controller(s) to its children (cgroup.subtree_control: %q); enable them with `echo \"+cpu +memory\" > %s` or run the agent under systemd with Delegate=yes",
			ErrUnsupported, parent, strings.Join(missing, " and "), strings.TrimSpace(string(data)), filepath.Join(parent, "cgroup.subtree_control"))
	}
	return nil
}

// enableControllers hands cpu and memory (and pids) down from dir, one of
// our own cgroups.
func enableControllers(dir string, pids bool) error {
	file := filepath.Join(dir, "cgroup.subtree_control")
	controllers := "+cpu +memory"
	if pids {
		controllers += " +pids"
	}
	if err := os.WriteFile(file, []byte(controllers), 0o644); err != nil {
		return wrap("write", file, err)
	}
	return nil
}

// isIdle reports whether dir's cpu.idle is 1. The kernel refuses weight and
// shares writes on an idle group (EINVAL), so they are skipped then.
func isIdle(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cpu.idle"))
	return err == nil && strings.TrimSpace(string(data)) == "1"
}

// setIdle makes dir's group SCHED_IDLE where the kernel supports cpu.idle.
func setIdle(dir string) error {
	file := filepath.Join(dir, "cpu.idle")
	if !exists(file) {
		return nil
	}
	if err := os.WriteFile(file, []byte("1"), 0o644); err != nil {
		return wrap("write", file, err)
	}
	return nil
}

// Create makes the cgroup at rel in every hierarchy with the limits lim and
// returns its directories. It fails if the cgroup already exists. On error,
// whatever was created is removed again.
func (l Layout) Create(rel string, lim Limits) (p Paths, err error) {
	p = l.PathsOf(rel)
	var created []string
	defer func() {
		if err != nil {
			for _, d := range slices.Backward(created) {
				_ = removeDir(d)
			}
		}
	}()
	for _, d := range p.Dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			return p, wrap("create", d, err)
		}
		created = append(created, d)
	}
	switch l.Mode {
	case ModeV2:
		m, err := cgroup2.Load("/"+rel, cgroup2.WithMountpoint(l.Unified))
		if err != nil {
			return p, fmt.Errorf("load %s: %w", p.Unified, err)
		}
		swap := exists(filepath.Join(p.Unified, "memory.swap.max"))
		if err := m.Update(v2Resources(lim, swap)); err != nil {
			return p, wrap("write limits in", p.Unified, err)
		}
	case ModeHybrid:
		res := v1Resources(lim, exists(filepath.Join(l.Memory, "memory.memsw.limit_in_bytes")))
		if err := cgroup1.NewCpu(l.Mountpoint).Create(rel, res); err != nil {
			return p, wrap("write cpu limits in", p.CPU, err)
		}
		if err := cgroup1.NewMemory(l.Mountpoint).Create(rel, res); err != nil {
			return p, wrap("write memory limits in", p.Memory, err)
		}
	}
	if err := l.setPidsMax(p, lim.PidsMax); err != nil {
		return p, err
	}
	return p, nil
}

// Remove removes the cgroup's directories; ones already gone are fine. It
// fails (EBUSY) while a process is still in the cgroup.
func (p Paths) Remove() error {
	var errs []error
	for _, d := range p.Dirs() {
		if err := removeDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeDir removes one cgroup directory: rmdir on cgroupfs, where the control
// files go with it; a fake tree's directory holds real files (ENOTEMPTY) and
// is removed with its contents.
func removeDir(dir string) error {
	err := unix.Rmdir(dir)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTEMPTY):
		if !isCgroupfs(dir) {
			return os.RemoveAll(dir)
		}
	}
	return wrap("remove", dir, err)
}
