package agent

import "time"

// qosSchedule decides when the QoS loop evaluates (#29). The loop used to
// tick on a timer of its own at QoSIntervalMin, a phase unrelated to the
// monitor's, reading samples up to a monitor interval old and waking the
// runtime on its own. When it follows the monitor (a monitor sampling at
// least as often as QoSIntervalMin), it evaluates right after a pass
// instead, the first pass at least QoSIntervalMin after the last
// evaluation (less a quarter of the monitor's interval: the jitter of the
// passes' ends), so each evaluation reads a sample just taken. With the
// defaults (100 ms passes, 250 ms) that is every third pass: a signal in a
// sample is evaluated at most 200 ms after the sample (it was up to 250 ms
// on the loop's own timer), and evaluations are 300 ms apart, never closer
// than QoSIntervalMin less that jitter.
//
// Threshold events from eBPF are evaluated at once when QoSIntervalMin has
// passed since the last evaluation, and otherwise at last + QoSIntervalMin,
// as on the loop's own timer. A monitor that stalls still gets an
// evaluation at last + QoSIntervalMin + two monitor intervals. It is pure:
// the loop feeds it times and arms one timer for wait.
//
// A quiet pass (one that changed nothing it published: every container
// idle, the node not sampled; monitor.Monitor.QuietSince) after the
// containers have been idle for quietSettle, with no event pending, does
// not evaluate until quiet (Config.QuietDeferMax) after the last
// evaluation: the controllers would read the figures they read
// last, and only their time-driven steps (undoing a correction once
// calm) wait, at most that long. The first pass that is not quiet
// evaluates as before. Meanwhile the stalled monitor's grace counts from
// the deferral's end.
type qosSchedule struct {
	// follow is set when evaluations follow the monitor's passes.
	follow bool
	// min is QoSIntervalMin, sample the monitor's interval, quiet the
	// longest a quiet pass defers an evaluation (0: none).
	min, sample, quiet time.Duration
	// last is the last evaluation (zero before the first); deferring is
	// set when a quiet pass deferred one since.
	last      time.Time
	deferring bool
}

// sampled reports whether a monitor pass ending at now evaluates; quiet
// is whether the pass was quiet, settled, with no event pending.
func (s *qosSchedule) sampled(now time.Time, quiet bool) bool {
	if !s.follow || now.Before(s.next()) {
		return false
	}
	if quiet && s.quiet > 0 && !s.last.IsZero() && now.Sub(s.last) < s.quiet {
		s.deferring = true
		return false
	}
	return true
}

// next returns when a monitor pass first evaluates again (the zero time
// before the first evaluation: any pass does). The monitor's goroutine
// evaluates at the passes ending then or later (qosLoop.sampleTaken), and
// the passes in between cost one atomic load (#29).
func (s *qosSchedule) next() time.Time {
	if s.last.IsZero() {
		return time.Time{}
	}
	return s.last.Add(s.min - s.sample/4)
}

// events reports whether threshold events arriving at now evaluate at once.
func (s *qosSchedule) events(now time.Time) bool {
	return s.last.IsZero() || now.Sub(s.last) >= s.min
}

// evaluated records an evaluation at now.
func (s *qosSchedule) evaluated(now time.Time) { s.last, s.deferring = now, false }

// wait returns how long after now the loop's timer evaluates: at last +
// QoSIntervalMin when events are pending or the loop does not follow the
// monitor, and after a stalled monitor's grace otherwise.
func (s *qosSchedule) wait(now time.Time, pending bool) time.Duration {
	due := s.last.Add(s.min)
	if s.last.IsZero() {
		due = now.Add(s.min)
	}
	if s.follow && !pending {
		if s.deferring {
			due = s.last.Add(max(s.min, s.quiet))
		}
		due = due.Add(2 * s.sample)
	}
	return max(due.Sub(now), 0)
}
