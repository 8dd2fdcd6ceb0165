package coordinator

import (
	"github.com/slackline/slackline/coordinator/profiles"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Rollout shadows (#29 item 5): an agent a rollout asks to run a profile
// version in shadow (profiles.AssignShadow) is sent a
// ProfileShadowCommand over its command stream, as its assignment is a
// ProfileApplyCommand; the agent's shadow mechanism and bounds are the
// --shadow ones (agent/shadow), and its heartbeats report the shadow's
// counters beside the active settings' (ProfileReport.shadow_*), which
// signalsOf gives profiles.Step.

// sendProfileShadow sends agent a (report r, profile p: the one it runs)
// the rollout shadow it should run, or a stop when it runs one it should
// not, unless its session was sent that already (a refused shadow is not
// sent again). Only agents that report they can shadow are sent one: the
// others are judged on their live signals. Under c.mu.
func (c *Coordinator) sendProfileShadow(a *agent, p *profiles.Profile, r *slacklinev1.ProfileReport) {
	if a.session == nil || !r.GetShadowCapable() {
		return
	}
	want, ok := profiles.AssignShadow(p, a.Info.GetHostname())
	switch {
	case ok && r.GetShadowProfile() == want.Profile && r.GetShadowVersion() == want.Version.Number:
		return // runs it
	case !ok && r.GetShadowProfile() == "":
		return // runs none, as it should
	case !ok:
		want = profiles.Assignment{} // stop
	}
	sent := profileSent{session: a.session.id, profile: want.Profile, version: want.Version.Number}
	if c.profiles.sentShadow[a.ID] == sent {
		return
	}
	c.profiles.sentShadow[a.ID] = sent
	a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ProfileShadow{ProfileShadow: &slacklinev1.ProfileShadowCommand{
		Profile: want.Profile, Version: want.Version.Number, Settings: want.Version.Settings,
	}}})
}
