// Package tick wakes periodic loops on one shared grid of instants (#29):
// an Aligned timer fires at the multiples of its period on the wall clock,
// so loops of the same period (or of periods that divide each other) fire
// together and the Go runtime wakes once for all of them, rather than once
// per loop at unrelated phases. The agent's monitor uses it, and the
// agent's estimate loop computes its ticks on the same grid (Until).
package tick

import "time"

// Aligned delivers the instants k·Period (on the Unix time line) on C, one
// per Next. Unlike a time.Ticker it does not re-arm itself: the loop calls
// Next after each receive, so a loop that overran skips the boundaries it
// missed, as a Ticker drops ticks. It starts no goroutine.
type Aligned struct {
	// C receives the time of each firing.
	C      <-chan time.Time
	timer  *time.Timer
	period time.Duration
}

// NewAligned returns a timer armed for the first boundary of period after
// now. period must be positive.
func NewAligned(period time.Duration) *Aligned {
	t := time.NewTimer(Until(time.Now(), period))
	return &Aligned{C: t.C, timer: t, period: period}
}

// Next arms the timer for the next boundary after now; call it after each
// receive from C.
func (a *Aligned) Next() { a.timer.Reset(Until(time.Now(), a.period)) }

// Stop stops the timer.
func (a *Aligned) Stop() { a.timer.Stop() }

// Until returns how long after now the next multiple of period falls
// (period itself when now is on one), for period > 0.
func Until(now time.Time, period time.Duration) time.Duration {
	return period - time.Duration(now.UnixNano()%int64(period))
}

// Crossed reports whether a boundary of period's grid (a multiple of
// period on the Unix time line) lies in (last, now], for times after
// 1970; always for period <= 0 (as now - last >= period would be, but for
// a clock gone back). A refresh "at least every period" that is due when
// the grid is Crossed since its last read comes at the first pass at or
// after the next boundary, so it is never later than now - last >= period
// would make it, and every such refresh of the process (of every
// container, file and map, each last read at its own time) falls in the
// same pass, the one just after the boundary (#29): the runtime wakes its
// system monitor for that pass alone instead of for a few reads at every
// pass. A refresh that read between boundaries (because something moved)
// is next due at the following boundary, less than period later.
func Crossed(last, now time.Time, period time.Duration) bool {
	if period <= 0 {
		return true
	}
	return now.UnixNano()/int64(period) > last.UnixNano()/int64(period)
}

// Next returns the first boundary of period's grid after last: the
// earliest now for which Crossed(last, now, period) holds, for times after
// 1970 and period > 0. For period <= 0 (Crossed always holds) it returns
// last.
func Next(last time.Time, period time.Duration) time.Time {
	if period <= 0 {
		return last
	}
	return time.Unix(0, (last.UnixNano()/int64(period)+1)*int64(period))
}
