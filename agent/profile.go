package agent

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slackline/slackline/agent/settings"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
)

// Node profiles (#29): the coordinator's ProfileService gives each agent
// estimator and QoS settings over its command stream, which the agent
// applies without restarting.

// ProfileFlags are the flags a node profile may set (settings.ProfileFlags):
// the estimator and QoS settings (SettingFlags, the ones shadow candidates
// take) but --qos-controller. The agent swaps their settings in place, by
// building a new estimator and QoS controller set; the other flags wire
// subsystems (cgroups, eBPF, the network classifier) or set a loop's
// period: they need a restart and are refused.
var ProfileFlags = settings.ProfileFlags

// ParseProfile returns base with a profile's settings applied: a YAML or
// JSON mapping of flag names to values (the --config format, each value
// through its flag's own parser), restricted to ProfileFlags, and
// validated with ValidateSettings (the part of Validate that covers
// them). name names the profile in errors. The coordinator checks a
// profile with settings.ValidateProfile, the same over the defaults.
func ParseProfile(base Options, name, data string) (Options, error) {
	source := "profile " + name
	o, _, err := base.applySettings(source, []byte(data), settings.IsProfileFlag, settings.ProfileRefusal)
	if err != nil {
		return Options{}, err
	}
	if err := o.ValidateSettings(); err != nil {
		return Options{}, fmt.Errorf("%s: %w", source, err)
	}
	return o, nil
}

// profileSettings is what applying a profile builds: the estimator and
// QoS controllers that replace the running ones.
type profileSettings struct {
	estimator     estimator.Estimator
	estimatorName string
	qos           qos.Controller
	// warmup is how long the estimator takes to warm up from cold: its
	// window (--estimator-window), over which it looks back for peaks.
	warmup time.Duration
	// profile and version are what the settings are of: the estimates
	// the new estimator makes carry them, so that a heartbeat never
	// reports the old estimator's counters as the new version's.
	profile string
	version uint64
}

// profileBuilder returns what builds the estimator and QoS controllers of
// a profile's settings over o, the agent's own flags ("" settings: the
// flags alone), validated by ParseProfile.
func (o Options) profileBuilder() func(name, settings string) (profileSettings, error) {
	base := o
	base.Attributes = nil // a profile cannot set them; do not share the map
	return func(name, settings string) (profileSettings, error) {
		p, err := ParseProfile(base, name, settings)
		if err != nil {
			return profileSettings{}, err
		}
		ctl, err := p.NewControllers()
		if err != nil {
			return profileSettings{}, err
		}
		return profileSettings{estimator: ctl.Estimator, estimatorName: ctl.EstimatorName, qos: ctl.QoS, warmup: p.EstimatorConfig.Window}, nil
	}
}

// profileState is the agent's node profile: what it runs and what it
// refused, for its heartbeats. Safe for concurrent use.
type profileState struct {
	mu                sync.Mutex
	profile           string
	version           uint64
	refusedVersion    uint64
	refusal           string
	appliedAt         time.Time
	refusedForProfile string
}

// apply applies a ProfileApplyCommand with build, swapping the estimator
// and QoS controllers in place (swap). A command for what already runs is
// a no-op; a failure keeps what runs and is recorded.
func (s *profileState) apply(cmd *slacklinev1.ProfileApplyCommand, build func(name, settings string) (profileSettings, error), swap func(profileSettings), now time.Time) error {
	s.mu.Lock()
	same := s.profile == cmd.GetProfile() && s.version == cmd.GetVersion()
	s.mu.Unlock()
	if same {
		return nil
	}
	err := errors.New("this agent cannot apply profiles (no estimator or QoS to swap)")
	var built profileSettings
	if build != nil {
		built, err = build(cmd.GetProfile(), cmd.GetSettings())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.refusedForProfile, s.refusedVersion, s.refusal = cmd.GetProfile(), cmd.GetVersion(), err.Error()
		return err
	}
	built.profile, built.version = cmd.GetProfile(), cmd.GetVersion()
	swap(built)
	s.profile, s.version, s.appliedAt = cmd.GetProfile(), cmd.GetVersion(), now
	return nil
}

// report is the ProfileReport part of s (without the signals).
func (s *profileState) report() *slacklinev1.ProfileReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &slacklinev1.ProfileReport{Profile: s.profile, Version: s.version,
		RefusedProfile: s.refusedForProfile, RefusedVersion: s.refusedVersion, Refusal: s.refusal}
}

// applyProfile applies a profile the coordinator sent: the estimator and
// QoS loops take the new estimator and controllers at their next pass.
func (a *Agent) applyProfile(cmd *slacklinev1.ProfileApplyCommand, now time.Time) {
	build := a.cfg.profiles
	if a.cfg.Estimator == nil || a.cfg.QoS == nil {
		build = nil // a loop that does not run would never take them
	}
	err := a.profile.apply(cmd, build, func(s profileSettings) {
		a.slack.next.Store(&s)
		a.qos.next.Store(&s)
	}, now)
	if err != nil {
		a.log.Warn("node profile refused: the agent keeps its settings", "profile", cmd.GetProfile(), "version", cmd.GetVersion(), "err", err)
		return
	}
	a.log.Info("node profile applied", "profile", cmd.GetProfile(), "version", cmd.GetVersion())
}

// profileReport is the ProfileReport of the agent's heartbeats: its
// profile, and the signals a rollout is judged on.
func (a *Agent) profileReport() *slacklinev1.ProfileReport {
	r := a.profile.report()
	if e := a.slack.latest.Load(); e != nil && e.explanation != nil && e.profile == r.Profile && e.version == r.Version {
		c := e.explanation.Calibration
		r.EstimatesScored, r.Violations = uint64(max(c.Resolved, 0)), c.Violations
	}
	r.RunqueueP99Seconds = time.Duration(a.qos.guaranteedRunqP99.Load()).Seconds()
	a.rollout.fill(r)
	return r
}
