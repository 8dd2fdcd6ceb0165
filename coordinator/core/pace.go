package core

import (
	"math"
	"time"
)

// heartbeatPace decides the interval agents are told to heartbeat at and
// the silence after which an agent becomes UNREACHABLE, so that the
// heartbeats of a growing cluster stay within a budget instead of growing
// with it: 10,000 agents beating every 5 s are 2,000 calls a second, which
// on a small coordinator costs more CPU and garbage than everything else
// it does and shows up as the tail of offer latency.
//
// The interval is Config.HeartbeatInterval while the agents fit the
// budget (Config.MaxHeartbeatRate heartbeats a second), and
// agents/rate seconds beyond it, rounded up to a whole second (to the base
// interval, if that is shorter). The timeout
// scales with it: Config.AgentTimeout is the silence allowed at the base
// interval, so an agent may miss as many heartbeats at any interval (30 s
// at 5 s: six). Agents learn the interval at registration and from every
// heartbeat's answer; agent/session asks for an answer on every third
// beat only (no_answer on the others), so it takes effect at most three
// old intervals after a change (one for older agents).
// When it shrinks, agents still beating at the longer one are not yet
// late: the longer timeout holds until every agent has had the time to
// hear of the change and miss as many beats as before.
//
// A pure value: no clock, no lock.
type heartbeatPace struct {
	base    time.Duration // Config.HeartbeatInterval: the shortest interval
	timeout time.Duration // Config.AgentTimeout: the silence allowed at base
	rate    float64       // Config.MaxHeartbeatRate; <= 0: no budget

	interval  time.Duration // the interval agents are told now
	held      time.Duration // a longer timeout still in effect...
	heldUntil time.Time     // ...until then, for agents told a longer interval
}

func newHeartbeatPace(base, timeout time.Duration, rate float64) heartbeatPace {
	return heartbeatPace{base: base, timeout: timeout, rate: rate, interval: base}
}

// intervalFor is the interval for agents heartbeating agents.
func (p *heartbeatPace) intervalFor(agents int) time.Duration {
	if p.rate <= 0 {
		return p.base
	}
	need := float64(agents) / p.rate // seconds
	if need <= p.base.Seconds() {
		return p.base
	}
	// Rounded up to a whole second (or base, if shorter), so that
	// agents joining and leaving do not change it at every call.
	quantum := min(time.Second, p.base)
	return max(p.base, time.Duration(math.Ceil(need*float64(time.Second)/float64(quantum)))*quantum)
}

// timeoutFor is the silence allowed at interval.
func (p *heartbeatPace) timeoutFor(interval time.Duration) time.Duration {
	if interval <= p.base || p.base <= 0 {
		return p.timeout
	}
	return time.Duration(float64(p.timeout) * float64(interval) / float64(p.base))
}

// shrinkMargin is how far below the budget the agents must be for the
// interval to shrink: a cluster at a boundary (5,000 <-> 5,001 agents at
// 1,000 a second) does not flip it at every join and leave.
const shrinkMargin = 0.1

// update sets the interval for agents heartbeating agents at now and
// reports whether it changed.
func (p *heartbeatPace) update(agents int, now time.Time) bool {
	next := p.intervalFor(agents)
	if next < p.interval {
		next = min(p.interval, p.intervalFor(agents+int(float64(agents)*shrinkMargin)))
	}
	if next == p.interval {
		return false
	}
	if next < p.interval {
		old := p.timeoutFor(p.interval)
		if now.Before(p.heldUntil) {
			old = max(old, p.held) // a hold of an even longer interval
		}
		p.held, p.heldUntil = old, now.Add(old)
	}
	p.interval = next
	return true
}

// silence is the timeout in effect at now: an agent silent for longer is
// unreachable.
func (p *heartbeatPace) silence(now time.Time) time.Duration {
	t := p.timeoutFor(p.interval)
	if now.Before(p.heldUntil) {
		t = max(t, p.held)
	}
	return t
}
