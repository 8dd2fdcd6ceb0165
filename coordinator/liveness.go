package coordinator

import (
	"time"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// The timer loop runs every timerPeriod (1.25 s by default) under c.mu.
// Visiting every agent and every outstanding offer each time would hold
// the lock for a time that grows with the cluster (10,000 agents) on every
// tick, delaying the offers of the allocation loop; so each check visits
// only what may be due:
//
//   - silent agents: agents in the order of their last heartbeat
//     (heartbeatQueue), so the check looks at the oldest ones only;
//   - agents that never re-registered after a restart: one sweep, once
//     Config.AgentReregisterTimeout has passed (no agent becomes
//     RECOVERING afterwards);
//   - timed-out offers: the core's Tick sweeps them every eighth of the
//     offer timeout, so one is rescinded at most an eighth of it late;
//   - forgotten frameworks and gone agents: a sweep every
//     historyInterval, so the retention limits hold within a minute.

// historyInterval is the longest time between two sweeps of the
// completed frameworks and gone agents (forgetHistory).
const historyInterval = time.Minute

// heartbeatQueue orders agents by their last heartbeat, oldest first: an
// intrusive doubly-linked list (agent.hbPrev, agent.hbNext), so that a
// heartbeat moves its agent to the back in O(1). The order is that of the
// heartbeats' arrival, which is the order of their times as long as
// Config.Now does not go backwards. An agent leaves it when found silent;
// an agent forgotten meanwhile is dropped when it reaches the front.
type heartbeatQueue struct {
	front, back *agent
	n           int // agents in the queue
}

// touch records a heartbeat of a at now: a moves to the back.
func (q *heartbeatQueue) touch(a *agent, now time.Time) {
	a.lastHeartbeat = now
	q.remove(a)
	a.hbQueued = true
	q.n++
	a.hbPrev = q.back
	if q.back != nil {
		q.back.hbNext = a
	} else {
		q.front = a
	}
	q.back = a
}

// remove takes a out of the queue, if it is in.
func (q *heartbeatQueue) remove(a *agent) {
	if !a.hbQueued {
		return
	}
	if a.hbPrev != nil {
		a.hbPrev.hbNext = a.hbNext
	} else {
		q.front = a.hbNext
	}
	if a.hbNext != nil {
		a.hbNext.hbPrev = a.hbPrev
	} else {
		q.back = a.hbPrev
	}
	a.hbPrev, a.hbNext, a.hbQueued = nil, nil, false
	q.n--
}

// heartbeat records that agent a was heard from at now. Caller holds c.mu.
func (c *Coordinator) heartbeat(a *agent, now time.Time) { c.heartbeats.touch(a, now) }

// agentHeartbeatInterval is the interval to tell an agent at now, for the
// agents heartbeating now (heartbeatPace). Caller holds c.mu.
func (c *Coordinator) agentHeartbeatInterval(now time.Time) time.Duration {
	if c.pace.update(c.heartbeats.n, now) {
		c.log.Info("agent heartbeat interval changed to keep heartbeats within their budget",
			"interval", c.pace.interval, "agents", c.heartbeats.n, "max_rate", c.cfg.MaxAgentHeartbeatRate, "timeout", c.pace.silence(now))
	}
	return c.pace.interval
}

// checkSilentAgents marks UNREACHABLE the ACTIVE agents silent for longer
// than the timeout in effect (Config.AgentTimeout at the base heartbeat
// interval, see heartbeatPace), visiting only those, and, once, the agents
// that did not re-register within Config.AgentReregisterTimeout of a
// restart. It returns the registry writes. Caller holds c.mu.
func (c *Coordinator) checkSilentAgents(now time.Time) []store.Mutation {
	var writes []store.Mutation
	timeout := c.pace.silence(now)
	for a := c.heartbeats.front; a != nil && now.Sub(a.lastHeartbeat) > timeout; a = c.heartbeats.front {
		c.heartbeats.remove(a)
		if c.agents[a.id] != a || a.state != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			continue // forgotten or no longer active; a registration queues it again
		}
		c.log.Warn("agent unreachable: no heartbeat", "agent", a.id, "hostname", a.info.GetHostname(), "silent", now.Sub(a.lastHeartbeat).Round(time.Millisecond))
		c.markAgentUnreachable(a, now)
		writes = append(writes, a.record())
	}
	if !c.recoveryChecked && now.Sub(c.startedAt) > c.cfg.AgentReregisterTimeout {
		c.recoveryChecked = true
		for _, a := range c.agents {
			if a.state == slacklinev1.AgentState_AGENT_STATE_RECOVERING {
				c.log.Warn("agent did not re-register after coordinator restart", "agent", a.id, "hostname", a.info.GetHostname())
				a.state = slacklinev1.AgentState_AGENT_STATE_UNREACHABLE
				writes = append(writes, a.record())
			}
		}
	}
	return writes
}

// forgetHistoryWhenDue runs forgetHistory every historyInterval (an eighth
// of Limits.GoneAgentRetention when shorter). Caller holds persistMu and
// c.mu.
func (c *Coordinator) forgetHistoryWhenDue(now time.Time) []store.Mutation {
	if now.Before(c.nextHistorySweep) {
		return nil
	}
	interval := historyInterval
	if r := c.cfg.Limits.GoneAgentRetention; r > 0 {
		interval = min(interval, r/8)
	}
	c.nextHistorySweep = now.Add(interval)
	return c.forgetHistory(now)
}
