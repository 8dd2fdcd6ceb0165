package monitor

import (
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/internal/tick"
)

// refreshInterval is how long a container's figures that move slowly or
// only when it runs are repeated before they are read again: its memory
// files while it has not run since the last read, and its PSI files (the
// kernel updates their averages every 2 s). At 100 ms sampling an idle
// container then costs one control file read per pass instead of eight.
const refreshInterval = time.Second

// statRefreshInterval is how long an idle container's memory.stat,
// limit and events are repeated while its memory.current, re-read every
// refreshInterval, has not moved (#29): memory.stat is the costliest
// control file (the kernel formats some 40 lines), and what it splits
// rarely moves without the usage moving (LRU ageing of an idle
// container's page cache from active to inactive does, and shows within
// this bound).
const statRefreshInterval = 5 * time.Second

// memoryFormat names a memory controller's files and memory.stat keys.
type memoryFormat struct {
	// dir returns the container's directory in the memory hierarchy.
	dir func(p cgroups.Paths) string
	// usage, stat, limit and events are the control files.
	usage, stat, limit, events string
	// rss, cache, activeAnon, inactiveAnon and activeFile are memory.stat
	// keys.
	rss, cache, activeAnon, inactiveAnon, activeFile string
}

var (
	// v2Memory is the v2 memory controller.
	v2Memory = memoryFormat{dir: func(p cgroups.Paths) string { return p.Unified },
		usage: "memory.current", stat: "memory.stat", limit: "memory.max", events: "memory.events",
		rss: "anon", cache: "file", activeAnon: "active_anon", inactiveAnon: "inactive_anon", activeFile: "active_file"}
	// v1Memory is the v1 memory controller of a hybrid host: the
	// hierarchical total_* figures, which count the cgroup's descendants
	// as v2's do.
	v1Memory = memoryFormat{dir: func(p cgroups.Paths) string { return p.Memory },
		usage: "memory.usage_in_bytes", stat: "memory.stat", limit: "memory.limit_in_bytes", events: "memory.oom_control",
		rss: "total_rss", cache: "total_cache", activeAnon: "total_active_anon", inactiveAnon: "total_inactive_anon", activeFile: "total_active_file"}
)

// memorySampler reads a container's memory controller: charged memory,
// rss, cache and anonymous memory, the limit (Target.MemLimit when the
// cgroup has none) and OOM kills. A cgroup without the controller's files
// leaves those fields zero (the limit: Target.MemLimit).
type memorySampler struct {
	format                     *memoryFormat
	unified                    string
	usage, stat, limit, events controlFile
	// last is the latest read, repeated while the container has not run
	// since (see refreshInterval).
	last memoryRead
	// refresh is how long an idle container's memory.current is repeated
	// (the safety net's cadence, host.idleRefreshInterval).
	refresh time.Duration
}

// memoryRead is what one read of the memory files found.
type memoryRead struct {
	valid                        bool
	at                           time.Time // memory.current's last read
	statAt                       time.Time // the other files' last read
	cpuSecs                      float64   // the container's cpus_usage_secs then
	usage                        uint64
	rss, cache, anon, workingSet uint64
	limit, oomEvents             uint64
}

// newMemorySampler returns the constructor of memory samplers of format f.
func newMemorySampler(f memoryFormat) func(h *host, rel string) sampler {
	return func(h *host, rel string) sampler {
		p := h.layout.PathsOf(rel)
		dir := f.dir(p)
		return &memorySampler{format: &f, unified: p.Unified,
			usage: controlFileIn(dir, f.usage), stat: controlFileIn(dir, f.stat),
			limit: controlFileIn(dir, f.limit), events: controlFileIn(dir, f.events), refresh: h.idleRefreshInterval()}
	}
}

func (m *memorySampler) files() []*controlFile {
	return []*controlFile{&m.usage, &m.stat, &m.limit, &m.events}
}

func (m *memorySampler) sample(s *scratch, t *Target, u *Usage) error {
	st, f := u.Stats, m.format
	// A container that has not run since the last read (its CPU time, read
	// just before, has not grown) charged no memory of its own meanwhile:
	// its figures are repeated, and memory.current re-read at least every
	// m.refresh (Config.IdleRefresh, default refreshInterval; reclaim and other cgroups' page cache activity
	// change them too); the other files only when it moved, or every
	// statRefreshInterval.
	l := m.last
	idle := l.valid && st.CpusUsageSecs == l.cpuSecs && u.Time.After(l.at) && !u.Time.Before(l.statAt)
	if idle && !tick.Crossed(l.at, u.Time, m.refresh) {
		m.repeat(u)
		return nil
	}
	m.last.valid = false
	data, err := s.read(&m.usage, m.unified)
	if err != nil {
		return err
	}
	u.MemUsage, _ = parseUint(data)
	if idle && u.MemUsage == l.usage && !tick.Crossed(l.statAt, u.Time, statRefreshInterval) {
		m.last, m.last.at = l, u.Time
		m.repeat(u)
		return nil
	}
	if data, err = s.read(&m.stat, m.unified); err != nil {
		return err
	}
	var activeFile uint64
	forEachKey(data, func(key []byte, v uint64) {
		switch string(key) {
		case f.activeFile:
			activeFile = v
		case f.rss:
			st.MemRssBytes = v
		case f.cache:
			st.MemCacheBytes = v
		case f.activeAnon, f.inactiveAnon:
			st.MemAnonBytes += v
		}
	})
	// The working set: anonymous memory (rss) and the page cache in active
	// use; inactive cache is what reclaim takes first and costs nothing.
	st.MemWorkingSetBytes = st.MemRssBytes + activeFile
	if data, err = s.read(&m.limit, m.unified); err != nil {
		return err
	}
	if st.MemLimitBytes = parseLimit(data); st.MemLimitBytes == 0 {
		st.MemLimitBytes = t.MemLimit
	}
	if data, err = s.read(&m.events, m.unified); err != nil {
		return err
	}
	forEachKey(data, func(key []byte, v uint64) {
		if string(key) == "oom_kill" {
			st.OomEvents = v
		}
	})
	m.last = memoryRead{valid: true, at: u.Time, statAt: u.Time, cpuSecs: st.CpusUsageSecs, usage: u.MemUsage,
		rss: st.MemRssBytes, cache: st.MemCacheBytes, anon: st.MemAnonBytes, workingSet: st.MemWorkingSetBytes,
		limit: st.MemLimitBytes, oomEvents: st.OomEvents}
	return nil
}

// repeats implements repeater: the container is idle (its CPU time, as
// the previous sample had it, is the last read's) and its memory.current
// is not due (the first return of sample).
func (m *memorySampler) repeats(now time.Time, prev *Usage, _ activity) bool {
	l := m.last
	idle := l.valid && prev.Stats.CpusUsageSecs == l.cpuSecs && now.After(l.at) && !now.Before(l.statAt)
	return idle && !tick.Crossed(l.at, now, m.refresh)
}

// repeatsUntil implements repeater: memory.current's next refresh
// boundary (the other terms of repeats cannot turn false at a later now).
func (m *memorySampler) repeatsUntil(time.Time, *Usage, activity) time.Time {
	return tick.Next(m.last.at, m.refresh)
}

// repeat sets u's memory figures to the last read's.
func (m *memorySampler) repeat(u *Usage) {
	l, st := &m.last, u.Stats
	u.MemUsage = l.usage
	st.MemRssBytes, st.MemCacheBytes, st.MemAnonBytes, st.MemWorkingSetBytes = l.rss, l.cache, l.anon, l.workingSet
	st.MemLimitBytes, st.OomEvents = l.limit, l.oomEvents
}
