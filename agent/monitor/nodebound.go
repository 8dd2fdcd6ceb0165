package monitor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/tick"
)

// nodeBoundRescanInterval is how often the memory limits of the agent's
// cgroup root and its ancestors are re-read (#28): an operator may change
// a slice's MemoryMax while the agent runs, but limits move rarely, and
// with no finite limit nothing else is read per node sample.
const nodeBoundRescanInterval = 10 * time.Second

// memoryBound is what the node's memory is bounded by: the lowest finite
// memory limit among the agent's cgroup root and its ancestors, with that
// cgroup's charged memory, inactive page cache and memory pressure.
type memoryBound struct {
	// limit is the cgroup's memory limit in bytes (0: none).
	limit uint64
	// usage is its charged memory (v2 memory.current, v1
	// memory.usage_in_bytes) and inactiveFile its inactive page cache
	// (v2 memory.stat inactive_file, v1 total_inactive_file), which the
	// kernel reclaims first.
	usage, inactiveFile uint64
	// pressure is the cgroup's memory.pressure in the v2 tree (nil: none,
	// a kernel without PSI or a layout without the v2 tree): the stalls of
	// the node's own tasks, where /proc/pressure/memory counts every
	// tenant's of the host.
	pressure *slacklinev1.Pressure
}

// pickBound returns the index of the lowest of limits below hostTotal (0
// stands for no limit), or -1 when none is: a limit at or above the host's
// memory bounds nothing.
func pickBound(hostTotal uint64, limits []uint64) int {
	best := -1
	for i, l := range limits {
		if l == 0 || l >= hostTotal {
			continue
		}
		if best < 0 || l < limits[best] {
			best = i
		}
	}
	return best
}

// boundedMemory returns the node's total and available memory given the
// host's (/proc/meminfo MemTotal and MemAvailable) and b: with a limit
// below the host's total, the total is the limit and the available memory
// the smaller of the host's and what the limit leaves beside the bounding
// cgroup's usage net of its inactive page cache. Without such a limit the
// host's figures are returned.
func boundedMemory(hostTotal, hostAvail uint64, b memoryBound) (total, avail uint64) {
	if b.limit == 0 || b.limit >= hostTotal {
		return hostTotal, hostAvail
	}
	used := b.usage - min(b.usage, b.inactiveFile)
	return b.limit, min(hostAvail, b.limit-min(b.limit, used))
}

// nodeBound reads the memory limits of the agent's cgroup root and its
// ancestors every nodeBoundRescanInterval and, while one bounds the node,
// that cgroup's usage and memory.stat at every node sample. Guarded by
// Monitor.sampleMu.
type nodeBound struct {
	// dirs are the cgroup root's directories in the memory hierarchy, the
	// outermost ancestor first and the root itself last; pressureDirs the
	// same in the v2 tree, where PSI is (nil without one).
	dirs, pressureDirs []string
	// limitName, usageName, statName and inactiveKey name the memory
	// controller's files and memory.stat key.
	limitName, usageName, statName, inactiveKey string

	scannedAt time.Time // when the limits were last read (zero: never)
	chosen    int       // index in dirs of the bounding cgroup, -1: none
	limit     uint64    // its limit
	usage     controlFile
	stat      controlFile
	pressure  controlFile
}

// newNodeBound returns the reader of the limits bounding the node for the
// cgroup root (relative to every hierarchy) in layout, or nil when root is
// empty or the layout has no memory hierarchy.
func newNodeBound(layout cgroups.Layout, root string) (*nodeBound, error) {
	if root == "" {
		return nil, nil
	}
	if err := cgroups.ValidateRoot(root); err != nil {
		return nil, fmt.Errorf("cgroup root: %w", err)
	}
	b := &nodeBound{chosen: -1}
	var top string
	switch layout.Mode {
	case cgroups.ModeV2:
		top = layout.Unified
		b.limitName, b.usageName, b.statName, b.inactiveKey = "memory.max", "memory.current", "memory.stat", "inactive_file"
	case cgroups.ModeHybrid:
		top = layout.Memory
		b.limitName, b.usageName, b.statName, b.inactiveKey = "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "total_inactive_file"
	}
	if top == "" {
		return nil, nil
	}
	parts := strings.Split(root, "/")
	for i := range parts {
		b.dirs = append(b.dirs, filepath.Join(top, filepath.Join(parts[:i+1]...)))
		if layout.Unified != "" {
			b.pressureDirs = append(b.pressureDirs, filepath.Join(layout.Unified, filepath.Join(parts[:i+1]...)))
		}
	}
	return b, nil
}

// rescan re-reads every directory's limit and chooses the lowest below
// hostTotal. A missing directory or limit file (a cgroup without the
// memory controller) has no limit. It reports whether the choice changed.
func (b *nodeBound) rescan(now time.Time, hostTotal uint64) (bool, error) {
	b.scannedAt = now
	limits := make([]uint64, len(b.dirs))
	var errs []error
	for i, dir := range b.dirs {
		data, err := os.ReadFile(filepath.Join(dir, b.limitName))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("node memory bound: %w", err))
			}
			continue
		}
		limits[i] = parseLimit(data)
	}
	chosen := pickBound(hostTotal, limits)
	limit := uint64(0)
	if chosen >= 0 {
		limit = limits[chosen]
	}
	changed := chosen != b.chosen || limit != b.limit
	if chosen != b.chosen {
		b.close()
		b.usage, b.stat, b.pressure = controlFile{}, controlFile{}, controlFile{}
		if chosen >= 0 {
			b.usage = controlFileIn(b.dirs[chosen], b.usageName)
			b.stat = controlFileIn(b.dirs[chosen], b.statName)
			if b.pressureDirs != nil {
				b.pressure = controlFileIn(b.pressureDirs[chosen], "memory.pressure")
			}
		}
	}
	b.chosen, b.limit = chosen, limit
	return changed, errors.Join(errs...)
}

// read returns the bound at now: the limits are re-read when
// nodeBoundRescanInterval has passed since the last scan (or the clock went
// back); the bounding cgroup's usage and memory.stat are read only while
// there is one. buf is the scratch buffer control files are read into.
func (b *nodeBound) read(now time.Time, hostTotal uint64, buf *[]byte) (bound memoryBound, changed bool, err error) {
	if b.scannedAt.IsZero() || tick.Crossed(b.scannedAt, now, nodeBoundRescanInterval) || now.Before(b.scannedAt) {
		changed, err = b.rescan(now, hostTotal)
	}
	if b.chosen < 0 {
		return memoryBound{}, changed, err
	}
	data, rerr := b.usage.read(buf)
	if rerr != nil {
		b.scannedAt = time.Time{} // the cgroup may be gone: look again next sample
		return memoryBound{}, changed, errors.Join(err, fmt.Errorf("node memory bound: %s: %w", b.usage.path, rerr))
	}
	bound.usage, _ = parseUint(data)
	if data, rerr = b.stat.read(buf); rerr != nil {
		b.scannedAt = time.Time{}
		return memoryBound{}, changed, errors.Join(err, fmt.Errorf("node memory bound: %s: %w", b.stat.path, rerr))
	}
	forEachKey(data, func(key []byte, v uint64) {
		if string(key) == b.inactiveKey {
			bound.inactiveFile = v
		}
	})
	bound.limit = b.limit
	// Without the file (no PSI, or the cgroup missing from the v2 tree)
	// the node keeps the host's pressure; it is not looked for again
	// until the bound changes.
	switch data, perr := b.pressure.read(buf); {
	case errors.Is(perr, errNotExist):
		b.pressure.absent = true
	case perr != nil:
		err = errors.Join(err, fmt.Errorf("node memory bound: %w", perr))
	case data != nil:
		bound.pressure = pressure(parsePressure(data))
	}
	return bound, changed, err
}

// close closes the bounding cgroup's files (reopened by the next read).
func (b *nodeBound) close() {
	b.usage.close()
	b.stat.close()
	b.pressure.close()
}

// boundNodeMemory bounds the node's memory figures in u (read from
// /proc/meminfo) by the lowest memory limit of the agent's cgroup root and
// its ancestors (see Config.CgroupRoot), and takes that cgroup's memory
// pressure for the node's (read from /proc/pressure/memory) where the v2
// tree has it. Called by sampleNode with sampleMu held; a node whose
// MemTotal could not be read is left alone.
func (m *Monitor) boundNodeMemory(now time.Time, u *Usage) error {
	b, st := m.nodeBound, u.Stats
	if b == nil || st.MemLimitBytes == 0 {
		return nil
	}
	bound, changed, err := b.read(now, st.MemLimitBytes, &m.scratch.buf)
	if changed {
		if b.chosen >= 0 {
			m.log.Info("monitor: node memory bounded by a cgroup limit", "cgroup", b.dirs[b.chosen], "limit_bytes", b.limit,
				"host_total_bytes", st.MemLimitBytes)
		} else {
			m.log.Info("monitor: node memory no longer bounded by a cgroup limit")
		}
	}
	if bound.limit == 0 {
		return err
	}
	st.MemLimitBytes, st.MemAvailableBytes = boundedMemory(st.MemLimitBytes, st.MemAvailableBytes, bound)
	u.MemUsage = st.MemLimitBytes - min(st.MemLimitBytes, st.MemAvailableBytes)
	if bound.pressure != nil {
		st.MemoryPressure = bound.pressure
	}
	return err
}

// MemoryLimit returns the limit that bounds the node's memory, the same one
// the node samples use (see Config.CgroupRoot): the lowest finite memory
// limit below hostTotal (bytes) among the agent's cgroup root and its
// ancestors, and that cgroup's directory; 0 and "" when none does (no
// cgroup root, no memory hierarchy, or no such limit). It reads the limits
// now, apart from the sampling loop's cached scan, so it may be called
// before the first sample (the agent sizes its mem resource with it). An
// unreadable limit file is an error beside whatever the others gave.
func (m *Monitor) MemoryLimit(hostTotal uint64) (limit uint64, cgroup string, err error) {
	b, err := newNodeBound(m.host.layout, m.cfg.CgroupRoot)
	if err != nil || b == nil {
		return 0, "", err
	}
	defer b.close()
	_, err = b.rescan(m.cfg.Now(), hostTotal)
	if b.chosen < 0 {
		return 0, "", err
	}
	return b.limit, b.dirs[b.chosen], err
}
