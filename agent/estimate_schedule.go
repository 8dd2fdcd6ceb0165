package agent

import "time"

// estimateSchedule decides when the estimate loop runs (#29): right after
// the monitor's first pass following each tick of the estimate interval,
// rather than at the tick itself. The monitor and the estimate loop tick
// independently at the same period (100 ms); run at the tick, an estimate
// usually predates the sample of the 100 ms it then stands for, so a burst
// that starts in a sample is seen one estimate late and an unforeseeable
// onset costs two violations instead of one (each of which the calibrated
// estimator pays for with about 100 estimates of holding back). Run just
// after the sample, each estimate has seen every sample up to its own
// time.
//
// A sample that lands shortly before a tick (within a quarter interval:
// the two loops' jitter when their phases are close) runs that tick's
// estimate early, and the tick then runs nothing: waiting for the sample
// after the tick would leave the one just taken a whole interval
// unseen, and slack appearing in it would be offered an interval late.
//
// When no sample comes by the next tick (a stalled or slow monitor), the
// estimate the last tick called for runs at that tick, and the new tick's
// waits for a sample in turn: a stalled monitor still gets one estimate
// per tick, one interval late, so the estimator sees time pass (a monitor
// that stops reporting is handled by the estimator, whose estimates go
// unscored, not by the loop stopping). It is pure: the loop feeds it ticks
// and samples with their times.
type estimateSchedule struct {
	// aligned is set when estimates wait for samples: a monitor sampling
	// at least as often as the estimate interval.
	aligned bool
	// interval is the estimate interval.
	interval time.Duration
	// due is set from a tick until the estimate it calls for has run.
	due bool
	// next is when the next tick is expected (zero before the first);
	// early is set when a sample ran its estimate already.
	next  time.Time
	early bool
}

// tick is a tick of the estimate interval at now: it returns whether to
// estimate now.
func (s *estimateSchedule) tick(now time.Time) bool {
	if !s.aligned {
		return true
	}
	s.next = now.Add(s.interval)
	if s.early {
		s.early = false // its estimate ran at the sample just before it
		return false
	}
	// No sample since the last tick: its estimate runs now, and this
	// tick's waits for a sample.
	late := s.due
	s.due = true
	return late
}

// sampled is the end of a monitor pass at now: it returns whether to
// estimate now.
func (s *estimateSchedule) sampled(now time.Time) bool {
	if !s.aligned {
		return false
	}
	if s.due {
		s.due = false
		return true
	}
	if !s.next.IsZero() && !s.early && !now.Before(s.next.Add(-s.interval/4)) {
		s.early = true
		return true
	}
	return false
}

// lazyTicks feeds an aligned estimateSchedule the ticks of the interval's
// boundaries (k·interval on the Unix time line, internal/tick's grid)
// when something happens, rather than waking the loop at each of them
// (#29): at a monitor pass's end, the boundaries passed since the last
// event are fed in order before the sample, which is the order in which
// the timer and the monitor, firing on the same grid, delivered them. A
// tick only runs an estimate when no sample came since the tick before
// (a stalled monitor), so the loop's timer is armed for the first
// boundary at which that can happen (wake), which passes arriving every
// interval keep pushing back: with a working monitor the loop wakes only
// for its samples. It is pure.
type lazyTicks struct {
	next     time.Time // the first boundary not fed yet
	interval time.Duration
}

// feed feeds s the ticks up to now and reports whether one of them runs
// an estimate.
func (t *lazyTicks) feed(s *estimateSchedule, now time.Time) bool {
	run := false
	for !t.next.After(now) {
		run = s.tick(t.next) || run
		t.next = t.next.Add(t.interval)
	}
	return run
}

// wake returns when the next tick that can run an estimate falls: the
// next boundary when the last one's estimate is still due (no sample
// since), the one after otherwise.
func (t *lazyTicks) wake(s *estimateSchedule) time.Time {
	if s.due {
		return t.next
	}
	return t.next.Add(t.interval)
}
