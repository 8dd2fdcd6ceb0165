package coordinator

import (
	"time"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// The timer loop runs every timerPeriod (1.25 s by default) under c.mu.
// Visiting every agent and every outstanding offer each time would hold
// the lock for a time that grows with the cluster (10,000 agents) on every
// tick, delaying the offers of the allocation loop; so each check visits
// only what may be due:
//
//   - silent agents: the core keeps agents in the order of their last
//     heartbeat and looks at the oldest ones only (core/liveness.go);
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

// heartbeat records that agent a was heard from at now. Caller holds c.mu.
func (c *Coordinator) heartbeat(a *agent, now time.Time) { c.core.Heartbeat(a.ID, now) }

// agentHeartbeatInterval is the interval to tell an agent at now, for the
// agents heartbeating now (core.HeartbeatInterval). Caller holds c.mu.
func (c *Coordinator) agentHeartbeatInterval(now time.Time) time.Duration {
	return c.agentPace(now).Interval
}

// agentPace is the heartbeat interval to tell an agent at now and the
// silence after which an agent is lost. Caller holds c.mu.
func (c *Coordinator) agentPace(now time.Time) core.Pace {
	p := c.core.HeartbeatInterval(now)
	if p.Changed {
		c.log.Info("agent heartbeat interval changed to keep heartbeats within their budget",
			"interval", p.Interval, "agents", p.Agents, "max_rate", c.cfg.MaxAgentHeartbeatRate, "timeout", p.Timeout)
	}
	return p
}

// tick lets time pass in the core and applies what it decided: its sends
// (the rescinds of timed-out offers and of lost agents' offers, the
// updates of their tasks, UNREACHABLE) first; the ACTIVE agents it found
// silent are UNREACHABLE in the core already, and their sessions end
// here; the agents that did not re-register after a restart are
// UNREACHABLE too; and the DISCONNECTED frameworks past their failover
// timeout are torn down. It returns the registry writes (the agents'
// records among them). Caller holds a turn of every scope (order.go) and
// c.mu.
func (c *Coordinator) tick(now time.Time) []store.Mutation {
	r := c.core.Tick(now)
	writes := registryWrites(r.After)
	r.After = nil
	c.deliver(r)
	for _, lost := range r.Lost {
		a := c.agents[lost.AgentID]
		if a == nil || a.State != slacklinev1.AgentState_AGENT_STATE_UNREACHABLE {
			continue
		}
		c.log.Warn("agent unreachable: no heartbeat", "agent", a.ID, "hostname", a.Info.GetHostname(), "silent", lost.Silent.Round(time.Millisecond))
		a.endSession()
	}
	for _, id := range r.NotReregistered {
		if a := c.agents[id]; a != nil {
			c.log.Warn("agent did not re-register after coordinator restart", "agent", a.ID, "hostname", a.Info.GetHostname())
		}
	}
	for _, id := range r.Expired {
		if fw := c.frameworks[id]; fw != nil && fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED {
			c.log.Info("framework failover timeout expired; tearing down", "framework", fw.id(), "name", fw.info.GetName())
			writes = append(writes, c.removeFramework(fw, "failover timeout expired")...)
		}
	}
	return writes
}

// forgetHistoryWhenDue runs forgetHistory every historyInterval (an eighth
// of Limits.GoneAgentRetention when shorter). Caller holds a turn of every
// scope and c.mu.
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
