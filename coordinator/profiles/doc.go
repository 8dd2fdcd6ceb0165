// Package profiles is the pure part of fleet-wide node settings (#29):
// named profiles of estimator and QoS settings, the agents each is for,
// and rollouts that move a new version to a share of those agents in
// waves and roll it back on their own when it makes things worse.
//
// # Profiles
//
// A Profile has a name, a selector (agent attributes, all of which a
// matching agent has) and a stable version: settings in the agent's
// --config format (a YAML or JSON mapping of flag names to values),
// restricted to the flags an agent applies without restarting
// (settings.ProfileFlags, package agent/settings) and validated by the
// agent's own code (settings.ValidateProfile)
// (the shell passes that check in; the agent validates again before it
// applies). An agent runs the one profile Select picks among those it
// matches (the most selector terms, then the name); Assign says which
// version of it. Versions are numbered from 1 per profile; version 0 is
// no profile, the agent's own flags.
//
// Apply makes a version stable at once for every matching agent (an
// operator's "apply"), aborting a rollout under way. StartRollout starts a
// candidate version in waves instead.
//
// # Rollouts
//
// A rollout's Policy lists cumulative shares (0.1, 0.5, 1): each wave
// chooses more agents, in a stable pseudo-random order of the hosts (a
// hash of profile and hostname), until the wave's share of the matching
// agents at the wave's start runs the candidate (at least one). Step,
// called with the time and each matching agent's latest signals, measures
// two groups over the wave (since its start, from a baseline of every
// agent's counters then): the updated agents (chosen and running the
// candidate) and the others (not chosen). It rolls back at once when a
// chosen agent refused the candidate, when the updated agents' violation
// rate of the calibrated estimator exceeds the others' by more than
// Policy.ViolationTolerance (both with at least Policy.MinScored
// estimates scored), or when their mean guaranteed run-queue p99 exceeds
// the others' by more than Policy.RunqP99Tolerance plus
// Policy.RunqP99Floor. The final wave has no others: it is judged against
// the others of the wave before (Rollout.Reference). A wave passes after
// Policy.Soak with enough estimates scored and nothing worse; after the
// last wave the candidate becomes the stable version.
//
// An agent's counters restart when a new version rebuilds its estimator:
// a baseline taken under another version counts from zero.
//
// # Shadow stage and shadow judgement
//
// With Policy.ShadowSoak (DefaultPolicy: on), a rollout starts in its
// shadow stage (StageShadow): the first wave's agents (ShadowHosts) are
// asked to run the candidate in shadow (AssignShadow) beside the stable
// version, and report both versions' estimates scored and violated over
// the same inputs (Signals.Shadow). Step rolls back, the candidate never
// applied, when an agent refuses it in shadow or when the shadow's
// violation rate exceeds the stable version's on the same agents by more
// than ViolationTolerance (both with MinScored); it starts the first live
// wave (ShadowPassed) once the stage soaked for ShadowSoak with enough
// scored and nothing worse, on the stage's agents still in the fleet (then
// others up to the wave's share), or at once when every stage agent that
// reported says it cannot shadow (Signals.ShadowCapable; StartRollout
// skips the stage already when all of them did). When every agent of the
// stage has left the fleet, Step chooses the first wave's share afresh and
// the stage soaks again on them; MaxShadowStageSoaks times ShadowSoak
// after the rollout started, a stage not yet judged ends and the live
// waves start, judged on live signals, the reason saying so. During the live waves
// the updated agents shadow the previous version, and Step also rolls back
// when their live violation rate exceeds their own shadow's (Paired) by
// more than the tolerance. Agents that cannot shadow are listed in
// Paired.WithoutShadows and judged on live signals only.
//
// # Ownership and errors
//
// Values in, values out: Apply, StartRollout and Step never modify the
// profile they are given; they return a changed copy (Step returns the
// same pointer when nothing changed). No clock, no I/O, no lock: the
// coordinator's shell judges rollouts with Step at the time it is given
// (Coordinator.JudgeRollouts), persists each new profile before it uses
// it, and sends agents their assignments. Every change appends to the profile's
// History (who, when, what), at most MaxHistory entries.
//
// Errors wrap ErrInvalid (a malformed name, selector, settings or policy,
// naming the field), ErrNotFound (a rollout of a profile never applied)
// or ErrFailedPrecondition (a rollout while another is under way).
package profiles
