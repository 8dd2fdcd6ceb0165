package estimator

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/slackline/slackline/resources"
)

// member is one guaranteed container or protected service as the slack
// computation sees it.
type member struct {
	// key identifies the member across calls.
	key       memberKey
	container *Container
	protected bool
	// window holds the finite samples in (Now-Window, Now], oldest first.
	window []Sample
	// memPeak, when set, keeps the member's working-set peak across
	// calls (fast and calibrated); memNeedOf rescans the window without it.
	memPeak *memPeakTracker
	// index is the member's place in this call's members.
	index int
	// state is what fast and calibrated keep of the member between calls
	// (fastEstimator.track; nil for the other estimators).
	state *memberState
}

// memberKey identifies a member across calls: its container's or
// service's ID and which of the two it is. A struct rather than a string
// built per member and call ("c/<id>"), which cost an allocation per
// member per estimate (#29).
type memberKey struct {
	id        string
	protected bool
}

// cpuPredictor returns the CPU a guaranteed member is predicted to need until
// the next estimate, before the margin. It is only called for members with at
// least MinSamples samples in the window.
type cpuPredictor func(m member, now time.Time) float64

// guaranteedMembers returns the containers and services whose usage is
// guaranteed use, each with its window of samples.
func guaranteedMembers(in Input, window time.Duration) []member {
	return membersInto(make([]member, 0, len(in.Containers)+len(in.Protected)), in, window)
}

// membersInto is guaranteedMembers appended to members (an empty buffer
// the caller reuses from call to call, cleared after each: it points into
// the Input).
func membersInto(members []member, in Input, window time.Duration) []member {
	add := func(c *Container, protected bool) {
		members = append(members, member{
			key: memberKey{id: c.ID, protected: protected}, container: c, protected: protected, index: len(members),
			window: windowOf(c.History, in.Now, window, c.HistoryChecked),
		})
	}
	for i := range in.Containers {
		if !in.Containers[i].Revocable {
			add(&in.Containers[i], false)
		}
	}
	for i := range in.Protected {
		add(&in.Protected[i], true)
	}
	return members
}

// windowOf returns the samples of history (oldest first) in
// (now-window, now] with finite, non-negative CPU: a bad sample from the
// monitor is dropped rather than read as zero use. A checked history
// (Container.HistoryChecked) has no such sample and is not walked. The
// result shares history's array unless a sample had to be dropped; it is
// only read.
func windowOf(history []Sample, now time.Time, window time.Duration, checked bool) []Sample {
	start := now.Add(-window)
	// The agent's histories end at or before now: one comparison finds
	// hi, and lo is searched below it (#29).
	hi := len(history)
	if hi > 0 && history[hi-1].Time.After(now) {
		hi = sort.Search(len(history), func(i int) bool { return history[i].Time.After(now) })
	}
	lo := searchAfterFromHead(history[:hi], start)
	in := history[lo:hi]
	if checked {
		return in
	}
	for i, s := range in {
		if goodSample(s) {
			continue
		}
		out := append([]Sample(nil), in[:i]...)
		for _, s := range in[i+1:] {
			if goodSample(s) {
				out = append(out, s)
			}
		}
		return out
	}
	return in
}

func goodSample(s Sample) bool { return s.Usable() }

// searchAfter returns the index of the first sample of history (oldest
// first) stamped after t, len(history) if none is: sort.Search's answer,
// found without the search when nothing or only the newest sample is
// after t (the estimators' case at every call: one new sample). A binary
// search over a long history reads a dozen cache lines far apart, most of
// an idle member's cost with 100 containers (#29).
func searchAfter(history []Sample, t time.Time) int {
	n := len(history)
	switch {
	case n == 0 || !history[n-1].Time.After(t):
		return n
	case n == 1 || !history[n-2].Time.After(t):
		return n - 1
	}
	return sort.Search(n, func(i int) bool { return history[i].Time.After(t) })
}

// searchAfterFromHead is searchAfter for a t near history's start (a
// window's start, when the history kept is about a window long): it
// looks at the first two samples before searching.
func searchAfterFromHead(history []Sample, t time.Time) int {
	n := len(history)
	switch {
	case n == 0 || history[0].Time.After(t):
		return 0
	case n == 1 || history[1].Time.After(t):
		return 1
	}
	return sort.Search(n, func(i int) bool { return history[i].Time.After(t) })
}

// slackOf computes the raw (pre-hysteresis) estimate:
//
//	cpus = max(0, min(Σ alloc − Σ need, Total.cpus − Σ need))
//	need = predicted peak + Margin × alloc
//
// over guaranteed containers and protected services; the Total term only
// when Total has cpus. A member with fewer than MinSamples samples in the
// window is taken to need its whole allocation. A protected service's alloc
// is its reservation, or its peak in the window when it has none. Memory is
// the same with memNeedOf's need (the working-set peak over MemoryWindow
// plus MemoryMargin), when cfg.Memory is set, and also at most the node's
// bound (nodeMemBound); the account says which bound set it. Bandwidth is
// bandwidthSlack's.
func slackOf(in Input, cfg Config, members []member, predictCPU cpuPredictor) (resources.Resources, MemoryAccount) {
	var cpuAlloc, cpuNeed, memAlloc, memNeed float64
	for _, m := range members {
		c := m.container
		allocCPU, allocMem := c.Allocated.CPUs(), c.Allocated.Mem()
		enough := len(m.window) >= cfg.MinSamples
		if m.protected {
			if allocCPU == 0 && enough {
				allocCPU = cpuPeak(m.window)
			}
			if allocMem == 0 && enough {
				allocMem = mib(memPeak(m.window))
			}
		}
		cpuAlloc += allocCPU
		memAlloc += allocMem
		if !enough {
			cpuNeed += allocCPU
			memNeed += allocMem
			continue
		}
		cpuNeed += predictCPU(m, in.Now) + cfg.Margin*allocCPU
		if cfg.Memory {
			memNeed += memNeedOf(m, in.Now, cfg, allocMem)
		}
	}
	cpus := cpuAlloc - cpuNeed
	if total := in.Total.CPUs(); total > 0 {
		cpus = min(cpus, total-cpuNeed)
	}
	var account MemoryAccount
	if cfg.Memory {
		account = memoryAccountOf(in, memAlloc, memNeed)
	}
	return resources.New(max(0, cpus), account.EstimateMiB, 0).With(resources.Bandwidth, bandwidthSlack(in, cfg, members)), account
}

// memoryAccountOf is the memory estimate (MiB) of guaranteed work
// allocated alloc MiB and needing need MiB, with the bounds it was taken
// from: the allocations, the agent's total (when in.Total has mem) and the
// node (when in.Node is known), the least of them setting it (on a tie,
// the first in that order).
func memoryAccountOf(in Input, alloc, need float64) MemoryAccount {
	a := MemoryAccount{
		Bound: MemoryBoundAllocations, AllocatedMiB: alloc, NeedMiB: need,
		AllocationsMiB: alloc - need, Node: in.Node,
	}
	least := a.AllocationsMiB
	if total := in.Total.Mem(); total > 0 {
		a.TotalMiB, a.HasTotal = total-need, true
		if a.TotalMiB < least {
			least, a.Bound = a.TotalMiB, MemoryBoundTotal
		}
	}
	if bound, other, working, ok := nodeMemBound(in, need); ok {
		a.NodeMiB, a.HasNode, a.OtherBytes, a.WorkingSetBytes = bound, true, other, working
		if bound < least {
			least, a.Bound = bound, MemoryBoundNode
		}
	}
	a.EstimateMiB = max(0, least)
	return a
}

// nodeMemBound is the memory slack (MiB) the node can back without going
// under in.Node.KeepFreeBytes of available memory when guaranteed work
// needs memNeed MiB (NodeMemory's formula), with the other use and the
// sum of the latest working sets it was taken from (bytes); ok is false
// when the node's memory is not known.
func nodeMemBound(in Input, memNeed float64) (bound float64, other, working uint64, ok bool) {
	node := in.Node
	if node.TotalBytes == 0 || node.AvailableBytes == 0 {
		return 0, 0, 0, false
	}
	for _, list := range [][]Container{in.Containers, in.Protected} {
		for i := range list {
			working += latestMemBytes(list[i].History, in.Now)
		}
	}
	used := node.TotalBytes - min(node.TotalBytes, node.AvailableBytes)
	other = used - min(used, working)
	return mib(node.TotalBytes) - mib(node.KeepFreeBytes) - mib(other) - memNeed, other, working, true
}

// latestMemBytes is the working set of the latest sample at or before now
// (0: none).
func latestMemBytes(history []Sample, now time.Time) uint64 {
	for i := len(history) - 1; i >= 0; i-- {
		if !history[i].Time.After(now) {
			return history[i].MemBytes
		}
	}
	return 0
}

// bandwidthSlack is the revocable bandwidth (Mbit/s): the node's egress
// capacity minus the predicted peak egress of guaranteed containers and
// protected services,
//
//	bandwidth = max(0, Total.bandwidth − Σ need)
//	need = max(floor, (1 + Margin) × peak egress in the window)
//
// where a member's floor is its bandwidth allocation (what a guaranteed
// task reserved stays free for it) and a member with fewer than MinSamples
// samples needs its floor. Unlike cpus, unallocated capacity counts too:
// most tasks reserve no bandwidth, and what guaranteed work does not send
// is what revocable work may. 0 when Total has no bandwidth.
func bandwidthSlack(in Input, cfg Config, members []member) float64 {
	total := in.Total.Bandwidth()
	if total <= 0 {
		return 0
	}
	need := 0.0
	for _, m := range members {
		floor := m.container.Allocated.Bandwidth()
		if len(m.window) < cfg.MinSamples {
			need += floor
			continue
		}
		peak := 0.0
		for _, s := range m.window {
			if resources.IsFinite(s.NetTx) {
				peak = max(peak, s.NetTx)
			}
		}
		need += max(floor, (1+cfg.Margin)*peak)
	}
	return max(0, total-need)
}

// percentileCPU returns the p-th percentile (nearest rank) of the samples'
// CPU.
func percentileCPU(samples []Sample, p float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	values := make([]float64, len(samples))
	for i, s := range samples {
		values[i] = s.CPU
	}
	slices.Sort(values)
	rank := int(math.Ceil(p / 100 * float64(len(values))))
	return values[min(max(rank, 1), len(values))-1]
}

// decayingPeak returns max over samples of cpu × 2^(−age/halfLife).
func decayingPeak(samples []Sample, now time.Time, halfLife time.Duration) float64 {
	peak := 0.0
	for _, s := range samples {
		age := now.Sub(s.Time).Seconds()
		peak = max(peak, s.CPU*math.Exp2(-age/halfLife.Seconds()))
	}
	return peak
}

func cpuPeak(samples []Sample) float64 {
	peak := 0.0
	for _, s := range samples {
		peak = max(peak, s.CPU)
	}
	return peak
}

func memPeak(samples []Sample) uint64 {
	var peak uint64
	for _, s := range samples {
		peak = max(peak, s.MemBytes)
	}
	return peak
}
