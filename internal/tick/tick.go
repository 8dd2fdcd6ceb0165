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
