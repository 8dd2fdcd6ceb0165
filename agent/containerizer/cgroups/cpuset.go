package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ParseCPUList parses a kernel CPU list such as "0-3,8,10-11" into sorted,
// distinct CPU numbers. An empty list is no CPU.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 {
			return nil, fmt.Errorf("invalid CPU list %q", s)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				return nil, fmt.Errorf("invalid CPU list %q", s)
			}
		}
		for cpu := first; cpu <= last; cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// FormatCPUList formats CPUs as a kernel CPU list ("0-3,8"), sorted and
// without duplicates.
func FormatCPUList(cpus []int) string {
	s := slices.Clone(cpus)
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// SetupCPUSet prepares root's revocable subtree (Subtree) for CPU sets, so
// that SetCPUs can confine it to some CPUs. On hybrid hosts it creates it in
// the v1 cpuset hierarchy (Layout.CPUSet) with the parent's cpuset.cpus and
// cpuset.mems, which a v1 cpuset must have before a process can join it;
// revocable containers join that directory (Paths.CPUSet), not one of their
// own, so the subtree's CPUs can change without touching its children. On
// pure v2 the parent of the subtree (root's parent) must delegate the cpuset
// controller; containers inherit the subtree's CPUs. It returns an error
// wrapping ErrUnsupported when the host has no usable cpuset controller,
// and never changes a cgroup that is not Slackline's.
func (l Layout) SetupCPUSet(root string) error {
	if l.CPUSet == "" {
		return fmt.Errorf("%w: no cpuset controller at %s", ErrUnsupported, l.Mountpoint)
	}
	if err := ValidateRoot(root); err != nil {
		return err
	}
	revocable := Subtree(root, Revocable)
	if l.Mode == ModeV2 {
		parent := filepath.Dir(filepath.Join(l.Unified, revocable))
		data, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
		if err != nil {
			return wrap("read", filepath.Join(parent, "cgroup.subtree_control"), err)
		}
		if !slices.Contains(strings.Fields(string(data)), "cpuset") {
			return fmt.Errorf("%w: %s does not delegate the cpuset controller (cgroup.subtree_control: %q); revocable work cannot be confined to CPUs",
				ErrUnsupported, parent, strings.TrimSpace(string(data)))
		}
		return nil
	}
	for _, rel := range []string{revocable} {
		dir := filepath.Join(l.CPUSet, rel)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return wrap("create", dir, err)
		}
		for _, name := range []string{"cpuset.cpus", "cpuset.mems"} {
			if err := inherit(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// inherit copies the parent's value of a v1 cpuset file into an empty one.
func inherit(file string) error {
	if data, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(data)) != "" {
		return nil
	}
	parent := filepath.Join(filepath.Dir(filepath.Dir(file)), filepath.Base(file))
	value, err := os.ReadFile(parent)
	if err != nil {
		return wrap("read", parent, err)
	}
	if err := os.WriteFile(file, value, 0o644); err != nil {
		return wrap("write", file, err)
	}
	return nil
}

// SetCPUs confines the cgroup at rel (a subtree set up by SetupCPUSet) and
// everything under it to cpus; nil or empty gives it every CPU its parent
// has. The kernel refuses CPUs outside the parent's (EINVAL).
func (l Layout) SetCPUs(rel string, cpus []int) error {
	if l.CPUSet == "" {
		return fmt.Errorf("%w: no cpuset controller", ErrUnsupported)
	}
	var file, value string
	switch l.Mode {
	case ModeV2:
		// An empty cpuset.cpus uses the nearest ancestor's CPUs.
		file, value = filepath.Join(l.Unified, rel, "cpuset.cpus"), FormatCPUList(cpus)+"\n"
	default:
		file, value = filepath.Join(l.CPUSet, rel, "cpuset.cpus"), FormatCPUList(cpus)
		if len(cpus) == 0 {
			parent, err := os.ReadFile(filepath.Join(l.CPUSet, filepath.Dir(rel), "cpuset.cpus"))
			if err != nil {
				return wrap("read", filepath.Join(l.CPUSet, filepath.Dir(rel), "cpuset.cpus"), err)
			}
			value = strings.TrimSpace(string(parent))
		}
	}
	err := os.WriteFile(file, []byte(value), 0)
	if l.Mode == ModeV2 && len(cpus) == 0 && errors.Is(err, syscall.ENOSPC) {
		// The kernel refuses to empty the cpuset.cpus of a cgroup that
		// has processes (ENOSPC: 6.1 and 6.12 alike), so a populated
		// subtree gets its parent's CPUs, listed.
		parent := filepath.Join(filepath.Dir(file), "..", "cpuset.cpus.effective")
		data, rerr := os.ReadFile(parent)
		if rerr != nil {
			return wrap("read", parent, rerr)
		}
		value = strings.TrimSpace(string(data)) + "\n"
		err = os.WriteFile(file, []byte(value), 0)
	}
	if err != nil {
		return wrap("write "+strings.TrimSpace(value)+" to", file, err)
	}
	return nil
}

// CPUs returns the CPUs the cgroup at rel may run on (the kernel's
// effective CPU list).
func (l Layout) CPUs(rel string) ([]int, error) {
	if l.CPUSet == "" {
		return nil, fmt.Errorf("%w: no cpuset controller", ErrUnsupported)
	}
	file := filepath.Join(l.CPUSet, rel, "cpuset.effective_cpus")
	if l.Mode == ModeV2 {
		file = filepath.Join(l.Unified, rel, "cpuset.cpus.effective")
	}
	data, err := l.Files.ReadFile(file)
	if err != nil {
		return nil, wrap("read", file, err)
	}
	return ParseCPUList(string(data))
}
