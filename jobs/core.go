package jobs

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// Limits of the core. Each limit hit is counted in Core.LimitHits under the
// limit's name.
const (
	// DefaultMaxJobs bounds the jobs kept (finished ones included).
	DefaultMaxJobs = 10_000
	// MaxEvents bounds a job's events; the oldest go first.
	MaxEvents = 100
	// MaxRunsKept bounds a cron job's runs kept; the oldest finished runs
	// are deleted.
	MaxRunsKept = 20
	// DeclineSeconds is how long offers that fit nothing are refused (a
	// revive, when work arrives, clears the refusal).
	DeclineSeconds = 5
	// ShortDeclineSeconds is how long a regular offer is refused while a
	// slack job waits for it beside a revocable offer.
	ShortDeclineSeconds = 1
	// HoldFor is how long a revocable offer is held waiting for a regular
	// offer of its agent (revocable and regular offers arrive apart).
	HoldFor = 10 * time.Second
	// ReconcileEvery is how often a task whose launch is unconfirmed is
	// reconciled again while the coordinator gives no answer (its agent
	// is recovering).
	ReconcileEvery = 10 * time.Second
)

// Limit names, the keys of Core.LimitHits.
const (
	LimitJobs   = "jobs"
	LimitEvents = "job_events"
	LimitRuns   = "cron_runs"
)

// Sentinel errors of the core's operations.
var (
	// ErrExists: a job of that name exists.
	ErrExists = errors.New("job exists")
	// ErrNotFound: no job of that name.
	ErrNotFound = errors.New("no such job")
	// ErrFull: the core holds MaxJobs jobs.
	ErrFull = errors.New("too many jobs")
	// ErrFinal: the job already ended.
	ErrFinal = errors.New("job already ended")
	// ErrRole: the job's role is not one of the service's.
	ErrRole = errors.New("role not served")
)

// Config configures a Core.
type Config struct {
	// Roles are the roles the service's framework subscribes with; a job
	// in another role is refused.
	Roles []string
	// MaxJobs bounds the jobs kept (DefaultMaxJobs when zero).
	MaxJobs int
}

// Kill is a task to kill.
type Kill struct{ TaskID, AgentID string }

// Launch is one Accept: tasks on the offers of one agent.
type Launch struct {
	OfferIDs []string
	Tasks    []*slacklinev1.TaskInfo
	// RefuseSeconds for the offers' unused remainder (negative: the
	// coordinator's default).
	RefuseSeconds float64
}

// Plan is what to do with a batch of offers. The shell persists the dirty
// records (TakeDirty) before it launches.
type Plan struct {
	Launches []Launch
	// Declines are refused for DeclineSeconds; ShortDeclines, regular
	// offers that a slack job may need beside a revocable offer of the same
	// agent, for ShortDeclineSeconds only, so that they come back soon.
	Declines      []string
	ShortDeclines []string
}

// Effects are the calls to make after an operation, besides persisting:
// kills, and suppressions and revivals of offers per role.
type Effects struct {
	Kills []Kill
	// Reconcile are tasks to ask the coordinator about (explicit
	// reconciliation): their launch is unconfirmed.
	Reconcile []Kill
	// Declines are held revocable offers to give back (refuse
	// DeclineSeconds).
	Declines []string
	Suppress []string
	Revive   []string
}

// Dirty names the records changed since the last TakeDirty: job headers,
// indexes, and deleted jobs.
type Dirty struct {
	Jobs    []*Job
	Indexes map[string][]int // job name -> changed indexes
	Deleted []string
}

// Core is the job service's decision logic: specs, offers, status updates
// and ticks in; launches, declines, kills, suppressions, revivals and dirty
// records out. It does no I/O, has no clock (every operation takes now) and
// is not safe for concurrent use: the shell serializes calls under one lock.
type Core struct {
	cfg        Config
	jobs       map[string]*Job
	seq        uint64
	suppressed map[string]bool
	revive     map[string]bool // roles with new work since the last Sync
	dirtyJobs  map[string]bool
	dirtyIdx   map[string]map[int]bool
	deleted    map[string]bool
	// held are revocable offers kept until a regular offer of the same
	// agent brings what their tasks need beside slack cpus (memory).
	// Holding revocable offers starves no guaranteed work.
	held map[string]heldOffer
	// unconfirmed are the launched tasks whose launch is unconfirmed
	// (Index.ReconcileAt set), by task id.
	unconfirmed map[string]bool
	// LimitHits counts each limit hit, by limit name.
	LimitHits map[string]int
}

// New returns an empty core.
func New(cfg Config) *Core {
	if cfg.MaxJobs <= 0 {
		cfg.MaxJobs = DefaultMaxJobs
	}
	if len(cfg.Roles) == 0 {
		cfg.Roles = []string{DefaultRole}
	}
	return &Core{
		cfg: cfg, jobs: map[string]*Job{}, suppressed: map[string]bool{}, revive: map[string]bool{},
		dirtyJobs: map[string]bool{}, dirtyIdx: map[string]map[int]bool{}, deleted: map[string]bool{},
		held: map[string]heldOffer{}, unconfirmed: map[string]bool{}, LimitHits: map[string]int{},
	}
}

// Restore adds a persisted job (with its indexes) to a new core.
func (c *Core) Restore(j *Job) {
	j.reindex()
	for i := range j.Indexes {
		if x := &j.Indexes[i]; x.State == IndexLaunched && !x.ReconcileAt.IsZero() {
			c.unconfirmed[x.TaskID] = true
		}
	}
	c.jobs[j.Spec.Name] = j
	c.seq = max(c.seq, j.Seq)
}

// Job returns a job, nil when unknown. The caller must not change it.
func (c *Core) Job(name string) *Job { return c.jobs[name] }

// Jobs returns every job in submission order.
func (c *Core) Jobs() []*Job {
	out := make([]*Job, 0, len(c.jobs))
	for _, j := range c.jobs {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Submit adds a job submitted by owner.
func (c *Core) Submit(spec Spec, owner string, now time.Time) (*Job, error) {
	if !slices.Contains(c.cfg.Roles, spec.Role) {
		return nil, fmt.Errorf("%w: role %q: the job service runs jobs in %s", ErrRole, spec.Role, strings.Join(c.cfg.Roles, ", "))
	}
	if _, ok := c.jobs[spec.Name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrExists, spec.Name)
	}
	if len(c.jobs) >= c.cfg.MaxJobs {
		c.LimitHits[LimitJobs]++
		return nil, fmt.Errorf("%w: the service keeps at most %d jobs (--max-jobs)", ErrFull, c.cfg.MaxJobs)
	}
	c.seq++
	j := &Job{Spec: spec, Owner: owner, Seq: c.seq, Submitted: now}
	if j.IsCron() {
		j.State = Scheduled
		j.NextRun = spec.schedule().Next(now)
		c.event(j, now, "cron job submitted by %s; next run at %s", ownerText(owner), j.NextRun.UTC().Format(time.RFC3339))
	} else {
		c.queue(j, now)
		c.event(j, now, "submitted by %s: %d indexes, parallelism %d", ownerText(owner), spec.Completions, spec.Parallelism)
	}
	c.jobs[spec.Name] = j
	c.markJob(j)
	return j, nil
}

func ownerText(owner string) string { return cmp.Or(owner, "anonymous") }

// queue makes a new job's indexes pending.
func (c *Core) queue(j *Job, now time.Time) {
	j.State = Queued
	j.Indexes = make([]Index, j.Spec.Completions)
	idx := c.dirtyIndexes(j.Spec.Name)
	for i := range j.Indexes {
		j.Indexes[i] = Index{State: IndexPending, PendingSince: now, Queued: uint64(i) + 1}
		idx[i] = true
	}
	j.reindex()
	c.revive[j.Spec.Role] = true
}

// Cancel cancels a job (a cron job: its active runs too).
func (c *Core) Cancel(name string, now time.Time) (Effects, error) {
	j := c.jobs[name]
	if j == nil {
		return Effects{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if IsFinal(j.State) {
		return Effects{}, fmt.Errorf("%w: %q is %s", ErrFinal, name, stateText(j.State))
	}
	var eff Effects
	if j.IsCron() {
		for _, r := range j.Runs {
			if run := c.jobs[r]; run != nil && !IsFinal(run.State) {
				eff.Kills = append(eff.Kills, c.finish(run, now, Cancelled, "cron job "+name+" cancelled")...)
			}
		}
		j.NextRun = time.Time{}
	}
	eff.Kills = append(eff.Kills, c.finish(j, now, Cancelled, "cancelled")...)
	return c.sync(eff, now), nil
}

func stateText(s State) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

// finish ends a job: its launched tasks are to be killed, its other
// unfinished indexes cancelled.
func (c *Core) finish(j *Job, now time.Time, state State, message string) []Kill {
	var kills []Kill
	idx := c.dirtyIndexes(j.Spec.Name)
	for i := range j.Indexes {
		x := &j.Indexes[i]
		switch x.State {
		case IndexLaunched:
			kills = append(kills, Kill{TaskID: x.TaskID, AgentID: x.AgentID})
			x.State = IndexCancelled
			idx[i] = true
		case IndexPending:
			x.State = IndexCancelled
			idx[i] = true
		}
	}
	j.reindex()
	j.State, j.Message, j.Finished = state, message, now
	c.event(j, now, "%s: %s", stateText(state), message)
	c.markJob(j)
	return kills
}

// event appends to a job's bounded history.
func (c *Core) event(j *Job, now time.Time, format string, args ...any) {
	if len(j.Events) >= MaxEvents {
		c.LimitHits[LimitEvents]++
		j.Events = slices.Delete(j.Events, 0, len(j.Events)-MaxEvents+1)
	}
	j.Events = append(j.Events, Event{Time: now, Message: fmt.Sprintf(format, args...)})
	c.markJob(j)
}

func (c *Core) markJob(j *Job) { c.dirtyJobs[j.Spec.Name] = true }

func (c *Core) dirtyIndexes(name string) map[int]bool {
	m := c.dirtyIdx[name]
	if m == nil {
		m = map[int]bool{}
		c.dirtyIdx[name] = m
	}
	return m
}

// TakeDirty returns the records changed since the last call and forgets
// them. The shell encodes them under its lock and writes them before it
// performs the operation's launches, and before it acknowledges updates.
func (c *Core) TakeDirty() Dirty {
	d := Dirty{Indexes: map[string][]int{}}
	for name := range c.dirtyJobs {
		if j := c.jobs[name]; j != nil {
			d.Jobs = append(d.Jobs, j)
		}
	}
	for name, idx := range c.dirtyIdx {
		if c.jobs[name] == nil {
			continue
		}
		for i := range idx {
			d.Indexes[name] = append(d.Indexes[name], i)
		}
		slices.Sort(d.Indexes[name])
	}
	for name := range c.deleted {
		d.Deleted = append(d.Deleted, name)
	}
	slices.SortFunc(d.Jobs, func(a, b *Job) int { return cmp.Compare(a.Seq, b.Seq) })
	slices.Sort(d.Deleted)
	clear(c.dirtyJobs)
	clear(c.dirtyIdx)
	clear(c.deleted)
	return d
}

// wantsOffers reports whether a job can launch a task now.
func wantsOffers(j *Job, now time.Time) bool {
	if j.IsCron() || IsFinal(j.State) || j.launched >= j.Spec.Parallelism {
		return false
	}
	for _, i := range j.pending {
		if !j.Indexes[i].NotBefore.After(now) {
			return true
		}
	}
	return false
}

// sync adds the suppressions and revivals the roles need now to eff.
func (c *Core) sync(eff Effects, now time.Time) Effects {
	want := map[string]bool{}
	for _, j := range c.jobs {
		if wantsOffers(j, now) {
			want[j.Spec.Role] = true
		}
	}
	for _, role := range c.cfg.Roles {
		switch {
		case want[role] && (c.suppressed[role] || c.revive[role]):
			eff.Revive = append(eff.Revive, role)
			c.suppressed[role] = false
		case !want[role] && !c.suppressed[role]:
			eff.Suppress = append(eff.Suppress, role)
			c.suppressed[role] = true
		}
	}
	clear(c.revive)
	return eff
}

// Sync returns the suppressions and revivals the roles need now, after an
// operation without effects of its own (Submit).
func (c *Core) Sync(now time.Time) Effects { return c.sync(Effects{}, now) }

// Subscribed records a new subscription: offers flow in every role until
// the next Sync suppresses them.
func (c *Core) Subscribed(now time.Time) Effects {
	clear(c.suppressed)
	clear(c.held) // offers of an earlier subscription are void
	return c.sync(Effects{}, now)
}

// SetSuppressed records that a Suppress (true) or Revive (false) call for
// role failed, so that the next Sync retries it.
func (c *Core) SetSuppressed(role string, suppressed bool) { c.suppressed[role] = suppressed }

// Launched returns the task ids and agents of every launched index, for
// explicit reconciliation after a restart.
func (c *Core) Launched() []Kill {
	var out []Kill
	for _, j := range c.Jobs() {
		for _, x := range j.Indexes {
			if x.State == IndexLaunched {
				out = append(out, Kill{TaskID: x.TaskID, AgentID: x.AgentID})
			}
		}
	}
	return out
}

// agentOffers are one agent's offers in one role.
type agentOffers struct {
	agentID, role      string
	regular, revocable []*slacklinev1.Offer
	reg, rev           resources.Resources
}

// Offers places ready indexes of the jobs of each offer's role, in queue
// order (priority, then submission), as many as fit and their jobs'
// parallelism allows, honouring each job's revocable policy; it declines
// what it does not use.
func (c *Core) Offers(offers []*slacklinev1.Offer, now time.Time) (Plan, Effects) {
	var plan Plan
	groups := map[[2]string]*agentOffers{}
	var order []*agentOffers
	add := func(o *slacklinev1.Offer, res resources.Resources, revocable bool) {
		key := [2]string{o.GetAgentId(), frameworkapi.OfferRole(o)}
		g := groups[key]
		if g == nil {
			g = &agentOffers{agentID: key[0], role: key[1]}
			groups[key] = g
			order = append(order, g)
		}
		if revocable {
			g.revocable, g.rev = append(g.revocable, o), g.rev.Add(res)
		} else {
			g.regular, g.reg = append(g.regular, o), g.reg.Add(res)
		}
	}
	for _, o := range offers {
		res, revocable, err := frameworkapi.OfferResources(o)
		switch {
		case err != nil:
			plan.Declines = append(plan.Declines, o.GetId())
		case revocable:
			c.held[o.GetId()] = heldOffer{offer: o, since: now}
		default:
			add(o, res, false)
		}
	}
	heldIDs := make([]string, 0, len(c.held))
	for id := range c.held {
		heldIDs = append(heldIDs, id)
	}
	slices.Sort(heldIDs)
	for _, id := range heldIDs {
		res, _, _ := frameworkapi.OfferResources(c.held[id].offer)
		add(c.held[id].offer, res, true)
	}
	queues := map[string][]*Job{}
	for _, g := range order {
		queue, ok := queues[g.role]
		if !ok {
			queue = c.queueOf(g.role)
			queues[g.role] = queue
		}
		var tasks []*slacklinev1.TaskInfo
		for _, j := range queue {
			tasks = append(tasks, c.place(j, g, now)...)
		}
		if len(tasks) > 0 {
			ids := make([]string, 0, len(g.regular)+len(g.revocable))
			for _, o := range append(slices.Clone(g.revocable), g.regular...) {
				ids = append(ids, o.GetId())
				delete(c.held, o.GetId())
			}
			plan.Launches = append(plan.Launches, Launch{OfferIDs: ids, Tasks: tasks})
			continue
		}
		slack := c.wantsSlack(g.role, now)
		for _, o := range g.regular {
			if slack {
				plan.ShortDeclines = append(plan.ShortDeclines, o.GetId())
			} else {
				plan.Declines = append(plan.Declines, o.GetId())
			}
		}
		for _, o := range g.revocable {
			if !slack || now.Sub(c.held[o.GetId()].since) >= HoldFor {
				plan.Declines = append(plan.Declines, o.GetId())
				delete(c.held, o.GetId())
			}
		}
	}
	// While work is ready the remainders go straight back to the
	// allocator (refuse 0 s), which may offer them to this framework
	// again or to a framework further below its fair share.
	for i := range plan.Launches {
		plan.Launches[i].RefuseSeconds = -1
		for _, j := range c.jobs {
			if wantsOffers(j, now) {
				plan.Launches[i].RefuseSeconds = 0
				break
			}
		}
	}
	return plan, c.sync(Effects{}, now)
}

// heldOffer is a revocable offer held since a time.
type heldOffer struct {
	offer *slacklinev1.Offer
	since time.Time
}

// wantsSlack reports whether a job of role could launch on revocable
// resources now.
func (c *Core) wantsSlack(role string, now time.Time) bool {
	for _, j := range c.jobs {
		if j.Spec.Role == role && j.Spec.Revocable != RevocableNever && wantsOffers(j, now) {
			return true
		}
	}
	return false
}

// Rescind forgets a held offer the coordinator took back.
func (c *Core) Rescind(offerID string) { delete(c.held, offerID) }

// Held returns the ids of the revocable offers held, sorted.
func (c *Core) Held() []string {
	ids := make([]string, 0, len(c.held))
	for id := range c.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// queueOf returns the jobs of a role that may launch, by priority then
// submission.
func (c *Core) queueOf(role string) []*Job {
	var q []*Job
	for _, j := range c.jobs {
		if j.Spec.Role == role && !j.IsCron() && !IsFinal(j.State) {
			q = append(q, j)
		}
	}
	slices.SortFunc(q, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), cmp.Compare(a.Seq, b.Seq))
	})
	return q
}

// place launches ready indexes of j on g's resources.
func (c *Core) place(j *Job, g *agentOffers, now time.Time) []*slacklinev1.TaskInfo {
	if j.launched >= j.Spec.Parallelism || len(j.pending) == 0 {
		return nil
	}
	need := j.Spec.Need()
	var tasks []*slacklinev1.TaskInfo
	taken := map[int]bool{}
	for _, i := range j.pending {
		if j.launched >= j.Spec.Parallelism {
			break
		}
		x := &j.Indexes[i]
		if x.NotBefore.After(now) {
			continue
		}
		fromRev, fromReg, ok := split(j.Spec, x, need, g.rev, g.reg, now)
		if !ok {
			break
		}
		g.rev, g.reg = g.rev.Sub(fromRev), g.reg.Sub(fromReg)
		taken[i] = true
		x.Attempts++
		x.State = IndexLaunched
		x.TaskID = taskID(j.Spec.Name, i, x.Attempts)
		x.AgentID = g.agentID
		x.TaskState, x.Reason, x.Message = slacklinev1.TaskState_TASK_STATE_STAGING, 0, ""
		x.NotBefore = time.Time{}
		j.launched++
		c.dirtyIndexes(j.Spec.Name)[i] = true
		tasks = append(tasks, c.taskInfo(j, i, g, fromRev, fromReg))
	}
	if len(taken) > 0 {
		j.pending = slices.DeleteFunc(j.pending, func(i int) bool { return taken[i] })
		if j.State == Queued {
			j.State, j.Started = Running, now
			c.event(j, now, "running: first task launched")
		}
		c.markJob(j)
	}
	return tasks
}

// split takes need from an agent's revocable and regular resources as the
// job's policy says. Agents estimate slack cpus (and memory only when they
// oversubscribe it), so, as in Mesos, a revocable task takes its cpus from
// the revocable offer and each other scalar from it when it has enough,
// else from the regular offer of the same agent.
func split(spec Spec, x *Index, need, rev, reg resources.Resources, now time.Time) (fromRev, fromReg resources.Resources, ok bool) {
	onSlack := func() (resources.Resources, resources.Resources, bool) {
		if rev.CPUs() < need.CPUs() {
			return resources.Resources{}, resources.Resources{}, false
		}
		r := resources.Resources{}.With(resources.CPUs, need.CPUs())
		var g resources.Resources
		for _, sc := range []resources.Scalar{resources.Mem, resources.Disk, resources.Bandwidth} {
			switch v := need.Get(sc); {
			case v == 0:
			case rev.Get(sc) >= v:
				r = r.With(sc, v)
			case reg.Get(sc) >= v:
				g = g.With(sc, v)
			default:
				return resources.Resources{}, resources.Resources{}, false
			}
		}
		return r, g, true
	}
	switch spec.Revocable {
	case RevocableOnly:
		return onSlack()
	case RevocablePrefer:
		if r, g, ok := onSlack(); ok {
			return r, g, true
		}
		if now.Sub(x.PendingSince) < time.Duration(spec.PreferWait) {
			return resources.Resources{}, resources.Resources{}, false
		}
	}
	if reg.Contains(need) {
		return resources.Resources{}, need, true
	}
	return resources.Resources{}, resources.Resources{}, false
}

// taskInfo builds index i's task.
func (c *Core) taskInfo(j *Job, i int, g *agentOffers, fromRev, fromReg resources.Resources) *slacklinev1.TaskInfo {
	env := map[string]string{IndexEnv: fmt.Sprint(i), "SLACKLINE_JOB_NAME": j.Spec.Name}
	for k, v := range j.Spec.Environment {
		env[k] = v
	}
	labels := map[string]string{"slackline.job": j.Spec.Name, "slackline.job.index": fmt.Sprint(i)}
	for k, v := range j.Spec.Labels {
		labels[k] = v
	}
	var res []*slacklinev1.Resource
	if !fromRev.IsEmpty() {
		res = append(res, fromRev.Proto(g.role, resources.Revocable)...)
	}
	if !fromReg.IsEmpty() {
		res = append(res, fromReg.Proto(g.role, resources.Regular)...)
	}
	x := j.Indexes[i]
	return &slacklinev1.TaskInfo{
		TaskId:    x.TaskID,
		Name:      fmt.Sprintf("%s-%d", j.Spec.Name, i),
		AgentId:   g.agentID,
		Resources: res,
		Command:   &slacklinev1.CommandInfo{Value: j.Spec.Command, Shell: true, Environment: env},
		Labels:    labels,
		User:      j.Spec.User,
	}
}

// NotLaunched puts tasks that were certainly not launched (the shell did
// not call Accept) back in their queues; it counts as a loss, not a
// failure.
func (c *Core) NotLaunched(tasks []*slacklinev1.TaskInfo, now time.Time, why string) Effects {
	for _, t := range tasks {
		j, x, i := c.current(t.GetTaskId())
		if x == nil || x.State != IndexLaunched {
			continue
		}
		x.Losses++
		j.Lost++
		c.requeue(j, x, i, now, time.Time{})
		c.event(j, now, "index %d: %s not launched (%s); re-queued, not a failure", i, t.GetTaskId(), why)
	}
	return c.sync(Effects{}, now)
}

// LaunchFailed marks the tasks of an Accept call that failed as
// unconfirmed: the coordinator may have launched them before the call
// failed (a timeout, a lost connection), so relaunching at once could run
// an index twice. They stay launched, and Effects.Reconcile names them:
// the coordinator's answer to an explicit reconciliation decides (a status
// of the task confirms it; GONE or UNKNOWN, a task it never launched,
// re-queues the index as lost). Tick asks again every ReconcileEvery while
// no answer comes.
func (c *Core) LaunchFailed(tasks []*slacklinev1.TaskInfo, now time.Time, why string) Effects {
	var eff Effects
	for _, t := range tasks {
		j, x, i := c.current(t.GetTaskId())
		if x == nil || x.State != IndexLaunched {
			continue
		}
		x.ReconcileAt = now.Add(ReconcileEvery)
		c.unconfirmed[x.TaskID] = true
		c.dirtyIndexes(j.Spec.Name)[i] = true
		c.event(j, now, "index %d: launch of %s failed (%s); reconciling before a relaunch", i, t.GetTaskId(), why)
		eff.Reconcile = append(eff.Reconcile, Kill{TaskID: x.TaskID, AgentID: x.AgentID})
	}
	return c.sync(eff, now)
}

// current finds the job and index of a task id, when it is the index's
// latest attempt.
func (c *Core) current(id string) (*Job, *Index, int) {
	name, i, attempt, ok := ParseTaskID(id)
	if !ok {
		return nil, nil, 0
	}
	j := c.jobs[name]
	if j == nil || i >= len(j.Indexes) || j.Indexes[i].Attempts != attempt {
		return j, nil, i
	}
	return j, &j.Indexes[i], i
}

func (c *Core) requeue(j *Job, x *Index, i int, now, notBefore time.Time) {
	x.State = IndexPending
	j.queued++
	x.Queued = j.queued
	x.ReconcileAt = time.Time{}
	x.NotBefore = notBefore
	x.PendingSince = now
	j.launched--
	j.pending = append(j.pending, i)
	c.dirtyIndexes(j.Spec.Name)[i] = true
	c.markJob(j)
	c.revive[j.Spec.Role] = true
}

// Outcome is how Update classified a terminal status.
type Outcome int

// Outcomes of a terminal status.
const (
	// OutcomeNone: not terminal, or not about a current task.
	OutcomeNone Outcome = iota
	// OutcomeSucceeded: the index succeeded.
	OutcomeSucceeded
	// OutcomeFailed: a failure counted against the index's retries.
	OutcomeFailed
	// OutcomePreempted: killed by a QoS correction, a revocation or
	// maintenance; re-queued, not a failure.
	OutcomePreempted
	// OutcomeLost: lost with its agent or the coordinator; re-queued, not
	// a failure.
	OutcomeLost
)

// Classify says what a terminal status means for its index.
func Classify(st *slacklinev1.TaskStatus) Outcome {
	switch st.GetState() {
	case slacklinev1.TaskState_TASK_STATE_FINISHED:
		return OutcomeSucceeded
	case slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.TaskState_TASK_STATE_DROPPED,
		slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR:
		if st.GetReason() == slacklinev1.Reason_REASON_AGENT_DRAINED || st.GetReason() == slacklinev1.Reason_REASON_CONTAINER_PREEMPTED {
			return OutcomePreempted
		}
		return OutcomeLost
	}
	if !frameworkapi.IsTerminal(st.GetState()) {
		return OutcomeNone
	}
	switch st.GetReason() {
	case slacklinev1.Reason_REASON_CONTAINER_PREEMPTED, slacklinev1.Reason_REASON_AGENT_DRAINED:
		return OutcomePreempted
	case slacklinev1.Reason_REASON_AGENT_REMOVED, slacklinev1.Reason_REASON_AGENT_UNREACHABLE,
		slacklinev1.Reason_REASON_AGENT_RESTARTED, slacklinev1.Reason_REASON_AGENT_REMOVED_BY_OPERATOR,
		slacklinev1.Reason_REASON_FRAMEWORK_REMOVED, slacklinev1.Reason_REASON_INVALID_OFFERS,
		slacklinev1.Reason_REASON_RECONCILIATION:
		return OutcomeLost
	}
	return OutcomeFailed
}

// Update applies a task status update.
func (c *Core) Update(st *slacklinev1.TaskStatus, now time.Time) (Outcome, Effects) {
	terminal := frameworkapi.IsTerminal(st.GetState())
	j, x, i := c.current(st.GetTaskId())
	var eff Effects
	if (x == nil || x.State != IndexLaunched) && j != nil && i < len(j.Indexes) && st.GetState() == slacklinev1.TaskState_TASK_STATE_FINISHED &&
		(j.Indexes[i].State == IndexPending || j.Indexes[i].State == IndexLaunched) {
		// An earlier attempt, thought lost, finished after all: the
		// index succeeded once; its current attempt is not needed.
		return OutcomeSucceeded, c.sync(c.lateFinish(j, i, st, now), now)
	}
	if x == nil || x.State != IndexLaunched {
		// Not ours any more (cancelled, re-launched, unknown job): a
		// task still running is killed.
		if !terminal && (j != nil || isJobTaskID(st.GetTaskId())) {
			eff.Kills = append(eff.Kills, Kill{TaskID: st.GetTaskId(), AgentID: st.GetAgentId()})
		}
		return OutcomeNone, c.sync(eff, now)
	}
	unconfirmed := !x.ReconcileAt.IsZero()
	if unconfirmed {
		// The coordinator answered about a launch that was unconfirmed.
		x.ReconcileAt = time.Time{}
		delete(c.unconfirmed, x.TaskID)
	}
	x.TaskState, x.Reason, x.Message = st.GetState(), st.GetReason(), st.GetMessage()
	if st.GetAgentId() != "" {
		x.AgentID = st.GetAgentId()
	}
	c.dirtyIndexes(j.Spec.Name)[i] = true
	out := Classify(st)
	if unconfirmed && st.GetState() == slacklinev1.TaskState_TASK_STATE_UNKNOWN {
		// Neither the task nor its agent is known: it was never
		// launched.
		out = OutcomeLost
	}
	why := statusText(st)
	switch out {
	case OutcomeSucceeded:
		x.State = IndexSucceeded
		j.launched--
		j.succeeded++
		c.markJob(j)
		if j.succeeded == len(j.Indexes) {
			c.finish(j, now, Succeeded, fmt.Sprintf("all %d indexes succeeded", len(j.Indexes)))
		}
	case OutcomePreempted:
		x.Preemptions++
		j.Preempted++
		c.requeue(j, x, i, now, time.Time{})
		c.event(j, now, "index %d: task %s preempted (%s); re-queued, not a failure", i, x.TaskID, why)
	case OutcomeLost:
		x.Losses++
		j.Lost++
		c.requeue(j, x, i, now, time.Time{})
		c.event(j, now, "index %d: task %s lost (%s); re-queued, not a failure", i, x.TaskID, why)
	case OutcomeFailed:
		x.Failures++
		j.Failures++
		if x.Failures > *j.Spec.Retries {
			x.State = IndexFailed
			j.launched--
			j.failed++
			msg := fmt.Sprintf("index %d failed %d times (retries %d); last task %s: %s", i, x.Failures, *j.Spec.Retries, x.TaskID, why)
			c.event(j, now, "index %d: task %s failed (%s); no retries left", i, x.TaskID, why)
			eff.Kills = append(eff.Kills, c.finish(j, now, Failed, msg)...)
			break
		}
		wait := j.Spec.backoff(x.Failures)
		c.requeue(j, x, i, now, now.Add(wait))
		c.event(j, now, "index %d: task %s failed (%s); retry %d of %d in %s", i, x.TaskID, why, x.Failures, *j.Spec.Retries, wait)
	}
	return out, c.sync(eff, now)
}

// lateFinish succeeds index i with an earlier attempt's FINISHED status.
func (c *Core) lateFinish(j *Job, i int, st *slacklinev1.TaskStatus, now time.Time) Effects {
	var eff Effects
	x := &j.Indexes[i]
	switch x.State {
	case IndexLaunched:
		eff.Kills = append(eff.Kills, Kill{TaskID: x.TaskID, AgentID: x.AgentID})
		c.event(j, now, "index %d: earlier task %s finished after all; task %s killed", i, st.GetTaskId(), x.TaskID)
		j.launched--
	case IndexPending:
		j.pending = slices.DeleteFunc(j.pending, func(p int) bool { return p == i })
		c.event(j, now, "index %d: earlier task %s finished after all", i, st.GetTaskId())
	}
	x.State, x.TaskID, x.TaskState, x.Reason, x.Message = IndexSucceeded, st.GetTaskId(), st.GetState(), st.GetReason(), st.GetMessage()
	x.NotBefore = time.Time{}
	j.succeeded++
	c.dirtyIndexes(j.Spec.Name)[i] = true
	c.markJob(j)
	if j.succeeded == len(j.Indexes) {
		eff.Kills = append(eff.Kills, c.finish(j, now, Succeeded, fmt.Sprintf("all %d indexes succeeded", len(j.Indexes)))...)
	}
	return eff
}

func isJobTaskID(id string) bool { _, _, _, ok := ParseTaskID(id); return ok }

// statusText is "TASK_STATE_FAILED REASON_COMMAND_EXECUTOR_FAILED: message".
func statusText(st *slacklinev1.TaskStatus) string {
	s := st.GetState().String()
	if st.GetReason() != slacklinev1.Reason_REASON_UNSPECIFIED {
		s += " " + st.GetReason().String()
	}
	if st.GetMessage() != "" {
		s += ": " + st.GetMessage()
	}
	return s
}

// Tick applies time: deadlines, backoffs that expired (revivals) and cron
// runs that are due.
func (c *Core) Tick(now time.Time) Effects {
	var eff Effects
	for _, id := range c.Held() {
		h := c.held[id]
		if now.Sub(h.since) >= HoldFor || !c.wantsSlack(frameworkapi.OfferRole(h.offer), now) {
			eff.Declines = append(eff.Declines, id)
			delete(c.held, id)
		}
	}
	for id := range c.unconfirmed {
		j, x, i := c.current(id)
		if x == nil || x.State != IndexLaunched || x.ReconcileAt.IsZero() {
			delete(c.unconfirmed, id)
			continue
		}
		if !now.Before(x.ReconcileAt) {
			x.ReconcileAt = now.Add(ReconcileEvery)
			c.dirtyIndexes(j.Spec.Name)[i] = true
			eff.Reconcile = append(eff.Reconcile, Kill{TaskID: x.TaskID, AgentID: x.AgentID})
		}
	}
	slices.SortFunc(eff.Reconcile, func(a, b Kill) int { return strings.Compare(a.TaskID, b.TaskID) })
	for _, j := range c.Jobs() {
		switch {
		case IsFinal(j.State):
		case j.IsCron():
			if !j.NextRun.IsZero() && !now.Before(j.NextRun) {
				eff.Kills = append(eff.Kills, c.startRun(j, now)...)
			}
		case j.Spec.Deadline > 0 && !now.Before(j.Submitted.Add(time.Duration(j.Spec.Deadline))):
			eff.Kills = append(eff.Kills, c.finish(j, now, Failed,
				fmt.Sprintf("deadline %s exceeded with %d of %d indexes succeeded", time.Duration(j.Spec.Deadline), j.succeeded, len(j.Indexes)))...)
		default:
			for _, i := range j.pending {
				if nb := j.Indexes[i].NotBefore; !nb.IsZero() && !nb.After(now) {
					j.Indexes[i].NotBefore = time.Time{}
					c.dirtyIndexes(j.Spec.Name)[i] = true
					c.revive[j.Spec.Role] = true
				}
			}
		}
	}
	return c.sync(eff, now)
}

// NextWake returns when Tick next has something to do (zero: never).
func (c *Core) NextWake() time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, h := range c.held {
		earlier(h.since.Add(HoldFor))
	}
	for id := range c.unconfirmed {
		if _, x, _ := c.current(id); x != nil && x.State == IndexLaunched {
			earlier(x.ReconcileAt)
		}
	}
	for _, j := range c.jobs {
		switch {
		case IsFinal(j.State):
		case j.IsCron():
			earlier(j.NextRun)
		default:
			if j.Spec.Deadline > 0 {
				earlier(j.Submitted.Add(time.Duration(j.Spec.Deadline)))
			}
			for _, i := range j.pending {
				earlier(j.Indexes[i].NotBefore)
			}
		}
	}
	return next
}

// startRun starts a cron job's due run as its concurrency policy says.
func (c *Core) startRun(cj *Job, now time.Time) []Kill {
	due := cj.NextRun
	cj.NextRun = cj.Spec.schedule().Next(now)
	c.markJob(cj)
	var active []*Job
	for _, r := range cj.Runs {
		if run := c.jobs[r]; run != nil && !IsFinal(run.State) {
			active = append(active, run)
		}
	}
	var kills []Kill
	if len(active) > 0 {
		switch cj.Spec.Concurrency {
		case ConcurrencyForbid:
			c.event(cj, now, "run due at %s skipped: run %s is still active (concurrency forbid)", due.UTC().Format(time.RFC3339), active[0].Spec.Name)
			return nil
		case ConcurrencyReplace:
			for _, run := range active {
				kills = append(kills, c.finish(run, now, Cancelled, "replaced by a newer run (concurrency replace)")...)
			}
		}
	}
	if len(c.jobs) >= c.cfg.MaxJobs {
		c.LimitHits[LimitJobs]++
		c.event(cj, now, "run due at %s skipped: the service keeps at most %d jobs", due.UTC().Format(time.RFC3339), c.cfg.MaxJobs)
		return kills
	}
	name := fmt.Sprintf("%s-%d", cj.Spec.Name, due.Unix())
	for n := 1; c.jobs[name] != nil; n++ {
		name = fmt.Sprintf("%s-%d-%d", cj.Spec.Name, due.Unix(), n)
	}
	spec := cj.Spec
	spec.Name, spec.Schedule, spec.Concurrency = name, "", ""
	c.seq++
	run := &Job{Spec: spec, Owner: cj.Owner, Seq: c.seq, Submitted: now, Parent: cj.Spec.Name}
	c.queue(run, now)
	c.event(run, now, "run of cron job %s due at %s", cj.Spec.Name, due.UTC().Format(time.RFC3339))
	c.jobs[name] = run
	c.markJob(run)
	cj.Runs = append(cj.Runs, name)
	c.event(cj, now, "started run %s", name)
	// Forget the oldest finished runs beyond MaxRunsKept.
	for len(cj.Runs) > MaxRunsKept {
		old := c.jobs[cj.Runs[0]]
		if old != nil && !IsFinal(old.State) {
			break
		}
		c.LimitHits[LimitRuns]++
		delete(c.jobs, cj.Runs[0])
		c.deleted[cj.Runs[0]] = true
		cj.Runs = cj.Runs[1:]
	}
	return kills
}

// Counts are the gauges of the service's /metrics.
type Counts struct {
	Jobs  map[State]int
	Tasks map[IndexState]int
	// Preempted, Lost and Failures sum the jobs' counters.
	Preempted, Lost, Failures int
}

// Counts counts jobs by state and indexes by state.
func (c *Core) Counts() Counts {
	n := Counts{Jobs: map[State]int{}, Tasks: map[IndexState]int{}}
	for _, j := range c.jobs {
		n.Jobs[j.State]++
		n.Tasks[IndexPending] += len(j.pending)
		n.Tasks[IndexLaunched] += j.launched
		n.Tasks[IndexSucceeded] += j.succeeded
		n.Tasks[IndexFailed] += j.failed
		n.Preempted += j.Preempted
		n.Lost += j.Lost
		n.Failures += j.Failures
	}
	return n
}
