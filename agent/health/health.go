package health

import (
	"fmt"
	"time"

	"github.com/slackline/slackline/internal/taskspec"
)

// Policy is a task's health check with its defaults resolved
// (taskspec.HealthCheck).
type Policy = taskspec.Health

// Checker is the health of one task: when its next check is due and what a
// result means, as a pure function of the results and the times given. It
// does no I/O and reads no clock. Not safe for concurrent use.
type Checker struct {
	policy  Policy
	started time.Time // when the task started running
	// next is when the next check is due; zero while one is in flight.
	next     time.Time
	inflight bool
	// passed is set by the first success: the grace period ends there.
	passed bool
	// healthy is the last health reported (nil: none yet).
	healthy     *bool
	consecutive int
	killed      bool
}

// NewChecker returns the checker of a task that started running at
// started: its first check is due Delay after that.
func NewChecker(p Policy, started time.Time) *Checker {
	return &Checker{policy: p, started: started, next: started.Add(p.Delay)}
}

// Due reports whether a check should start at now: its time has come,
// none is in flight and the task has not been condemned.
func (c *Checker) Due(now time.Time) bool {
	return !c.inflight && !c.killed && !now.Before(c.next)
}

// Next is when the next check is due (zero while one is in flight or
// after a kill).
func (c *Checker) Next() time.Time {
	if c.inflight || c.killed {
		return time.Time{}
	}
	return c.next
}

// Start records that a check started at now; the following one is due
// Interval later, or when this one ends if that is later.
func (c *Checker) Start(now time.Time) {
	c.inflight = true
	c.next = now.Add(c.policy.Interval)
}

// Defer puts off a due check that could not start (too many checks in
// flight on the agent) by delay, without counting it.
func (c *Checker) Defer(now time.Time, delay time.Duration) {
	c.next = now.Add(delay)
}

// Skip ends the check in flight, at now, without a result: the task was
// paused (frozen by the QoS freezer) and the check did not run. A paused
// task is not unhealthy: it neither fails nor passes, its health and count
// of failures stay as they were, and the next check is due as after any
// other.
func (c *Checker) Skip(now time.Time) {
	c.inflight = false
	if now.After(c.next) {
		c.next = now
	}
}

// Decision is what a result means for the task.
type Decision struct {
	// Report is set when the task's health changed: send an update with
	// Healthy.
	Report  bool
	Healthy bool
	// Kill is set when the task failed ConsecutiveFailures checks in a row
	// after its grace period: kill it, reporting Message.
	Kill    bool
	Message string
}

// Result records the outcome of the check in flight, ended at now: ok, or
// a failure described by detail. A failure within the grace period
// (Grace after the task started) before any success is ignored.
func (c *Checker) Result(now time.Time, ok bool, detail string) Decision {
	c.inflight = false
	if now.After(c.next) {
		c.next = now // checks never overlap: the next starts no sooner
	}
	if c.killed {
		return Decision{}
	}
	if ok {
		c.passed, c.consecutive = true, 0
		return c.report(true, "health check passed")
	}
	if !c.passed && now.Sub(c.started) < c.policy.Grace {
		return Decision{} // still starting: the grace period forgives
	}
	c.consecutive++
	d := c.report(false, fmt.Sprintf("health check failed (%d of %d in a row): %s", c.consecutive, c.policy.ConsecutiveFailures, detail))
	if c.consecutive >= c.policy.ConsecutiveFailures {
		c.killed = true
		d.Kill = true
		d.Message = fmt.Sprintf("health check failed %d times in a row: %s", c.consecutive, detail)
	}
	return d
}

func (c *Checker) report(healthy bool, message string) Decision {
	if c.healthy != nil && *c.healthy == healthy {
		return Decision{Healthy: healthy, Message: message}
	}
	c.healthy = &healthy
	return Decision{Report: true, Healthy: healthy, Message: message}
}

// Healthy returns the last health reported and whether there was one.
func (c *Checker) Healthy() (healthy, known bool) {
	if c.healthy == nil {
		return false, false
	}
	return *c.healthy, true
}
