package agent

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slackline/slackline/agent/shadow"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
)

// Rollout shadows (#29 item 5): a profile rollout asks the agent
// (ProfileShadowCommand) to run a version of its profile in shadow: in the
// rollout's shadow stage the candidate, before the agent applies it; in
// its live waves the previous version, beside the candidate it applied.
// The agent runs it with the --shadow mechanism (agent/shadow: same
// inputs, after the active work; nothing it says is offered or applied)
// in one slot of its shadow.MaxShadows, and scores the active settings
// beside it over the same inputs (a second shadow.Shadow, ActiveName),
// both restarting when the shadow or the active settings change, so that
// the coordinator compares the two on exactly the same samples.
//
// Warm-up: a (re)started comparison sets a cold estimator beside a warm
// one (the candidate's beside the active one when the shadow starts, a
// profile's new active estimator beside the candidate's when the active
// settings change), and a cold estimator's first estimates are a starting
// agent's, not the settings'. Both counters therefore discard what they
// scored over the cold estimators' warm-up (their --estimator-window: how
// far back they look for peaks; the longer of the two after an active
// change), on input time: they restart together at the first input past
// it, and the heartbeats carry no counters until then.

// RolloutShadowName names a rollout's shadow in GetShadows.
const RolloutShadowName = "rollout"

// rolloutShadow is the agent's rollout shadow. The estimate loop calls
// estimate and activeChanged, the QoS loop evaluate, the command stream
// apply, heartbeats fill. A nil *rolloutShadow does nothing.
type rolloutShadow struct {
	// build builds a version's estimator and QoS controllers over the
	// agent's flags; nil when the agent cannot shadow (why says why).
	build func(name, settings string) (profileSettings, error)
	why   string

	mu sync.Mutex
	// profile and version are the version run in shadow ("": none).
	profile string
	version uint64
	// candidate runs that version; active scores the active estimates over
	// the same inputs; both nil without a shadow.
	candidate, active *shadow.Shadow
	// activeProfile and activeVersion are the active settings the
	// estimate loop runs (what active scores).
	activeProfile string
	activeVersion uint64
	// candidateWarmup is the candidate's estimator's warm-up; warmup the
	// comparison's since its (re)start, which warmFrom (the first input's
	// time since; zero: none yet) and warm (the counters restarted past
	// it) follow.
	candidateWarmup, warmup time.Duration
	warmFrom                time.Time
	warm                    bool
	// The latest version refused, and why.
	refusedProfile string
	refusedVersion uint64
	refusal        string
}

// newRolloutShadow returns the agent's rollout shadow slot: an agent
// runs one when it runs an estimator and QoS controllers it can rebuild
// from a profile's settings and has a shadow slot left beside its
// --shadow candidates.
func newRolloutShadow(cfg Config) *rolloutShadow {
	s := &rolloutShadow{build: cfg.profiles}
	switch {
	case cfg.Estimator == nil || cfg.QoS == nil || cfg.profiles == nil:
		s.build, s.why = nil, "this agent runs no estimator or QoS controllers to shadow"
	case len(cfg.Shadows) >= shadow.MaxShadows:
		s.build, s.why = nil, fmt.Sprintf("this agent runs %d shadows (--shadow), at most %d: no slot for a rollout's", len(cfg.Shadows), shadow.MaxShadows)
	}
	return s
}

// apply runs cmd's version in shadow (profile "": none), replacing the
// shadow that runs. A command for what runs is a no-op; a version that
// cannot be built is refused (recorded for the heartbeats) and no shadow
// runs.
func (s *rolloutShadow) apply(cmd *slacklinev1.ProfileShadowCommand) error {
	s.mu.Lock()
	same := s.candidate != nil && s.profile == cmd.GetProfile() && s.version == cmd.GetVersion() ||
		s.candidate == nil && cmd.GetProfile() == ""
	s.mu.Unlock()
	if same {
		return nil
	}
	var candidate *shadow.Shadow
	var warmup time.Duration
	var err error
	if cmd.GetProfile() != "" {
		candidate, warmup, err = s.newCandidate(cmd)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.profile, s.version, s.candidate, s.active = "", 0, nil, nil
	if err != nil {
		s.refusedProfile, s.refusedVersion, s.refusal = cmd.GetProfile(), cmd.GetVersion(), err.Error()
		return err
	}
	if candidate != nil {
		s.profile, s.version, s.candidate = cmd.GetProfile(), cmd.GetVersion(), candidate
		s.active = shadow.New(shadow.Config{Name: shadow.ActiveName})
		// The active estimator runs warm: the candidate's warm-up only.
		s.candidateWarmup = warmup
		s.restartWarmup(warmup)
	}
	return nil
}

// restartWarmup starts a warm-up of d at the next input. s.mu is held.
func (s *rolloutShadow) restartWarmup(d time.Duration) {
	s.warmup, s.warmFrom, s.warm = d, time.Time{}, false
}

func (s *rolloutShadow) newCandidate(cmd *slacklinev1.ProfileShadowCommand) (*shadow.Shadow, time.Duration, error) {
	if s.build == nil {
		return nil, 0, errors.New(s.why)
	}
	built, err := s.build(cmd.GetProfile(), cmd.GetSettings())
	if err != nil {
		return nil, 0, err
	}
	return shadow.New(shadow.Config{Name: RolloutShadowName, Estimator: built.estimator, EstimatorName: built.estimatorName,
		QoS: built.qos, Settings: []shadow.Setting{{Flag: "profile", Value: fmt.Sprintf("%s/%d", cmd.GetProfile(), cmd.GetVersion())}}}), built.warmup, nil
}

// running returns the shadow and the active scorer (nil, nil: none).
func (s *rolloutShadow) running() (candidate, active *shadow.Shadow) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.candidate, s.active
}

// estimate scores the active estimate made from in, then runs the
// shadow's estimator on in. The estimate loop calls it after the active
// estimate is sent. At the first input past the warm-up both counters
// restart, discarding what they scored while an estimator was cold.
func (s *rolloutShadow) estimate(in estimator.Input, offered float64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	candidate := s.candidate
	if candidate != nil && !s.warm {
		if s.warmFrom.IsZero() {
			s.warmFrom = in.Now
		}
		if in.Now.Sub(s.warmFrom) >= s.warmup {
			candidate.ResetScores()
			s.active = shadow.New(shadow.Config{Name: shadow.ActiveName})
			s.warm = true
		}
	}
	active := s.active
	s.mu.Unlock()
	if candidate == nil {
		return
	}
	active.Observe(in, offered)
	candidate.Estimate(in)
}

// evaluate runs the shadow's QoS controllers on in (their corrections are
// counted and dropped). The QoS loop calls it after the active ones'.
func (s *rolloutShadow) evaluate(in qos.Input) {
	if candidate, _ := s.running(); candidate != nil {
		candidate.Evaluate(in)
	}
}

// activeChanged records that the estimate loop now runs profile's version
// (a node profile was applied), whose estimator warms up over warmup: the
// comparison restarts, on the new active settings, after the longer of
// its and the candidate's warm-up.
func (s *rolloutShadow) activeChanged(profile string, version uint64, warmup time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.activeProfile, s.activeVersion = profile, version
	if s.candidate != nil {
		s.candidate.ResetScores()
		s.active = shadow.New(shadow.Config{Name: shadow.ActiveName})
		s.restartWarmup(max(warmup, s.candidateWarmup))
	}
}

// fill adds the shadow's part to a heartbeat's report r (whose profile
// and version are what the agent applied): the counters only when the
// active ones score that version and the warm-up is over.
func (s *rolloutShadow) fill(r *slacklinev1.ProfileReport) {
	if s == nil {
		return
	}
	s.mu.Lock()
	candidate, active := s.candidate, s.active
	r.ShadowCapable = s.build != nil
	r.ShadowProfile, r.ShadowVersion = s.profile, s.version
	r.ShadowRefusedProfile, r.ShadowRefusedVersion, r.ShadowRefusal = s.refusedProfile, s.refusedVersion, s.refusal
	scoresActive := s.activeProfile == r.GetProfile() && s.activeVersion == r.GetVersion()
	warm := s.warm
	s.mu.Unlock()
	if candidate == nil || !scoresActive || !warm {
		return
	}
	// The active report first: the candidate has scored at most the
	// samples the active one had when the two are read apart.
	a := active.Report()
	c := candidate.Report()
	r.ShadowEstimatesScored, r.ShadowViolations = uint64(c.Samples), float64(c.Violations)
	r.ShadowActiveEstimatesScored, r.ShadowActiveViolations = uint64(a.Samples), float64(a.Violations)
}

// report returns the shadow's report for GetShadows (false: none runs).
func (s *rolloutShadow) report() (shadow.Report, bool) {
	candidate, _ := s.running()
	if candidate == nil {
		return shadow.Report{}, false
	}
	return candidate.Report(), true
}

// applyProfileShadow runs the rollout shadow the coordinator sent.
func (a *Agent) applyProfileShadow(cmd *slacklinev1.ProfileShadowCommand) {
	if err := a.rollout.apply(cmd); err != nil {
		a.log.Warn("rollout shadow refused", "profile", cmd.GetProfile(), "version", cmd.GetVersion(), "err", err)
		return
	}
	a.log.Info("rollout shadow", "profile", cmd.GetProfile(), "version", cmd.GetVersion())
}
