package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// sampler reads one source's figures of one container (a controller's
// control files, PSI, eBPF) into a Usage. Every container has one sampler
// per source the monitor chose at start (see sources); the sampler holds
// that source's open files and the previous values it computes intervals
// from. It is only used with Monitor.sampleMu held.
type sampler interface {
	// sample adds the source's figures of the container to u, whose Time
	// and Stats are set; t is the target as the pass began. It returns
	// errVanished when the container's cgroup is gone (the sampler is
	// then closed and replaced by a fresh one). The sampler of an
	// optional source sets nothing in u when it fails; a required
	// source's failure discards the whole sample.
	sample(s *scratch, t *Target, u *Usage) error
	// files returns the control files the sampler may keep open.
	files() []*controlFile
}

// repeater is a sampler that can tell, without reading anything, that its
// figures at now would be those of the container's previous sample prev,
// given eBPF's unchanged figures (whose activity a is prev's): no file is
// due, and no interval figure can be other than 0. Every sampler of the
// chosen sources implements it (#29: an idle container is repeated, not
// sampled; Monitor.repeats).
type repeater interface {
	repeats(now time.Time, prev *Usage, a activity) bool
	// repeatsUntil, asked after repeats reported true at now, returns an
	// instant until which repeats keeps reporting true for any later now
	// with the same prev and a (no file read and no sample taken
	// meanwhile): the first boundary at which a file of the sampler may
	// become due; the zero time when none can (Monitor.repeats keeps the
	// earliest of a container's samplers, so that a repeated container
	// costs a comparison, not a call per sampler: #29).
	repeatsUntil(now time.Time, prev *Usage, a activity) time.Time
}

// host is what New knows of the machine when it chooses the sources.
type host struct {
	layout cgroups.Layout
	ebpf   EBPF // nil: no eBPF programs
	// idleRefresh is Config.IdleRefresh; 0: refreshInterval.
	idleRefresh time.Duration
}

// idleRefreshInterval returns the safety net's cadence (Config.IdleRefresh,
// default refreshInterval).
func (h *host) idleRefreshInterval() time.Duration {
	if h.idleRefresh > 0 {
		return h.idleRefresh
	}
	return refreshInterval
}

// source is one kind of sampler: whether it applies to the host (decided
// once, by New) and how to make one for a container.
type source struct {
	// name is how Sources and the start-up log name it.
	name string
	// enabled reports whether the source applies to h.
	enabled func(h *host) bool
	// optional sources fail softly: their error is reported and their
	// fields stay unset, and the rest of the sample is published. A
	// required source's error discards the container's sample for the
	// pass, so that no interval is computed against half a sample.
	optional bool
	// newSampler returns a sampler for the container whose cgroup is rel
	// (relative to every hierarchy, as Target.CgroupPath).
	newSampler func(h *host, rel string) sampler
}

// sources lists every sampler the monitor knows, in the order they run
// for each container: the cgroup layout picks one CPU and one memory
// sampler, PSI is read wherever the kernel has it (a cgroup without the
// files leaves the pressure fields unset), and eBPF runs when Config.EBPF
// is set. Order matters once: the eBPF sampler runs after the memory one,
// as oom_events is the larger of the cgroup's counter and eBPF's. New
// sources join this list; nothing registers itself.
var sources = []source{
	{name: "v2-cpu", enabled: layoutIs(cgroups.ModeV2), newSampler: newV2CPU},
	{name: "hybrid-cpu", enabled: layoutIs(cgroups.ModeHybrid), newSampler: newHybridCPU},
	{name: "v2-memory", enabled: layoutIs(cgroups.ModeV2), newSampler: newMemorySampler(v2Memory)},
	{name: "hybrid-memory", enabled: layoutIs(cgroups.ModeHybrid), newSampler: newMemorySampler(v1Memory)},
	{name: "psi", enabled: func(*host) bool { return true }, newSampler: newPressureSampler},
	{name: "ebpf", enabled: func(h *host) bool { return h.ebpf != nil }, optional: true, newSampler: newEBPFSampler},
}

func layoutIs(mode cgroups.Mode) func(*host) bool {
	return func(h *host) bool { return h.layout.Mode == mode }
}

// chooseSources returns the sources that apply to h, in sampling order.
func chooseSources(h *host) []source {
	var chosen []source
	for _, s := range sources {
		if s.enabled(h) {
			chosen = append(chosen, s)
		}
	}
	return chosen
}

// layoutOf returns the layout the containerizer uses for mode (ModeV2 or
// ModeHybrid) with the hierarchies mounted under mount.
func layoutOf(mode cgroups.Mode, mount string) cgroups.Layout {
	if mode == cgroups.ModeHybrid {
		return cgroups.Layout{Mode: cgroups.ModeHybrid, Mountpoint: mount, Unified: filepath.Join(mount, "unified"),
			CPU: filepath.Join(mount, "cpu"), Memory: filepath.Join(mount, "memory")}
	}
	return cgroups.Layout{Mode: cgroups.ModeV2, Mountpoint: mount, Unified: mount}
}

// scratch is what the samplers of one pass share: the buffer control
// files are read into and the buffer of histogram deltas. Samplers do not
// keep slices of it between calls.
type scratch struct {
	buf    []byte
	deltas []uint64
	// The container's eBPF figures, read before its samplers run (see
	// ebpfSampler.fetch), and what they say of its activity (known false
	// without them).
	ebpf     EBPFStats
	ebpfErr  error
	fetched  bool // ebpf and ebpfErr are this container's, not yet merged
	activity activity
	// slabs for the samples' messages; timestamp is the pass's, shared by
	// its samples.
	slabs     slabs
	timestamp *timestamppb.Timestamp
}

func newScratch() *scratch { return &scratch{buf: make([]byte, 8<<10)} }

// slabSize is how many messages (or buckets) one allocation of a slab
// holds.
const slabSize = 64

// slabs hands out the messages of the samples from slabs of slabSize, so
// that a pass allocates a few times rather than several times per
// container (the garbage collector's work was a tenth of the agent's CPU
// with 100 containers). Published samples are read-only, so sharing a slab
// is safe; a slab lives as long as one sample from it is referenced (the
// latest samples: a few passes' worth).
type slabs struct {
	stats   []slacklinev1.ResourceStatistics
	runq    []slacklinev1.RunQueueLatency
	buckets []uint64
}

// newStats returns a zero ResourceStatistics.
func (s *slabs) newStats() *slacklinev1.ResourceStatistics {
	if len(s.stats) == 0 {
		s.stats = make([]slacklinev1.ResourceStatistics, slabSize)
	}
	st := &s.stats[0]
	s.stats = s.stats[1:]
	return st
}

// newRunq returns a zero RunQueueLatency.
func (s *slabs) newRunq() *slacklinev1.RunQueueLatency {
	if len(s.runq) == 0 {
		s.runq = make([]slacklinev1.RunQueueLatency, slabSize)
	}
	rq := &s.runq[0]
	s.runq = s.runq[1:]
	return rq
}

// clone returns a copy of b whose capacity is its length (an append to it
// cannot reach the next copy); nil for an empty b.
func (s *slabs) clone(b []uint64) []uint64 {
	if len(b) == 0 {
		return nil
	}
	if len(s.buckets) < len(b) {
		s.buckets = make([]uint64, max(slabSize*8, len(b)))
	}
	c := s.buckets[:len(b):len(b)]
	copy(c, b)
	s.buckets = s.buckets[len(b):]
	return c
}

// read reads one control file of a container whose v2 directory is
// unified. It returns nil data for a file the cgroup does not have, and
// errVanished when the cgroup itself is gone: its directory in the v2
// tree, which exists in both layouts, is the witness (a hierarchy the
// containerizer does not populate, such as a separately mounted v1
// cpuacct, only makes its files absent). The data aliases s.buf until the
// next read.
func (s *scratch) read(f *controlFile, unified string) ([]byte, error) {
	data, err := f.read(&s.buf)
	if errors.Is(err, errNotExist) {
		if _, statErr := os.Stat(unified); statErr != nil {
			return nil, errVanished
		}
		f.absent = true
		return nil, nil
	}
	return data, err
}

// controlFileIn returns the (not yet opened) control file name in dir.
func controlFileIn(dir, name string) controlFile {
	return controlFile{path: filepath.Join(dir, name)}
}
