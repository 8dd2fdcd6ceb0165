package profiles

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Shadow judgement of rollouts (#29 item 5): the candidate is first run in
// shadow beside the stable version on the first wave's agents, on the same
// inputs, and compared with it there before any agent applies it; during
// the live waves, the updated agents run the previous version in shadow,
// and their live violation rate is compared with their own shadow's.

// Stage is the part of a rollout under way.
type Stage int

// Stages. The zero Stage is StageLive: a rollout recorded before shadow
// stages existed is in its live waves.
const (
	// StageLive: waves apply the candidate to agents.
	StageLive Stage = iota
	// StageShadow: the candidate runs in shadow only.
	StageShadow
)

func (s Stage) String() string {
	switch s {
	case StageLive:
		return "live"
	case StageShadow:
		return "shadow"
	}
	return fmt.Sprintf("stage(%d)", int(s))
}

// ShadowSignals is an agent's rollout shadow, as it last reported it.
type ShadowSignals struct {
	// Profile and Version are what the agent runs in shadow ("": none;
	// version 0 is its own flags).
	Profile string
	Version uint64
	// Scored and Violations score the shadow's estimates; ActiveScored
	// and ActiveViolations the active settings' (the version Signals
	// names), over the same inputs since the shadow started or the active
	// settings last changed, by the same definition.
	Scored           uint64
	Violations       float64
	ActiveScored     uint64
	ActiveViolations float64
	// Refused is a version of this profile the agent could not run in
	// shadow (0 none; the shell passes only refusals of this profile).
	Refused uint64
}

// Paired compares, on the same agents and the same inputs, a version run
// in shadow with the version the agents run live: in the shadow stage the
// candidate (Shadow) and the stable version (Live); in the live waves the
// previous version (Shadow) and the candidate (Live).
type Paired struct {
	// Agents counts the agents whose shadow and live versions are the
	// ones compared; Shadow and Live sum their counters (Agents set,
	// RunqP99 unused: a shadow does not change the node).
	Agents       int
	Shadow, Live Group
	// WithoutShadows are the agents asked to shadow that reported they
	// cannot: they are judged on live signals only.
	WithoutShadows []string
}

func (p Paired) equal(q Paired) bool {
	return p.Agents == q.Agents && p.Shadow == q.Shadow && p.Live == q.Live && slices.Equal(p.WithoutShadows, q.WithoutShadows)
}

// AssignShadow returns what the agent on host should run in shadow for
// p's rollout, and false when it should run none: in the shadow stage the
// candidate on the stage's agents, in the live waves the previous version
// on the agents that run the candidate; none when the rollout's policy has
// no shadow stage or no rollout is under way.
func AssignShadow(p *Profile, host string) (Assignment, bool) {
	if p == nil || p.Rollout == nil || p.Rollout.State != RolloutInProgress || p.Rollout.Policy.ShadowSoak <= 0 {
		return Assignment{}, false
	}
	r := p.Rollout
	switch {
	case r.Stage == StageShadow && slices.Contains(r.ShadowHosts, host):
		return Assignment{Profile: p.Name, Version: r.Candidate}, true
	case r.Stage == StageLive && slices.Contains(r.Hosts, host):
		return Assignment{Profile: p.Name, Version: r.Previous}, true
	}
	return Assignment{}, false
}

// pair sums, over the agents of hosts that run shadowVersion of profile
// in shadow and liveVersion live, their shadow and active counters, lists
// the agents of hosts that reported they cannot shadow, and names an agent
// that refused shadowVersion.
func (r *Rollout) pair(profile string, hosts []string, shadowVersion, liveVersion uint64, fleet []Signals) (p Paired, refused string) {
	for _, s := range fleet {
		if !slices.Contains(hosts, s.Host) {
			continue
		}
		if !s.ShadowCapable {
			if s.Reported {
				p.WithoutShadows = append(p.WithoutShadows, s.Host)
			}
			continue
		}
		if shadowVersion != 0 && s.Shadow.Refused == shadowVersion && refused == "" {
			refused = s.Host
		}
		if s.Shadow.Profile != profile || s.Shadow.Version != shadowVersion || s.Profile != profile || s.Version != liveVersion {
			continue // not switched yet
		}
		p.Agents++
		p.Shadow.Scored += s.Shadow.Scored
		p.Shadow.Violations += s.Shadow.Violations
		p.Live.Scored += s.Shadow.ActiveScored
		p.Live.Violations += s.Shadow.ActiveViolations
	}
	p.Shadow.Agents, p.Live.Agents = p.Agents, p.Agents
	slices.Sort(p.WithoutShadows)
	return p, refused
}

// noShadows says why r's shadow stage cannot run ("" when it can): every
// one of its agents present in fleet reported that it cannot shadow. An
// agent that has not reported yet may still run it.
func (r *Rollout) noShadows(fleet []Signals) string {
	present, without := 0, []string(nil)
	for _, s := range fleet {
		if !slices.Contains(r.ShadowHosts, s.Host) {
			continue
		}
		present++
		if s.Reported && !s.ShadowCapable {
			without = append(without, s.Host)
		}
	}
	if present == 0 || len(without) < present {
		return ""
	}
	slices.Sort(without)
	r.Paired.WithoutShadows = without
	return fmt.Sprintf("no agent of the shadow stage can run shadows (%s): judged on live signals only", strings.Join(without, ", "))
}

// stepShadow is Step in the shadow stage: it rolls back when an agent
// refused the candidate in shadow or when the candidate's shadow violates
// more than the stable version live on the same agents and inputs, and
// starts the first live wave once the stage soaked with enough estimates
// scored and nothing worse, or at once when none of its agents can run
// shadows.
func stepShadow(p *Profile, now time.Time, fleet []Signals) (*Profile, Outcome) {
	r := p.Rollout
	q := p.Clone()
	nr := q.Rollout
	if len(presentHosts(nr.ShadowHosts, fleet)) == 0 {
		// No agent matched at the start, or every agent of the stage left
		// the fleet: the stage takes the first wave's share of the fleet as
		// it is now, and soaks again on them (its bound, from the start of
		// the rollout, stays).
		if chosen := choose(q.Name, nr.Policy.Waves[0], fleet, nil); len(chosen) > 0 {
			if len(nr.ShadowHosts) > 0 {
				q.audit(now, Coordinator, "rollout of version %d: every agent of the shadow stage left (%s); shadow stage again on %s",
					nr.Candidate.Number, strings.Join(nr.ShadowHosts, ", "), strings.Join(chosen, ", "))
			}
			nr.ShadowHosts, nr.ShadowStarted = chosen, now
		}
	}
	paired, refused := nr.pair(q.Name, nr.ShadowHosts, nr.Candidate.Number, nr.Previous.Number, fleet)
	nr.Paired = paired
	reason := ""
	if refused != "" {
		reason = fmt.Sprintf("agent %s refused version %d in its shadow stage", refused, nr.Candidate.Number)
	} else {
		reason = nr.Policy.shadowWorse(paired, nr.Candidate.Number, nr.Previous.Number)
	}
	if reason != "" {
		nr.State, nr.EndedAt, nr.Reason = RolloutRolledBack, now, reason
		q.audit(now, Coordinator, "rollout of version %d rolled back in its shadow stage (never applied): %s", nr.Candidate.Number, reason)
		return q, RolledBack
	}
	if paired.Agents == 0 {
		if without := nr.noShadows(fleet); without != "" {
			nr.startLive(q.Name, now, fleet)
			nr.Reason = without
			q.audit(now, Coordinator, "rollout of version %d: %s; wave 1 on %d of %d agents", nr.Candidate.Number, without, len(nr.Hosts), len(fleet))
			return q, ShadowPassed
		}
	}
	pol := nr.Policy
	soaked := now.Sub(nr.ShadowStarted) >= pol.ShadowSoak
	judged := paired.Shadow.Scored >= pol.MinScored && paired.Live.Scored >= pol.MinScored
	limit := nr.StartedAt.Add(MaxShadowStageSoaks * pol.ShadowSoak)
	switch {
	case soaked && judged:
		passed := fmt.Sprintf("shadow stage passed on %d agents: violation rate %.2f%% in shadow, %.2f%% of version %d live on the same inputs",
			paired.Agents, 100*paired.Shadow.ViolationRate(), 100*paired.Live.ViolationRate(), nr.Previous.Number)
		nr.startLive(q.Name, now, fleet)
		nr.Reason = passed
		q.audit(now, Coordinator, "rollout of version %d: %s; wave 1 on %d of %d agents", nr.Candidate.Number, passed, len(nr.Hosts), len(fleet))
		return q, ShadowPassed
	case !now.Before(limit):
		ended := fmt.Sprintf("shadow stage ended unjudged after %v (%d times shadow_soak) with %d and %d of %d scored estimates of version %d in shadow and of version %d live on %d agents: judged on live signals only",
			now.Sub(nr.StartedAt), MaxShadowStageSoaks, paired.Shadow.Scored, paired.Live.Scored, pol.MinScored, nr.Candidate.Number, nr.Previous.Number, paired.Agents)
		nr.startLive(q.Name, now, fleet)
		nr.Reason = ended
		q.audit(now, Coordinator, "rollout of version %d: %s; wave 1 on %d of %d agents", nr.Candidate.Number, ended, len(nr.Hosts), len(fleet))
		return q, ShadowPassed
	case !soaked:
		nr.Reason = fmt.Sprintf("shadow stage on %d agents soaking until %s", len(nr.ShadowHosts), nr.ShadowStarted.Add(pol.ShadowSoak).UTC().Format(time.RFC3339))
	case !judged:
		nr.Reason = fmt.Sprintf("shadow stage waits for %d scored estimates of version %d in shadow and of version %d live on the same agents (has %d and %d)",
			pol.MinScored, nr.Candidate.Number, nr.Previous.Number, paired.Shadow.Scored, paired.Live.Scored)
	}
	if nr.Reason == r.Reason && nr.Paired.equal(r.Paired) && slices.Equal(nr.ShadowHosts, r.ShadowHosts) && nr.ShadowStarted.Equal(r.ShadowStarted) {
		return p, Unchanged
	}
	return q, Unchanged
}

// MaxShadowStageSoaks bounds the shadow stage: once it has run this many
// times Policy.ShadowSoak since the rollout started without being judged
// (too few estimates scored, or its agents left and new ones soak again),
// Step ends it and starts the first live wave, judged on live signals only,
// saying so, rather than waiting for ever.
const MaxShadowStageSoaks = 3

// startLive ends the shadow stage and starts the first live wave: on the
// stage's agents still in fleet (those the candidate was tested on), then
// on others in rank order up to the wave's share.
func (r *Rollout) startLive(profile string, now time.Time, fleet []Signals) {
	r.Stage = StageLive
	r.Hosts = presentHosts(r.ShadowHosts, fleet)
	r.startWave(profile, 0, now, fleet)
}

// presentHosts returns those of hosts that have an agent in fleet, sorted.
func presentHosts(hosts []string, fleet []Signals) []string {
	var out []string
	for _, s := range fleet {
		if slices.Contains(hosts, s.Host) && !slices.Contains(out, s.Host) {
			out = append(out, s.Host)
		}
	}
	slices.Sort(out)
	return out
}

// shadowWorse says how the candidate's shadow is worse than the stable
// version live on the same agents ("" when it is not, or when there is
// too little to tell).
func (p Policy) shadowWorse(paired Paired, candidate, stable uint64) string {
	if paired.Shadow.Scored < p.MinScored || paired.Live.Scored < p.MinScored {
		return ""
	}
	s, l := paired.Shadow.ViolationRate(), paired.Live.ViolationRate()
	if s <= l+p.ViolationTolerance {
		return ""
	}
	return fmt.Sprintf("violation rate %.2f%% of version %d in shadow, %.2f%% of version %d live on the same %d agents and inputs (tolerance %.2f points; %d and %d estimates scored)",
		100*s, candidate, 100*l, stable, paired.Agents, 100*p.ViolationTolerance, paired.Shadow.Scored, paired.Live.Scored)
}

// liveWorseThanShadow says how the candidate live is worse than the
// previous version in shadow on the same updated agents ("" when it is
// not, or when there is too little to tell).
func (p Policy) liveWorseThanShadow(paired Paired, candidate, previous uint64) string {
	if paired.Shadow.Scored < p.MinScored || paired.Live.Scored < p.MinScored {
		return ""
	}
	l, s := paired.Live.ViolationRate(), paired.Shadow.ViolationRate()
	if l <= s+p.ViolationTolerance {
		return ""
	}
	return fmt.Sprintf("violation rate %.2f%% of version %d live on the updated agents, %.2f%% of version %d in shadow on the same %d agents and inputs (tolerance %.2f points; %d and %d estimates scored)",
		100*l, candidate, 100*s, previous, paired.Agents, 100*p.ViolationTolerance, paired.Live.Scored, paired.Shadow.Scored)
}
