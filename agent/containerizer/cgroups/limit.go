package cgroups

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CFS bandwidth periods the kernel accepts.
const (
	minCFSPeriod = time.Millisecond
	maxCFSPeriod = time.Second
)

// SetCPULimit caps the cgroup at rel to cpus CPUs with CFS bandwidth control
// (v2 cpu.max, v1 cpu.cfs_quota_us and cpu.cfs_period_us), enforced over
// period (0: the kernel's default, 100 ms; clamped to [1 ms, 1 s]); cpus <= 0
// removes the cap. Throttling the revocable subtree is how the QoS controller
// slows best-effort work down without killing it; a short period makes the
// throttled spells short too (a group that used its quota waits for the next
// period), at the cost of more period timers.
func (l Layout) SetCPULimit(rel string, cpus float64, period time.Duration) error {
	quota, periodMicros, capped := CFSQuota(cpus)
	if period > 0 && capped {
		period = min(max(period, minCFSPeriod), maxCFSPeriod)
		periodMicros = uint64(period / time.Microsecond)
		quota = max(int64(math.Round(cpus*float64(periodMicros))), minCFSQuotaMicros)
	}
	switch l.Mode {
	case ModeV2:
		value := "max " + strconv.FormatUint(CFSPeriodMicros, 10)
		if capped {
			value = fmt.Sprintf("%d %d", quota, periodMicros)
		}
		path := filepath.Join(l.Unified, rel, "cpu.max")
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			return wrap("write", path, err)
		}
		return nil
	case ModeHybrid:
		dir := filepath.Join(l.CPU, rel)
		quotaFile, periodFile := filepath.Join(dir, "cpu.cfs_quota_us"), filepath.Join(dir, "cpu.cfs_period_us")
		if !capped {
			if err := os.WriteFile(quotaFile, []byte("-1"), 0); err != nil {
				return wrap("write", quotaFile, err)
			}
			return nil
		}
		for _, w := range []struct{ file, value string }{
			{periodFile, strconv.FormatUint(periodMicros, 10)}, {quotaFile, strconv.FormatInt(quota, 10)},
		} {
			if err := os.WriteFile(w.file, []byte(w.value), 0); err != nil {
				return wrap("write", w.file, err)
			}
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
		data, err := l.Files.ReadFile(path)
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
		q, err := l.Files.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		if err != nil {
			return 0, wrap("read", filepath.Join(dir, "cpu.cfs_quota_us"), err)
		}
		p, err := l.Files.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
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
