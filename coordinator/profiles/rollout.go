package profiles

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// RolloutState is where a rollout is.
type RolloutState int

// Rollout states.
const (
	// RolloutInProgress: waves are moving the candidate to agents.
	RolloutInProgress RolloutState = iota + 1
	// RolloutDone: every matching agent runs the candidate, now the
	// profile's stable version.
	RolloutDone
	// RolloutRolledBack: the candidate made things worse; its agents went
	// back to the stable version.
	RolloutRolledBack
	// RolloutAborted: an operator applied another version meanwhile.
	RolloutAborted
)

func (s RolloutState) String() string {
	switch s {
	case RolloutInProgress:
		return "in-progress"
	case RolloutDone:
		return "done"
	case RolloutRolledBack:
		return "rolled-back"
	case RolloutAborted:
		return "aborted"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Policy is how a rollout moves and when it gives up.
type Policy struct {
	// Waves are the cumulative shares of matching agents that run the
	// candidate after each wave, increasing, the last 1 (e.g. 0.1, 0.5,
	// 1). A wave covers at least one agent.
	Waves []float64
	// Soak is how long each wave runs before the next starts (the updated
	// agents must also have MinScored estimates scored by then).
	Soak time.Duration
	// MinScored is how many estimates the updated agents (and the others)
	// must have had scored since the wave started before their violation
	// rates are compared: fewer say nothing.
	MinScored uint64
	// ViolationTolerance is how much higher (absolute, 0.005 = half a
	// point) the updated agents' violation rate may be than the others'.
	ViolationTolerance float64
	// RunqP99Tolerance is how much higher (relative, 0.2 = 20%) the updated
	// agents' guaranteed run-queue p99 may be than the others', beyond
	// RunqP99Floor (absolute, so that microseconds of noise on an idle node
	// do not count).
	RunqP99Tolerance float64
	RunqP99Floor     time.Duration
	// ShadowSoak is how long the shadow stage runs the candidate in shadow
	// on the first wave's agents before any agent applies it (0: no shadow
	// stage, and no shadows in the live waves). See shadow.go.
	ShadowSoak time.Duration
}

// DefaultPolicy is a rollout's policy where the operator says nothing.
func DefaultPolicy() Policy {
	return Policy{
		Waves: []float64{0.1, 0.5, 1}, Soak: 10 * time.Minute, MinScored: 1000,
		ViolationTolerance: 0.005, RunqP99Tolerance: 0.2, RunqP99Floor: time.Millisecond,
		ShadowSoak: 10 * time.Minute,
	}
}

// Validate checks a policy, naming the field at fault.
func (p Policy) Validate() error {
	if len(p.Waves) == 0 || len(p.Waves) > MaxWaves {
		return invalidf("waves: want 1 to %d shares, got %d", MaxWaves, len(p.Waves))
	}
	prev := 0.0
	for i, w := range p.Waves {
		if !(w > prev && w <= 1) {
			return invalidf("waves[%d]: %v: shares must increase within (0, 1]", i, w)
		}
		prev = w
	}
	if prev != 1 {
		return invalidf("waves: the last share must be 1 (every matching agent), got %v", prev)
	}
	if p.Soak <= 0 {
		return invalidf("soak: must be positive, got %v", p.Soak)
	}
	if !(p.ViolationTolerance >= 0 && p.ViolationTolerance < 1) {
		return invalidf("violation_tolerance: must be in [0, 1), got %v", p.ViolationTolerance)
	}
	if !(p.RunqP99Tolerance >= 0) {
		return invalidf("runqueue_p99_tolerance: must not be negative, got %v", p.RunqP99Tolerance)
	}
	if p.RunqP99Floor < 0 {
		return invalidf("runqueue_p99_floor: must not be negative, got %v", p.RunqP99Floor)
	}
	if p.ShadowSoak < 0 {
		return invalidf("shadow_soak: must not be negative (0 disables the shadow stage), got %v", p.ShadowSoak)
	}
	return nil
}

// Signals is what one matching agent last reported on its heartbeats.
type Signals struct {
	Host string
	// Profile and Version are what the agent runs ("" and 0: its flags).
	Profile string
	Version uint64
	// Refused is a version of this profile the agent refused to apply (0
	// none; the shell passes only refusals of this profile).
	Refused uint64
	// Scored and Violations are the calibrated estimator's counters since
	// it was built (a new version rebuilds it, and they restart at 0).
	Scored     uint64
	Violations float64
	// RunqP99 is the node's guaranteed run-queue p99 (0: not measured).
	RunqP99 time.Duration
	// Reported says the agent sent a profile report (the fields above and
	// below are its); ShadowCapable that it can run a rollout's shadow.
	Reported      bool
	ShadowCapable bool
	// Shadow is the agent's rollout shadow.
	Shadow ShadowSignals
}

// Group sums the signals of a group of agents over a wave.
type Group struct {
	// Agents counts the agents in the group.
	Agents int
	// Scored and Violations are the estimates scored and violated since
	// the wave started.
	Scored     uint64
	Violations float64
	// RunqP99 is the mean guaranteed run-queue p99 of the agents that
	// measure it (0: none does).
	RunqP99 time.Duration
}

// ViolationRate is Violations/Scored (0 with nothing scored).
func (g Group) ViolationRate() float64 {
	if g.Scored == 0 {
		return 0
	}
	return g.Violations / float64(g.Scored)
}

// Rollout moves a candidate version to a profile's agents in waves.
type Rollout struct {
	Candidate Version
	// Previous is the stable version when the rollout started: what its
	// agents return to when it is rolled back.
	Previous Version
	Policy   Policy
	State    RolloutState
	// Wave indexes Policy.Waves: the wave under way (or the last).
	Wave        int
	WaveStarted time.Time
	// Hosts are the agents chosen for the candidate so far.
	Hosts []string
	// Baseline is every matching agent's signals when the wave started:
	// the start of the window the groups are measured over.
	Baseline map[string]Signals
	// Reference is the others' measure at the end of the last wave that
	// had others: what the final wave, which has none, is judged against.
	Reference *Group
	// Updated and Others are the latest comparison, for status.
	Updated, Others Group
	// Stage is the part of the rollout under way (or where it ended);
	// ShadowHosts are the shadow stage's agents, ShadowStarted its start.
	Stage         Stage
	ShadowHosts   []string
	ShadowStarted time.Time
	// Paired is the latest shadow/live comparison on the same agents, for
	// status.
	Paired             Paired
	StartedAt, EndedAt time.Time
	By                 string
	// Reason says why the rollout is where it is (waiting for signals,
	// rolled back because ...).
	Reason string
}

func (r Rollout) clone() Rollout {
	r.Policy.Waves = slices.Clone(r.Policy.Waves)
	r.Hosts = slices.Clone(r.Hosts)
	r.Baseline = maps.Clone(r.Baseline)
	r.ShadowHosts = slices.Clone(r.ShadowHosts)
	r.Paired.WithoutShadows = slices.Clone(r.Paired.WithoutShadows)
	if r.Reference != nil {
		ref := *r.Reference
		r.Reference = &ref
	}
	return r
}

// StartRollout starts moving settings to p's matching agents (fleet, with
// their latest signals) in waves: the first wave's agents get the new
// version at once. check validates the settings.
func StartRollout(p *Profile, settings string, policy Policy, by string, now time.Time, fleet []Signals, check func(string) error) (*Profile, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: profile: apply it before rolling a new version out", ErrNotFound)
	}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if err := validateSettings(settings, check); err != nil {
		return nil, err
	}
	if p.Rollout != nil && p.Rollout.State == RolloutInProgress {
		return nil, preconditionf("profile %s: the rollout of version %d is under way (apply a version to abort it)", p.Name, p.Rollout.Candidate.Number)
	}
	p = p.Clone()
	p.LastVersion++
	r := &Rollout{
		Candidate: Version{Number: p.LastVersion, Settings: settings, By: by, At: now},
		Previous:  p.Stable, Policy: policy, State: RolloutInProgress,
		StartedAt: now, By: by,
	}
	p.Rollout = r
	if policy.ShadowSoak > 0 {
		r.Stage, r.ShadowStarted, r.WaveStarted = StageShadow, now, now
		r.ShadowHosts = choose(p.Name, policy.Waves[0], fleet, nil)
		if without := r.noShadows(fleet); without != "" {
			r.Stage = StageLive
			r.startWave(p.Name, 0, now, fleet)
			r.Reason = without
			p.audit(now, by, "rollout of version %d started: waves %v, soak %v; %s; wave 1 on %d of %d agents", r.Candidate.Number, policy.Waves, policy.Soak, without, len(r.Hosts), len(fleet))
			return p, nil
		}
		p.audit(now, by, "rollout of version %d started: shadow stage on %d of %d agents for %v, then waves %v, soak %v",
			r.Candidate.Number, len(r.ShadowHosts), len(fleet), policy.ShadowSoak, policy.Waves, policy.Soak)
		return p, nil
	}
	r.Stage = StageLive
	r.startWave(p.Name, 0, now, fleet)
	p.audit(now, by, "rollout of version %d started: waves %v, soak %v; wave 1 on %d of %d agents", r.Candidate.Number, policy.Waves, policy.Soak, len(r.Hosts), len(fleet))
	return p, nil
}

// startWave makes wave the one under way: it adds agents, in rank order,
// until the wave's share of the fleet runs the candidate, and takes the
// baseline.
func (r *Rollout) startWave(profile string, wave int, now time.Time, fleet []Signals) {
	r.Wave, r.WaveStarted = wave, now
	r.Hosts = choose(profile, r.Policy.Waves[wave], fleet, r.Hosts)
	r.Baseline = make(map[string]Signals, len(fleet))
	for _, s := range fleet {
		r.Baseline[s.Host] = s
	}
}

// choose returns hosts with agents of fleet added, in rank order, until
// fraction of the fleet is chosen (at least one), sorted.
func choose(profile string, fraction float64, fleet []Signals, hosts []string) []string {
	hosts = slices.Clone(hosts)
	want := share(fraction, len(fleet))
	ranked := slices.Clone(fleet)
	slices.SortFunc(ranked, func(a, b Signals) int {
		ra, rb := rank(profile, a.Host), rank(profile, b.Host)
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	for _, s := range ranked {
		if len(hosts) >= want {
			break
		}
		if !slices.Contains(hosts, s.Host) {
			hosts = append(hosts, s.Host)
		}
	}
	slices.Sort(hosts)
	return hosts
}

// Outcome is what Step decided.
type Outcome int

// Outcomes.
const (
	// Unchanged: nothing to do (no rollout under way, or the wave soaks).
	Unchanged Outcome = iota
	// NextWave: the wave passed; the next one started.
	NextWave
	// Completed: the last wave passed; the candidate is the stable version.
	Completed
	// RolledBack: the candidate made things worse; its agents go back.
	RolledBack
	// ShadowPassed: the shadow stage ended (the candidate's shadow was not
	// worse, no agent could run it, or it reached MaxShadowStageSoaks
	// unjudged); the first live wave started.
	ShadowPassed
)

func (o Outcome) String() string {
	switch o {
	case Unchanged:
		return "unchanged"
	case NextWave:
		return "next-wave"
	case Completed:
		return "completed"
	case RolledBack:
		return "rolled-back"
	case ShadowPassed:
		return "shadow-passed"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Coordinator is the author of a rollout's own decisions in the audit
// trail.
const Coordinator = "coordinator"

// Step judges p's rollout at now from its matching agents' latest signals
// (fleet): it rolls back as soon as the updated agents are worse than the
// others (a refusal, a higher violation rate, a higher guaranteed
// run-queue p99), and moves to the next wave once the wave soaked with
// enough estimates scored and nothing worse. It returns p unchanged (the
// same pointer) with Unchanged, or a changed copy.
func Step(p *Profile, now time.Time, fleet []Signals) (*Profile, Outcome) {
	if p == nil || p.Rollout == nil || p.Rollout.State != RolloutInProgress {
		return p, Unchanged
	}
	r := p.Rollout
	if r.Stage == StageShadow {
		return stepShadow(p, now, fleet)
	}
	updated, others, refused := r.measure(p.Name, fleet)
	var paired Paired
	if r.Policy.ShadowSoak > 0 {
		paired, _ = r.pair(p.Name, r.Hosts, r.Previous.Number, r.Candidate.Number, fleet)
	}
	reference := others
	if others.Agents == 0 && r.Reference != nil {
		reference = *r.Reference
	}
	reason := ""
	switch {
	case refused != "":
		reason = fmt.Sprintf("agent %s refused version %d", refused, r.Candidate.Number)
	default:
		reason = r.Policy.worse(updated, reference)
		if reason == "" {
			reason = r.Policy.liveWorseThanShadow(paired, r.Candidate.Number, r.Previous.Number)
		}
	}
	q := p.Clone()
	nr := q.Rollout
	nr.Updated, nr.Others, nr.Paired = updated, others, paired
	if reason != "" {
		nr.State, nr.EndedAt, nr.Reason = RolloutRolledBack, now, reason
		q.audit(now, Coordinator, "rollout of version %d rolled back in wave %d: %s", nr.Candidate.Number, nr.Wave+1, reason)
		return q, RolledBack
	}
	soaked := now.Sub(r.WaveStarted) >= r.Policy.Soak
	// With no other agent to compare with (the wave covers every matching
	// agent and no earlier wave left a reference), the updated agents are
	// judged on their own: refusals, and enough estimates scored.
	judged := updated.Scored >= r.Policy.MinScored && (reference.Agents == 0 || reference.Scored >= r.Policy.MinScored)
	switch {
	case !soaked:
		nr.Reason = fmt.Sprintf("wave %d soaking until %s", nr.Wave+1, r.WaveStarted.Add(r.Policy.Soak).UTC().Format(time.RFC3339))
	case !judged:
		nr.Reason = fmt.Sprintf("wave %d waits for %d scored estimates on the updated agents and on the others (has %d and %d)",
			nr.Wave+1, r.Policy.MinScored, updated.Scored, reference.Scored)
	case nr.Wave == len(nr.Policy.Waves)-1:
		nr.State, nr.EndedAt, nr.Reason = RolloutDone, now, "every wave passed"
		q.Stable = nr.Candidate
		q.audit(now, Coordinator, "rollout of version %d completed: it is the stable version", nr.Candidate.Number)
		return q, Completed
	default:
		if others.Agents > 0 {
			ref := others
			nr.Reference = &ref
		}
		nr.startWave(q.Name, nr.Wave+1, now, fleet)
		nr.Reason = ""
		q.audit(now, Coordinator, "rollout of version %d: wave %d on %d of %d agents", nr.Candidate.Number, nr.Wave+1, len(nr.Hosts), len(fleet))
		return q, NextWave
	}
	if nr.Reason == r.Reason && nr.Updated == r.Updated && nr.Others == r.Others && nr.Paired.equal(r.Paired) {
		return p, Unchanged
	}
	return q, Unchanged
}

// measure sums the updated agents' (chosen, and running the candidate)
// and the others' (not chosen) signals since the wave started, and names
// a chosen agent that refused the candidate.
func (r *Rollout) measure(profile string, fleet []Signals) (updated, others Group, refused string) {
	var updatedP99, othersP99 []time.Duration
	for _, s := range fleet {
		chosen := slices.Contains(r.Hosts, s.Host)
		if chosen && s.Refused == r.Candidate.Number {
			refused = s.Host
		}
		runsCandidate := s.Profile == profile && s.Version == r.Candidate.Number
		var g *Group
		var p99 *[]time.Duration
		switch {
		case chosen && runsCandidate:
			g, p99 = &updated, &updatedP99
		case !chosen && !runsCandidate:
			g, p99 = &others, &othersP99
		default:
			continue // chosen and not switched yet
		}
		g.Agents++
		base, ok := r.Baseline[s.Host]
		if !ok || base.Profile != s.Profile || base.Version != s.Version || base.Scored > s.Scored {
			// The agent's estimator was rebuilt (a new version) since the
			// baseline: its counters restarted within the window.
			base = Signals{}
		}
		g.Scored += s.Scored - base.Scored
		g.Violations += max(s.Violations-base.Violations, 0)
		if s.RunqP99 > 0 {
			*p99 = append(*p99, s.RunqP99)
		}
	}
	updated.RunqP99, others.RunqP99 = mean(updatedP99), mean(othersP99)
	return updated, others, refused
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// worse says how updated is worse than reference ("" when it is not, or
// when there is too little to tell).
func (p Policy) worse(updated, reference Group) string {
	if updated.Scored >= p.MinScored && reference.Scored >= p.MinScored {
		u, o := updated.ViolationRate(), reference.ViolationRate()
		if u > o+p.ViolationTolerance {
			return fmt.Sprintf("violation rate %.2f%% on the updated agents, %.2f%% on the others (tolerance %.2f points)",
				100*u, 100*o, 100*p.ViolationTolerance)
		}
	}
	if updated.RunqP99 > 0 && reference.RunqP99 > 0 {
		limit := time.Duration(float64(reference.RunqP99)*(1+p.RunqP99Tolerance)) + p.RunqP99Floor
		if updated.RunqP99 > limit {
			return fmt.Sprintf("guaranteed run-queue p99 %v on the updated agents, %v on the others (limit %v)",
				updated.RunqP99, reference.RunqP99, limit)
		}
	}
	return ""
}
