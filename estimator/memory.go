package estimator

import (
	"sort"
	"time"
)

// memNeedOf is the memory (MiB) a guaranteed member is predicted to need:
// the peak of its working set (Sample.MemBytes: anonymous plus active file
// pages, never inactive page cache) over the last cfg.MemoryWindow, plus
// cfg.MemoryMargin of its allocation. No percentile: a working set that
// does not fit is reclaimed, not queued. The window is shorter than the
// CPU one because memory offered too eagerly is taken back by reclaim
// first (the revocable subtree's memory.high, lowered by the reclaim QoS
// controller), with guaranteed tasks protected by memory.min/low; the
// backtest (slackline-backtest memory) scores the trade-off.
func memNeedOf(m member, now time.Time, cfg Config, allocMiB float64) float64 {
	if m.memPeak != nil {
		return mib(m.memPeak.peak(m.window, now, cfg.MemoryWindow)) + cfg.MemoryMargin*allocMiB
	}
	window := m.window
	if cfg.MemoryWindow > 0 {
		// Drop the samples at or before start, keeping at least the last
		// one (samples are in time order: a binary search, not a walk over
		// the minute before the memory window).
		start := now.Add(-cfg.MemoryWindow)
		first := sort.Search(len(window), func(i int) bool { return window[i].Time.After(start) })
		window = window[min(first, max(0, len(window)-1)):]
	}
	return mib(memPeak(window)) + cfg.MemoryMargin*allocMiB
}

// memPeakTracker keeps one member's working-set peak over the memory window
// incrementally (#29): a monotonic deque of the samples not exceeded by a
// later one, oldest first, so that an estimate takes in only the samples
// that are new since the last and drops those that left the window, rather
// than rescanning the window (15 s: 150 samples per member per estimate at
// 100 ms). Its peak is exactly memNeedOf's: the largest MemBytes among the
// window's samples after now − MemoryWindow, or the last sample's when
// none is that recent.
type memPeakTracker struct {
	// deque holds samples with strictly decreasing MemBytes from head on,
	// in time order; its last is the newest sample taken in.
	deque []Sample
	head  int
}

// peak returns the working-set peak of window (a member's window: samples
// in time order, none after now) over the last memWindow (0: the whole
// window). It takes in window's samples newer than the newest seen; a
// window that does not extend what was seen (history replaced or time gone
// back) is taken in afresh.
func (p *memPeakTracker) peak(window []Sample, now time.Time, memWindow time.Duration) uint64 {
	if len(window) == 0 {
		p.reset()
		return 0
	}
	first := 0
	if n := len(p.deque); n > p.head {
		newest := p.deque[n-1]
		// The newest sample seen must still be in the window, unchanged,
		// for the deque to stand for the window's past.
		i := searchFrom(window, newest.Time)
		if i == len(window) || !window[i].Time.Equal(newest.Time) || window[i].MemBytes != newest.MemBytes {
			p.reset()
		} else {
			first = i + 1
		}
	}
	if first == 0 {
		p.reset()
	}
	for _, s := range window[first:] {
		for len(p.deque) > p.head && p.deque[len(p.deque)-1].MemBytes <= s.MemBytes {
			p.deque = p.deque[:len(p.deque)-1]
		}
		p.deque = append(p.deque, s)
	}
	// The window's own start (now − Window) drops samples whatever
	// memWindow is; memWindow's start keeps the last sample.
	for p.head < len(p.deque)-1 && p.deque[p.head].Time.Before(window[0].Time) {
		p.head++
	}
	if memWindow > 0 {
		start := now.Add(-memWindow)
		for p.head < len(p.deque)-1 && !p.deque[p.head].Time.After(start) {
			p.head++
		}
	}
	if p.head > len(p.deque)/2 {
		p.deque = append(p.deque[:0], p.deque[p.head:]...)
		p.head = 0
	}
	return p.deque[p.head].MemBytes
}

func (p *memPeakTracker) reset() { p.deque, p.head = p.deque[:0], 0 }

// searchFrom returns the index of the first sample of window (in time
// order) stamped at or after t, len(window) if none is: sort.Search's
// answer, found without the search when it is one of the last
// searchFromTail indexes. The tracker's case at every estimate is t the
// time of the sample before the newest (one sample new since the last),
// whose index is len(window)-2; the search over a minute of samples read a
// dozen cache lines per member and estimate (#29).
func searchFrom(window []Sample, t time.Time) int {
	n := len(window)
	for i := n; i > 0 && i > n-searchFromTail; i-- {
		if window[i-1].Time.Before(t) {
			return i // window[i] (when there is one) was not before t
		}
	}
	// No sample of the tail is before t: the answer is at or before the tail.
	head := max(0, n-searchFromTail)
	return sort.Search(head, func(i int) bool { return !window[i].Time.Before(t) })
}

// searchFromTail is how many of a window's last indexes searchFrom
// tries before it searches.
const searchFromTail = 3

// MemoryBound names the bound that set a memory estimate (MemoryAccount).
type MemoryBound int

// The bounds of a memory estimate, in the order they are taken on a tie.
const (
	// MemoryBoundNone: no memory was estimated (Config.Memory off, or no
	// estimate made yet).
	MemoryBoundNone MemoryBound = iota
	// MemoryBoundAllocations: the guaranteed allocations less their need
	// (their working sets' peaks plus the margin).
	MemoryBoundAllocations
	// MemoryBoundTotal: the agent's total mem less the need.
	MemoryBoundTotal
	// MemoryBoundNode: the node's memory less what the QoS controllers
	// keep free, the node's other use and the need (NodeMemory).
	MemoryBoundNode
)

// String returns the bound's name as GetEstimate and /metrics show it:
// "allocations", "total", "node" or "none".
func (b MemoryBound) String() string {
	switch b {
	case MemoryBoundAllocations:
		return "allocations"
	case MemoryBoundTotal:
		return "total"
	case MemoryBoundNode:
		return "node"
	}
	return "none"
}

// MemoryAccount is how a memory estimate was made (#28): each bound it
// was the least of, which one set it, and the node's figures behind the
// node bound. Amounts are in MiB (the mem resource's unit) unless named
// bytes; bounds may be negative (the estimate is then 0).
type MemoryAccount struct {
	// Bound is the bound that set the estimate.
	Bound MemoryBound
	// EstimateMiB is the estimate before hysteresis: max(0, the least
	// bound).
	EstimateMiB float64
	// AllocatedMiB is Σ allocations and NeedMiB Σ need over the guaranteed
	// containers and protected services (a member warming up needs its
	// whole allocation).
	AllocatedMiB, NeedMiB float64
	// AllocationsMiB is AllocatedMiB − NeedMiB.
	AllocationsMiB float64
	// TotalMiB is the agent's total mem less NeedMiB, when HasTotal (the
	// Input's Total has mem).
	TotalMiB float64
	HasTotal bool
	// NodeMiB is the node bound, Total − KeepFree − other − NeedMiB, when
	// HasNode (the node's memory is known).
	NodeMiB float64
	HasNode bool
	// Node is the node's memory the estimate saw (Input.Node).
	Node NodeMemory
	// OtherBytes is what the node holds beyond the containers' latest
	// working sets (the kernel, the agent, other processes), and
	// WorkingSetBytes the sum of those working sets, revocable containers'
	// included; both 0 without HasNode.
	OtherBytes, WorkingSetBytes uint64
}

// MemoryExplainer is implemented by the estimators that estimate memory
// (usage, predictive, fast and calibrated): ExplainMemory says how the
// last estimate's mem was made (Bound MemoryBoundNone before any, or
// without Config.Memory). Like Estimate, it is called from the
// estimator's goroutine; the account is a value the caller may keep.
type MemoryExplainer interface {
	ExplainMemory() MemoryAccount
}
