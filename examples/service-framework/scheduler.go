package main

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Filters the scheduler asks for.
const (
	// declineSeconds refuses offers it has no use for.
	declineSeconds = 5
	// acceptInverseSeconds silences inverse offers for an agent it left (a
	// new window rescinds the filter anyway).
	acceptInverseSeconds = 3600
	// declineInverseSeconds is when a declined inverse offer comes back, so
	// that the operator sees the framework's progress.
	declineInverseSeconds = 5
)

// schedulerConfig is what the service runs.
type schedulerConfig struct {
	name        string              // framework name, prefix of task ids
	incarnation string              // keeps this process's task ids apart
	instances   int                 // how many instances to keep running
	need        resources.Resources // resources of each instance
	command     string              // shell command of each instance
	labels      map[string]string   // labels of each task
	// moveTimeout is how long an inverse offer is held while instances are
	// moved off its agent before it is declined.
	moveTimeout time.Duration
	// healthCheck, when set, is every instance's health check.
	healthCheck *slacklinev1.HealthCheck
}

// instance is one live (not terminal) task of the service.
type instance struct {
	id       string
	agentID  string
	hostname string
	state    slacklinev1.TaskState
	killing  bool // a kill was sent to move it off a draining agent
}

// heldInverse is an inverse offer not answered yet: its agent is being
// drained.
type heldInverse struct {
	offer *slacklinev1.InverseOffer
	since time.Time
}

// launch is one Accept: one instance on one offer.
type launch struct {
	offerID string
	task    *slacklinev1.TaskInfo
}

// kill asks the coordinator to kill an instance.
type kill struct{ taskID, agentID string }

// plan is what the scheduler wants done after an event.
type plan struct {
	launches       []launch
	declines       []string // offer ids
	kills          []kill
	acceptInverse  []string // inverse offer ids
	declineInverse []string // inverse offer ids
	revive         bool     // instances are missing: ask for offers again
}

// scheduler keeps N instances of a service running, at most one per agent,
// on the agents that stay available longest, and moves them off agents that
// are drained for maintenance before it agrees to leave. It is the decision
// logic only: events in, a plan out; no I/O, no clock (now is passed in),
// not safe for concurrent use.
type scheduler struct {
	cfg       schedulerConfig
	seq       int
	instances map[string]*instance
	// held are the inverse offers being worked on, by agent id.
	held map[string]*heldInverse
	// leaving are the agents whose inverse offers were accepted: no new
	// instance goes there until an offer shows it without unavailability.
	leaving map[string]bool
	// lastMissing is missing() after the previous event, to revive only
	// when instances went missing.
	lastMissing int
	// unhealthyReplaced counts instances killed for failing their health
	// check (each replaced like any instance that ended).
	unhealthyReplaced int
}

func newScheduler(cfg schedulerConfig) *scheduler {
	return &scheduler{cfg: cfg, instances: map[string]*instance{}, held: map[string]*heldInverse{}, leaving: map[string]bool{}}
}

// draining reports whether an agent is being (or was agreed to be) left.
func (s *scheduler) draining(agentID string) bool {
	return s.held[agentID] != nil || s.leaving[agentID]
}

// healthy counts the instances that will stay: not on a draining agent, not
// being killed. running counts those of them that are RUNNING.
func (s *scheduler) healthy() (healthy, running int) {
	for _, in := range s.instances {
		if in.killing || s.draining(in.agentID) {
			continue
		}
		healthy++
		if in.state == slacklinev1.TaskState_TASK_STATE_RUNNING {
			running++
		}
	}
	return healthy, running
}

// missing is how many instances must be started.
func (s *scheduler) missing() int {
	healthy, _ := s.healthy()
	return max(0, s.cfg.instances-healthy)
}

// offers places missing instances, one per agent, on agents without
// unavailability first, then on those whose maintenance starts latest,
// never on an agent being drained; the other offers are declined. It also
// makes progress on the agents being drained (see progress).
func (s *scheduler) offers(offers []*slacklinev1.Offer, now time.Time) plan {
	// Held inverse offers time out on the events that come anyway.
	p := s.progress(now)
	used := map[string]bool{}
	for _, in := range s.instances {
		used[in.agentID] = true
	}
	for _, o := range offers {
		if _, scheduled := frameworkapi.OfferWindow(o); !scheduled {
			delete(s.leaving, o.GetAgentId()) // back from maintenance
		}
	}
	missing := s.missing()
	for _, o := range frameworkapi.PreferAvailable(offers) {
		res, revocable, err := frameworkapi.OfferResources(o)
		if missing == 0 || err != nil || revocable || used[o.GetAgentId()] || s.draining(o.GetAgentId()) || !res.Contains(s.cfg.need) {
			p.declines = append(p.declines, o.GetId())
			continue
		}
		s.seq++
		id := fmt.Sprintf("%s-%d-%s", s.cfg.name, s.seq, s.cfg.incarnation)
		info := frameworkapi.NewTask(id, s.cfg.name, o, s.cfg.need, &slacklinev1.CommandInfo{Value: s.cfg.command, Shell: true})
		if len(s.cfg.labels) > 0 {
			info.Labels = maps.Clone(s.cfg.labels)
		}
		if s.cfg.healthCheck != nil {
			info.HealthCheck = proto.CloneOf(s.cfg.healthCheck)
		}
		s.instances[id] = &instance{id: id, agentID: o.GetAgentId(), hostname: o.GetHostname(), state: slacklinev1.TaskState_TASK_STATE_STAGING}
		used[o.GetAgentId()] = true
		missing--
		p.launches = append(p.launches, launch{offerID: o.GetId(), task: info})
	}
	s.lastMissing = missing
	return p
}

// launchFailed forgets an instance whose Accept call failed.
func (s *scheduler) launchFailed(l launch) {
	delete(s.instances, l.task.GetTaskId())
	s.lastMissing = s.missing()
}

// update applies a status update; updates of unknown tasks are ignored
// (duplicates of terminal updates, tasks of an earlier process).
func (s *scheduler) update(st *slacklinev1.TaskStatus, now time.Time) plan {
	in := s.instances[st.GetTaskId()]
	if in == nil {
		return plan{}
	}
	if frameworkapi.IsTerminal(st.GetState()) {
		// Whatever ended it (its command, its agent, a failed health
		// check: REASON_TASK_HEALTH_CHECK_STATUS_FAILED), it is missing
		// now and the next offers replace it.
		delete(s.instances, in.id)
		if st.GetReason() == slacklinev1.Reason_REASON_TASK_HEALTH_CHECK_STATUS_FAILED {
			s.unhealthyReplaced++
		}
	} else {
		in.state = st.GetState()
	}
	return s.progress(now)
}

// inverseOffers starts draining the agents of new inverse offers.
func (s *scheduler) inverseOffers(offers []*slacklinev1.InverseOffer, now time.Time) plan {
	for _, io := range offers {
		s.held[io.GetAgentId()] = &heldInverse{offer: io, since: now}
	}
	return s.progress(now)
}

// rescindInverse forgets a withdrawn inverse offer (a new one follows if
// the agent is still scheduled).
func (s *scheduler) rescindInverse(id string) {
	for agentID, h := range s.held {
		if h.offer.GetId() == id {
			delete(s.held, agentID)
		}
	}
}

// progress moves instances off draining agents: once enough healthy
// instances run elsewhere, those on a draining agent are killed; once none
// is left there, the inverse offer is accepted. An inverse offer held past
// moveTimeout without that is declined: the service cannot move without
// dropping below its instance count (it keeps trying, and answers the next
// inverse offer the same way).
func (s *scheduler) progress(now time.Time) plan {
	var p plan
	_, running := s.healthy()
	for _, agentID := range slices.Sorted(maps.Keys(s.held)) {
		h := s.held[agentID]
		var there []*instance
		for _, in := range s.instances {
			if in.agentID == agentID {
				there = append(there, in)
			}
		}
		if len(there) == 0 {
			p.acceptInverse = append(p.acceptInverse, h.offer.GetId())
			delete(s.held, agentID)
			s.leaving[agentID] = true
			continue
		}
		if running >= s.cfg.instances {
			for _, in := range there {
				if !in.killing {
					in.killing = true
					p.kills = append(p.kills, kill{taskID: in.id, agentID: in.agentID})
				}
			}
			continue
		}
		if now.Sub(h.since) >= s.cfg.moveTimeout {
			p.declineInverse = append(p.declineInverse, h.offer.GetId())
			delete(s.held, agentID)
		}
	}
	missing := s.missing()
	p.revive = missing > s.lastMissing
	s.lastMissing = missing
	return p
}

// counts returns the live instances and how many of them are RUNNING.
func (s *scheduler) counts() (live, running int) {
	for _, in := range s.instances {
		live++
		if in.state == slacklinev1.TaskState_TASK_STATE_RUNNING {
			running++
		}
	}
	return live, running
}
