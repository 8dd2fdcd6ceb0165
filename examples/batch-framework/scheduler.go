package main

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// declineSeconds is how long offers that fit nothing (or are of the wrong
// kind) are refused.
const declineSeconds = 5

// schedulerConfig is what the scheduler runs.
type schedulerConfig struct {
	name        string              // framework name, prefix of task ids
	incarnation string              // distinguishes this process's task ids from an earlier one's
	tasks       int                 // how many tasks to run
	need        resources.Resources // resources of each task
	command     string              // shell command of each task
	labels      map[string]string   // labels of each task
	image       string              // image each task runs in (TaskInfo.image), or ""
	maxPerOffer int                 // 0: as many as fit
	revocable   bool                // run only on revocable resources
	maxAttempts int                 // launches that may fail before a task is given up
}

// phase is where a task is in the batch.
type phase int

const (
	phasePending  phase = iota // queued, waiting for an offer
	phaseLaunched              // launched, not terminal yet
	phaseFinished              // reached TASK_STATE_FINISHED
	phaseFailed                // ended otherwise maxAttempts times
)

// task is one task of the batch across its launches.
type task struct {
	index    int
	launches int    // launches so far (numbers the task ids)
	failures int    // launches that ended in a terminal state other than FINISHED
	id       string // id of the latest launch
	agentID  string
	state    slacklinev1.TaskState // latest reported state of the latest launch
	phase    phase
}

// launch is one Accept: tasks on one offer, or with --revocable on one
// agent's revocable offer and its regular offers together.
type launch struct {
	offerID string   // the offer named in logs (the revocable one with --revocable)
	extra   []string // further offers of the same agent accepted with it
	tasks   []*slacklinev1.TaskInfo
	filters *slacklinev1.Filters
}

// offerIDs returns every offer the launch accepts.
func (l launch) offerIDs() []string { return append([]string{l.offerID}, l.extra...) }

// offerPlan is what to do with a batch of offers.
type offerPlan struct {
	launches      []launch
	declines      []string // offer ids to decline for declineSeconds
	shortDeclines []string // offer ids to decline for shortDeclineSeconds
	suppress      bool     // nothing is pending: stop offers
}

// outcome is what an update changed.
type outcome struct {
	task     *task // nil when the update is not about a current launch
	changed  bool  // the task's state changed: log it
	requeued bool  // the task failed and waits for another launch
	gaveUp   bool  // the task failed for the last time
	kill     bool  // the update is about a stale launch still running: kill it
	revive   bool  // tasks are pending while offers are suppressed
	done     bool  // every task is finished or failed
}

// scheduler is the batch's decision logic: offers and updates in, launches,
// declines, kills and revives out. It does no I/O and is not safe for
// concurrent use (the SDK calls handlers from one goroutine).
type scheduler struct {
	cfg        schedulerConfig
	tasks      []*task
	queue      []*task          // pending tasks, in launch order
	byID       map[string]*task // every launch id handed out
	suppressed bool
	// held are revocable offers kept, with --revocable, until a regular
	// offer of the same agent brings the memory their tasks need (offers of
	// both kinds arrive separately). Holding revocable offers starves no
	// guaranteed work, unlike holding regular ones.
	held map[string]heldOffer
	now  func() time.Time
}

// heldOffer is a revocable offer kept until memory comes with it.
type heldOffer struct {
	offer *slacklinev1.Offer
	since time.Time
}

// holdFor is how long a revocable offer is kept waiting for a regular one.
const holdFor = 10 * time.Second

// shortDeclineSeconds is how long a regular offer without a revocable
// partner is refused with --revocable: short, so it comes back soon to meet
// a held revocable offer.
const shortDeclineSeconds = 1

func newScheduler(cfg schedulerConfig) *scheduler {
	s := &scheduler{cfg: cfg, byID: make(map[string]*task), held: map[string]heldOffer{}, now: time.Now}
	for i := range cfg.tasks {
		t := &task{index: i}
		s.tasks = append(s.tasks, t)
		s.queue = append(s.queue, t)
	}
	return s
}

// subscribed records a new subscription, which starts unsuppressed.
func (s *scheduler) subscribed() { s.suppressed = false }

// setSuppressed records that Suppress (true) or Revive (false) succeeded.
func (s *scheduler) setSuppressed(suppressed bool) { s.suppressed = suppressed }

// offers decides what to do with offers: launch pending tasks on those of the
// right kind (regular, or revocable with --revocable), as many as fit up to
// maxPerOffer, and decline the others.
func (s *scheduler) offers(offers []*slacklinev1.Offer) offerPlan {
	if s.cfg.revocable {
		return s.finishPlan(s.revocableOffers(offers))
	}
	var plan offerPlan
	var usable []*slacklinev1.Offer
	for _, o := range offers {
		if _, revocable, err := frameworkapi.OfferResources(o); err != nil || revocable != s.cfg.revocable {
			plan.declines = append(plan.declines, o.GetId())
			continue
		}
		usable = append(usable, o)
	}
	needs := make([]frameworkapi.Need, len(s.queue))
	for i := range needs {
		needs[i] = frameworkapi.Need{Resources: s.cfg.need}
	}
	launched := make(map[int]bool) // queue positions
	for _, p := range frameworkapi.Pack(usable, needs, s.cfg.maxPerOffer) {
		if len(p.Tasks) == 0 {
			plan.declines = append(plan.declines, p.Offer.GetId())
			continue
		}
		l := launch{offerID: p.Offer.GetId()}
		for _, placed := range p.Tasks {
			t := s.queue[placed.Need]
			launched[placed.Need] = true
			l.tasks = append(l.tasks, s.launchTask(t, p.Offer, placed.Resources))
		}
		plan.launches = append(plan.launches, l)
	}
	remaining := s.queue[:0]
	for i, t := range s.queue {
		if !launched[i] {
			remaining = append(remaining, t)
		}
	}
	s.queue = remaining
	return s.finishPlan(plan)
}

// finishPlan sets the launches' filters and whether to suppress.
func (s *scheduler) finishPlan(plan offerPlan) offerPlan {
	// While tasks are pending the unused part of each accepted offer goes
	// back to the pool at once, so the allocator can hand it to whoever is
	// furthest below its fair share; otherwise the default refusal applies.
	var filters *slacklinev1.Filters
	if len(s.queue) > 0 {
		filters = frameworkapi.Filters(0)
	}
	for i := range plan.launches {
		plan.launches[i].filters = filters
	}
	plan.suppress = len(s.queue) == 0 && !s.suppressed
	return plan
}

// revocableOffers places pending tasks on revocable resources. Agents'
// estimates cover cpus (memory only when the agent oversubscribes it), so,
// as in Mesos, a task takes its cpus from an agent's revocable offer and
// whatever that offer lacks (usually memory and disk) from a regular offer of
// the same agent, accepted together. Tasks never use regular cpus. The two
// kinds of offers can arrive separately: a revocable offer is held (up to
// holdFor) until a regular offer of its agent comes; a regular offer without
// a revocable partner is declined for a second only, so it comes back soon.
func (s *scheduler) revocableOffers(offers []*slacklinev1.Offer) offerPlan {
	var plan offerPlan
	now := s.now()
	type agentOffers struct {
		revocable, regular []*slacklinev1.Offer
		rev, reg           resources.Resources
	}
	byAgent := map[string]*agentOffers{}
	var order []string
	group := func(agentID string) *agentOffers {
		ao := byAgent[agentID]
		if ao == nil {
			ao = &agentOffers{}
			byAgent[agentID] = ao
			order = append(order, agentID)
		}
		return ao
	}
	for _, o := range offers {
		res, revocable, err := frameworkapi.OfferResources(o)
		switch {
		case err != nil:
			plan.declines = append(plan.declines, o.GetId())
		case revocable:
			s.held[o.GetId()] = heldOffer{offer: o, since: now}
		default:
			ao := group(o.GetAgentId())
			ao.regular, ao.reg = append(ao.regular, o), ao.reg.Add(res)
		}
	}
	for _, h := range s.held {
		res, _, _ := frameworkapi.OfferResources(h.offer)
		ao := group(h.offer.GetAgentId())
		ao.revocable, ao.rev = append(ao.revocable, h.offer), ao.rev.Add(res)
	}
	for _, agentID := range order {
		ao := byAgent[agentID]
		if len(ao.revocable) == 0 {
			for _, o := range ao.regular {
				plan.shortDeclines = append(plan.shortDeclines, o.GetId())
			}
			continue
		}
		var l launch
		l.offerID = ao.revocable[0].GetId()
		role := frameworkapi.OfferRole(ao.revocable[0])
		for len(s.queue) > 0 && (s.cfg.maxPerOffer == 0 || len(l.tasks) < s.cfg.maxPerOffer) {
			rev, reg, ok := splitNeed(s.cfg.need, ao.rev, ao.reg)
			if !ok {
				break
			}
			ao.rev, ao.reg = ao.rev.Sub(rev), ao.reg.Sub(reg)
			t := s.queue[0]
			s.queue = s.queue[1:]
			info := s.launchTask(t, ao.revocable[0], rev.Add(reg))
			info.Resources = append(rev.Proto(role, resources.Revocable), reg.Proto(role, resources.Regular)...)
			l.tasks = append(l.tasks, info)
		}
		if len(l.tasks) == 0 {
			// Nothing fits: the regular offers go back briefly; the
			// revocable ones stay held for a better partner.
			for _, o := range ao.regular {
				plan.shortDeclines = append(plan.shortDeclines, o.GetId())
			}
			continue
		}
		for _, o := range ao.revocable {
			delete(s.held, o.GetId())
		}
		for _, o := range append(ao.revocable[1:], ao.regular...) {
			l.extra = append(l.extra, o.GetId())
		}
		plan.launches = append(plan.launches, l)
	}
	// Held offers go back when nothing is pending or they waited long enough.
	for id, h := range s.held {
		if len(s.queue) == 0 || now.Sub(h.since) >= holdFor {
			plan.declines = append(plan.declines, id)
			delete(s.held, id)
		}
	}
	return plan
}

// rescind forgets an offer the coordinator took back.
func (s *scheduler) rescind(offerID string) { delete(s.held, offerID) }

// splitNeed takes need's cpus from the revocable pool and each other scalar
// from the revocable pool when it has enough, else from the regular one.
func splitNeed(need, rev, reg resources.Resources) (fromRev, fromReg resources.Resources, ok bool) {
	if rev.CPUs() < need.CPUs() {
		return resources.Resources{}, resources.Resources{}, false
	}
	fromRev = fromRev.With(resources.CPUs, need.CPUs())
	for _, sc := range []resources.Scalar{resources.Mem, resources.Disk} {
		switch v := need.Get(sc); {
		case v == 0:
		case rev.Get(sc) >= v:
			fromRev = fromRev.With(sc, v)
		case reg.Get(sc) >= v:
			fromReg = fromReg.With(sc, v)
		default:
			return resources.Resources{}, resources.Resources{}, false
		}
	}
	return fromRev, fromReg, true
}

// launchTask moves t to launched and returns its TaskInfo on offer.
func (s *scheduler) launchTask(t *task, offer *slacklinev1.Offer, res resources.Resources) *slacklinev1.TaskInfo {
	t.launches++
	t.id = s.taskID(t.index, t.launches)
	t.agentID = offer.GetAgentId()
	t.state = slacklinev1.TaskState_TASK_STATE_UNSPECIFIED
	t.phase = phaseLaunched
	s.byID[t.id] = t
	info := frameworkapi.NewTask(t.id, fmt.Sprintf("%s-%d", s.cfg.name, t.index), offer, res,
		&slacklinev1.CommandInfo{Value: s.cfg.command, Shell: true})
	if len(s.cfg.labels) > 0 {
		info.Labels = maps.Clone(s.cfg.labels)
	}
	info.Image = s.cfg.image
	return info
}

// launchFailed puts the tasks of a launch whose Accept call failed back at
// the head of the queue. Their ids are not reused.
func (s *scheduler) launchFailed(l launch) {
	var back []*task
	for _, info := range l.tasks {
		if t := s.byID[info.GetTaskId()]; t != nil && t.id == info.GetTaskId() && t.phase == phaseLaunched {
			t.phase = phasePending
			back = append(back, t)
		}
	}
	s.queue = append(back, s.queue...)
}

// taskID is "<name>-<index>-<launch>-<incarnation>".
func (s *scheduler) taskID(index, launchNumber int) string {
	return fmt.Sprintf("%s-%d-%d-%s", s.cfg.name, index, launchNumber, s.cfg.incarnation)
}

// parseTaskID returns the index and launch number of a task id of this
// framework, from this process or an earlier one.
func (s *scheduler) parseTaskID(id string) (index, launchNumber int, ok bool) {
	rest, found := strings.CutPrefix(id, s.cfg.name+"-")
	if !found {
		return 0, 0, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 {
		return 0, 0, false
	}
	index, err1 := strconv.Atoi(parts[0])
	launchNumber, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || index < 0 || index >= len(s.tasks) {
		return 0, 0, false
	}
	return index, launchNumber, true
}

// update applies a status update.
func (s *scheduler) update(status *slacklinev1.TaskStatus) outcome {
	var out outcome
	t := s.byID[status.GetTaskId()]
	if t == nil {
		t = s.adopt(status)
	}
	terminal := frameworkapi.IsTerminal(status.GetState())
	switch {
	case t == nil:
		// Not ours, or an old launch of a task that has moved on.
		out.kill = !terminal && s.isOurs(status.GetTaskId())
	case t.id != status.GetTaskId():
		// A stale launch of a task that was launched again.
		out.kill = !terminal
	case t.phase == phaseLaunched:
		out.task = t
		out.changed = t.state != status.GetState()
		t.state = status.GetState()
		if status.GetAgentId() != "" {
			t.agentID = status.GetAgentId()
		}
		switch {
		case status.GetState() == slacklinev1.TaskState_TASK_STATE_FINISHED:
			t.phase = phaseFinished
		case terminal:
			// A launch on an offer that was no longer outstanding (rescinded
			// meanwhile) never reached an agent: not an attempt.
			if status.GetReason() != slacklinev1.Reason_REASON_INVALID_OFFERS {
				t.failures++
			}
			if t.failures >= s.cfg.maxAttempts {
				t.phase = phaseFailed
				out.gaveUp = true
			} else {
				t.phase = phasePending
				s.queue = append(s.queue, t)
				out.requeued = true
			}
		}
	}
	out.revive = len(s.queue) > 0 && s.suppressed
	out.done = s.done()
	return out
}

// adopt takes over a launch of an earlier process of this framework
// (reported by reconciliation after a failover) when its task has not been
// launched by this process: the task is not launched a second time.
func (s *scheduler) adopt(status *slacklinev1.TaskStatus) *task {
	index, launchNumber, ok := s.parseTaskID(status.GetTaskId())
	if !ok {
		return nil
	}
	t := s.tasks[index]
	if t.phase != phasePending || t.launches > 0 {
		return nil
	}
	for i, queued := range s.queue {
		if queued == t {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	t.launches = launchNumber
	t.id = status.GetTaskId()
	t.agentID = status.GetAgentId()
	t.phase = phaseLaunched
	s.byID[t.id] = t
	return t
}

func (s *scheduler) isOurs(taskID string) bool {
	_, _, ok := s.parseTaskID(taskID)
	return ok
}

// done reports whether every task is finished or failed.
func (s *scheduler) done() bool {
	for _, t := range s.tasks {
		if t.phase != phaseFinished && t.phase != phaseFailed {
			return false
		}
	}
	return true
}

// summary counts finished and failed (given up) tasks.
func (s *scheduler) summary() (finished, failed int) {
	for _, t := range s.tasks {
		switch t.phase {
		case phaseFinished:
			finished++
		case phaseFailed:
			failed++
		}
	}
	return finished, failed
}
