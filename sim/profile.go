package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// ProfileSignals are what a simulated agent reports on its heartbeats
// while it runs a node profile (#29), as the real agent's calibrated
// estimator and QoS loop would: each heartbeat scores ScoredPerBeat more
// estimates, of which a ViolationRate share were violated, and reports a
// guaranteed run-queue p99 of RunqP99.
type ProfileSignals struct {
	ScoredPerBeat uint64
	ViolationRate float64
	RunqP99       time.Duration
}

// ProfileFunc decides what simulated agent index does with a node profile
// (a ProfileApplyCommand; the empty command is the agent's own flags, at
// start): the signals it reports while it runs it, or an error to refuse
// it (the agent keeps what it runs and reports the refusal).
type ProfileFunc func(index int, cmd *slacklinev1.ProfileApplyCommand) (ProfileSignals, error)

// simProfile is a simulated agent's node profile and counters. Its
// counters restart when a profile is applied, as the real agent's
// estimator is rebuilt.
type simProfile struct {
	mu                      sync.Mutex
	started                 bool
	profile                 string
	version                 uint64
	signals                 ProfileSignals
	scored                  uint64
	violations              float64
	refusedProfile, refusal string
	refusedVersion          uint64
	// The rollout shadow (ProfileShadowCommand): what it runs, its
	// signals, and its and the active version's counters since either
	// changed.
	shadowProfile                       string
	shadowVersion                       uint64
	shadowSignals                       ProfileSignals
	shadowScored, activeScored          uint64
	shadowViolations, activeViolations  float64
	shadowRefusedProfile, shadowRefusal string
	shadowRefusedVersion                uint64
	// log is what the agent ran, oldest first (ProfileLog).
	log []string
}

// MaxProfileLog bounds a simulated agent's ProfileLog: the oldest entries
// are dropped beyond it.
const MaxProfileLog = 64

// record appends an entry to the log. Under p.mu.
func (p *simProfile) record(format string, args ...any) {
	p.log = append(p.log, fmt.Sprintf(format, args...))
	if over := len(p.log) - MaxProfileLog; over > 0 {
		p.log = slices.Delete(p.log, 0, over)
	}
}

// apply applies cmd with f.
func (p *simProfile) apply(f ProfileFunc, index int, cmd *slacklinev1.ProfileApplyCommand) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started && p.profile == cmd.GetProfile() && p.version == cmd.GetVersion() {
		return
	}
	signals, err := f(index, cmd)
	if err != nil {
		p.refusedProfile, p.refusedVersion, p.refusal = cmd.GetProfile(), cmd.GetVersion(), err.Error()
		return
	}
	p.started, p.profile, p.version, p.signals, p.scored, p.violations = true, cmd.GetProfile(), cmd.GetVersion(), signals, 0, 0
	p.shadowScored, p.shadowViolations, p.activeScored, p.activeViolations = 0, 0, 0, 0
	p.record("apply %s/%d", p.profile, p.version)
}

// shadow runs (or, with profile "", stops) a rollout shadow with f: the
// version's signals, as f would apply it, scored beside the active ones.
func (p *simProfile) shadow(f ProfileFunc, index int, cmd *slacklinev1.ProfileShadowCommand) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cmd.GetProfile() == p.shadowProfile && cmd.GetVersion() == p.shadowVersion {
		return
	}
	var signals ProfileSignals
	if cmd.GetProfile() != "" {
		var err error
		signals, err = f(index, &slacklinev1.ProfileApplyCommand{Profile: cmd.GetProfile(), Version: cmd.GetVersion(), Settings: cmd.GetSettings()})
		if err != nil {
			p.shadowRefusedProfile, p.shadowRefusedVersion, p.shadowRefusal = cmd.GetProfile(), cmd.GetVersion(), err.Error()
			return
		}
	}
	p.shadowProfile, p.shadowVersion, p.shadowSignals = cmd.GetProfile(), cmd.GetVersion(), signals
	p.shadowScored, p.shadowViolations, p.activeScored, p.activeViolations = 0, 0, 0, 0
	if p.shadowProfile == "" {
		p.record("shadow stop")
	} else {
		p.record("shadow %s/%d", p.shadowProfile, p.shadowVersion)
	}
}

// report is one heartbeat's report: it advances the counters by a beat.
func (p *simProfile) report(f ProfileFunc, index int, shadows bool) *slacklinev1.ProfileReport {
	p.mu.Lock()
	if !p.started {
		p.mu.Unlock()
		p.apply(f, index, &slacklinev1.ProfileApplyCommand{})
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	p.scored += p.signals.ScoredPerBeat
	p.violations += p.signals.ViolationRate * float64(p.signals.ScoredPerBeat)
	r := &slacklinev1.ProfileReport{Profile: p.profile, Version: p.version,
		RefusedProfile: p.refusedProfile, RefusedVersion: p.refusedVersion, Refusal: p.refusal,
		EstimatesScored: p.scored, Violations: p.violations, RunqueueP99Seconds: p.signals.RunqP99.Seconds(),
		ShadowCapable: shadows, ShadowRefusedProfile: p.shadowRefusedProfile, ShadowRefusedVersion: p.shadowRefusedVersion, ShadowRefusal: p.shadowRefusal}
	if p.shadowProfile != "" {
		// The shadow and the active estimator are scored on the same
		// samples: as many of each.
		n := p.signals.ScoredPerBeat
		p.shadowScored += n
		p.shadowViolations += p.shadowSignals.ViolationRate * float64(n)
		p.activeScored += n
		p.activeViolations += p.signals.ViolationRate * float64(n)
		r.ShadowProfile, r.ShadowVersion = p.shadowProfile, p.shadowVersion
		r.ShadowEstimatesScored, r.ShadowViolations = p.shadowScored, p.shadowViolations
		r.ShadowActiveEstimatesScored, r.ShadowActiveViolations = p.activeScored, p.activeViolations
	}
	return r
}

// ProfileLog returns what agent a applied ("apply PROFILE/VERSION") and ran
// in shadow ("shadow PROFILE/VERSION", "shadow stop"), oldest first, at
// most the last MaxProfileLog.
func (a *Agent) ProfileLog() []string {
	a.profile.mu.Lock()
	defer a.profile.mu.Unlock()
	return slices.Clone(a.profile.log)
}

// Shadow returns the profile version agent a runs in shadow for a
// rollout ("": none).
func (a *Agent) Shadow() (string, uint64) {
	a.profile.mu.Lock()
	defer a.profile.mu.Unlock()
	return a.profile.shadowProfile, a.profile.shadowVersion
}

// Profile returns the node profile and version agent a runs ("" and 0:
// none, or profiles are not simulated).
func (a *Agent) Profile() (string, uint64) {
	a.profile.mu.Lock()
	defer a.profile.mu.Unlock()
	return a.profile.profile, a.profile.version
}

// profileReport is the heartbeats' report (nil without Config.Profile).
func (a *Agent) profileReport() *slacklinev1.ProfileReport {
	f := a.fleet.cfg.Profile
	if f == nil {
		return nil
	}
	return a.profile.report(f, a.index, a.fleet.cfg.ProfileShadows)
}
