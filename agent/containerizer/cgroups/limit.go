package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SetCPULimit caps the cgroup at rel to cpus CPUs with CFS bandwidth control
// (v2 cpu.max, v1 cpu.cfs_quota_us and cpu.cfs_period_us); cpus <= 0 removes
// the cap. Throttling the revocable subtree is how the QoS controller slows
// best-effort work down without killing it.
func (l Layout) SetCPULimit(rel string, cpus float64) error {
	quota, period, capped := CFSQuota(cpus)
	switch l.Mode {
	case ModeV2:
		value := "max " + strconv.FormatUint(CFSPeriodMicros, 10)
		if capped {
			value = fmt.Sprintf("%d %d", quota, period)
		}
		path := filepath.Join(l.Unified, rel, "cpu.max")
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			return wrap("write", path, err)
		}
		return nil
	case ModeHybrid:
		dir := filepath.Join(l.CPU, rel)
		if !capped {
			quota = -1
		} else if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.FormatUint(period, 10)), 0); err != nil {
			return wrap("write", filepath.Join(dir, "cpu.cfs_period_us"), err)
		}
		path := filepath.Join(dir, "cpu.cfs_quota_us")
		if err := os.WriteFile(path, []byte(strconv.FormatInt(quota, 10)), 0); err != nil {
			return wrap("write", path, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown mode %q", ErrUnsupported, l.Mode)
}

// CPULimit reads the cap SetCPULimit wrote: CPUs, or 0 when uncapped.
func (l Layout) CPULimit(rel string) (float64, error) {
	switch l.Mode {
	case ModeV2:
		path := filepath.Join(l.Unified, rel, "cpu.max")
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, wrap("read", path, err)
		}
		fields := strings.Fields(string(data))
		if len(fields) != 2 || fields[0] == "max" {
			return 0, nil
		}
		quota, err1 := strconv.ParseFloat(fields[0], 64)
		period, err2 := strconv.ParseFloat(fields[1], 64)
		if err1 != nil || err2 != nil || period <= 0 {
			return 0, fmt.Errorf("parse %s: %q", path, data)
		}
		return quota / period, nil
	case ModeHybrid:
		dir := filepath.Join(l.CPU, rel)
		q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		if err != nil {
			return 0, wrap("read", filepath.Join(dir, "cpu.cfs_quota_us"), err)
		}
		p, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err != nil {
			return 0, wrap("read", filepath.Join(dir, "cpu.cfs_period_us"), err)
		}
		quota, err1 := strconv.ParseFloat(strings.TrimSpace(string(q)), 64)
		period, err2 := strconv.ParseFloat(strings.TrimSpace(string(p)), 64)
		if err1 != nil || err2 != nil || period <= 0 {
			return 0, fmt.Errorf("parse CFS settings in %s", dir)
		}
		if quota <= 0 {
			return 0, nil
		}
		return quota / period, nil
	}
	return 0, fmt.Errorf("%w: unknown mode %q", ErrUnsupported, l.Mode)
}
