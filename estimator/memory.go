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
