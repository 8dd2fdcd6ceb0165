package agent

import (
	"testing"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestRolloutShadowWarmupDiscarded: a candidate with the very settings
// the agent runs, started cold in shadow beside the warm active estimator,
// has both counters restart together past its warm-up (its 5 s
// --estimator-window: 50 inputs of the rig's 100 ms), so that what a cold
// estimator says in its first window is counted for neither (#29 item 5),
// and then scores exactly what the active one scores: the same samples,
// the same violations.
func TestRolloutShadowWarmupDiscarded(t *testing.T) {
	t.Parallel()
	r := newRolloutShadowRig(t)
	const settings = "estimator: fast\nestimator-window: 5s\nestimator-confirm: 3s\nestimator-peak-half-life: 1s"
	if err := r.applyProfile("web", 1, settings); err != nil {
		t.Fatal(err)
	}
	r.run(600) // the active estimator warm
	if err := r.rollout.apply(&slacklinev1.ProfileShadowCommand{Profile: "web", Version: 2, Settings: settings}); err != nil {
		t.Fatal(err)
	}
	r.run(1200) // scored from input 51: 1149 samples
	rep := r.report("web", 1)
	if rep.GetShadowEstimatesScored() != 1149 || rep.GetShadowActiveEstimatesScored() != 1149 {
		t.Errorf("scored %d in shadow, %d active; want 1149 each, past the 5 s warm-up", rep.GetShadowEstimatesScored(), rep.GetShadowActiveEstimatesScored())
	}
	if rep.GetShadowViolations() != rep.GetShadowActiveViolations() {
		t.Errorf("violations %v in shadow, %v active, of the same settings on the same samples; want equal", rep.GetShadowViolations(), rep.GetShadowActiveViolations())
	}
}
