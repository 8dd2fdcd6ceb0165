package core

import (
	"slices"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Liveness: agents in the order of their last heartbeat (heartbeatQueue),
// so that Tick looks at the oldest ones only rather than at every agent of
// a 10,000-agent cluster; the interval agents are told and the silence
// after which they are lost (heartbeatPace); and, once, the agents from
// the registry that did not register again within
// Config.ReregisterTimeout of Config.Start.

// heartbeatQueue orders agents by their last heartbeat, oldest first: an
// intrusive doubly-linked list (agent.hbPrev, agent.hbNext), so that a
// heartbeat moves its agent to the back in O(1). The order is that of the
// heartbeats' arrival, which is the order of their times as long as the
// time in events does not go backwards. An agent leaves it when found
// silent or inactive, or when forgotten.
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

// Heartbeat records that an agent was heard from at now.
func (k *Core) Heartbeat(agentID string, now time.Time) {
	if a := k.agents[agentID]; a != nil {
		k.heartbeats.touch(a, now)
	}
}

// LastHeartbeat returns when an agent was last heard from (zero: not
// since the coordinator started).
func (k *Core) LastHeartbeat(agentID string) time.Time {
	if a := k.agents[agentID]; a != nil {
		return a.lastHeartbeat
	}
	return time.Time{}
}

// Heartbeating returns the agents in the heartbeat queue, oldest
// heartbeat first.
func (k *Core) Heartbeating() []string {
	var out []string
	for a := k.heartbeats.front; a != nil; a = a.hbNext {
		out = append(out, a.spec.ID)
	}
	return out
}

// Pace is the heartbeat interval agents are told and the silence after
// which one is lost.
type Pace struct {
	Interval, Timeout time.Duration
	// Agents is the number of agents heartbeating.
	Agents int
	// Changed: the interval differs from the one told before.
	Changed bool
}

// HeartbeatInterval returns the interval to tell an agent at now, for the
// agents heartbeating now (see heartbeatPace).
func (k *Core) HeartbeatInterval(now time.Time) Pace {
	changed := k.pace.update(k.heartbeats.n, now)
	return Pace{Interval: k.pace.interval, Timeout: k.pace.silence(now), Agents: k.heartbeats.n, Changed: changed}
}

// Lost is an agent that Tick found silent past its timeout.
type Lost struct {
	AgentID string
	Silent  time.Duration
}

// checkLiveness finds the active agents silent for longer than the
// timeout in effect, visiting only those, and loses them (AgentLost; an
// ACTIVE agent's record becomes UNREACHABLE, its tasks too, and the
// record follows in Ready.After); and, once Config.ReregisterTimeout has
// passed since Config.Start, lists the agents from the registry that did
// not register again (their RECOVERING records become UNREACHABLE).
func (k *Core) checkLiveness(now time.Time) {
	timeout := k.pace.silence(now)
	for a := k.heartbeats.front; a != nil && now.Sub(a.lastHeartbeat) > timeout; a = k.heartbeats.front {
		k.heartbeats.remove(a)
		if !a.active {
			continue // lost or retired meanwhile; a registration queues it again
		}
		k.out.Lost = append(k.out.Lost, Lost{AgentID: a.spec.ID, Silent: now.Sub(a.lastHeartbeat)})
		k.agentLost(a, now)
		if r := k.agentRecs[a.spec.ID]; r != nil && r.State == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			k.markUnreachable(r, now)
		}
	}
	if !k.recoveryChecked && now.Sub(k.cfg.Start) > k.cfg.ReregisterTimeout {
		k.recoveryChecked = true
		for id, a := range k.agents {
			if a.recovering {
				a.recovering = false
				k.out.NotReregistered = append(k.out.NotReregistered, id)
			}
		}
		slices.Sort(k.out.NotReregistered)
		for _, id := range k.out.NotReregistered {
			if r := k.agentRecs[id]; r != nil && r.State == slacklinev1.AgentState_AGENT_STATE_RECOVERING {
				r.State = slacklinev1.AgentState_AGENT_STATE_UNREACHABLE
				k.out.After = append(k.out.After, r.record())
			}
		}
	}
}
