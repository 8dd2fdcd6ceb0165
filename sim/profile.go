package sim

import (
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
}

// report is one heartbeat's report: it advances the counters by a beat.
func (p *simProfile) report(f ProfileFunc, index int) *slacklinev1.ProfileReport {
	p.mu.Lock()
	if !p.started {
		p.mu.Unlock()
		p.apply(f, index, &slacklinev1.ProfileApplyCommand{})
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	p.scored += p.signals.ScoredPerBeat
	p.violations += p.signals.ViolationRate * float64(p.signals.ScoredPerBeat)
	return &slacklinev1.ProfileReport{Profile: p.profile, Version: p.version,
		RefusedProfile: p.refusedProfile, RefusedVersion: p.refusedVersion, Refusal: p.refusal,
		EstimatesScored: p.scored, Violations: p.violations, RunqueueP99Seconds: p.signals.RunqP99.Seconds()}
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
	return a.profile.report(f, a.index)
}
