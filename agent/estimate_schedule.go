package agent

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
// When no sample comes by the next tick (a stalled or slow monitor), the
// estimate the last tick called for runs at that tick, and the new tick's
// waits for a sample in turn: a stalled monitor still gets one estimate
// per tick, one interval late, so the estimator sees time pass (a monitor
// that stops reporting is handled by the estimator, whose estimates go
// unscored, not by the loop stopping). It is pure: the loop feeds it ticks
// and samples.
type estimateSchedule struct {
	// aligned is set when estimates wait for samples: a monitor sampling
	// at least as often as the estimate interval.
	aligned bool
	// due is set from a tick until the estimate it calls for has run.
	due bool
}

// tick is a tick of the estimate interval: it returns whether to estimate
// now.
func (s *estimateSchedule) tick() bool {
	if !s.aligned {
		return true
	}
	// No sample since the last tick: its estimate runs now, and this
	// tick's waits for a sample.
	late := s.due
	s.due = true
	return late
}

// sampled is the end of a monitor pass: it returns whether to estimate now.
func (s *estimateSchedule) sampled() bool {
	if !s.aligned || !s.due {
		return false
	}
	s.due = false
	return true
}
