package agent

import (
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// TestExplainEstimate: GetEstimate's breakdown (fields 4-9) is the
// calibrated estimator's own explanation of its latest estimate: one row
// per guaranteed container whose need adds up, the limiting one named, the
// calibration's account.
func TestExplainEstimate(t *testing.T) {
	t.Parallel()
	est, err := estimator.New("calibrated", estimator.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var busy, idle []estimator.Sample
	var ex estimator.Explanation
	for i := range 50 {
		now := t0.Add(time.Duration(i+1) * 100 * time.Millisecond)
		busy = append(busy, estimator.Sample{Time: now, CPU: 1.5})
		idle = append(idle, estimator.Sample{Time: now, CPU: 0.1})
		est.Estimate(estimator.Input{Now: now, Containers: []estimator.Container{
			{ID: "busy", Allocated: resources.New(2, 0, 0), History: busy},
			{ID: "idle", Allocated: resources.New(1, 0, 0), History: idle},
			{ID: "batch", Revocable: true, Allocated: resources.New(1, 0, 0), History: busy},
		}})
		ex = est.(estimator.Explainer).Explain()
	}
	resp := &slacklinev1.GetEstimateResponse{}
	explainEstimate(resp, &ex)
	if len(resp.Containers) != 2 || resp.Containers[0].GetId() != "busy" || resp.Containers[1].GetId() != "idle" {
		t.Fatalf("containers %v, want busy and idle (not the revocable one)", resp.Containers)
	}
	needs := 0.0
	for _, c := range resp.Containers {
		if sum := c.GetPredictedPeakCpus() + c.GetMarginCpus() + c.GetCalibrationCpus(); sum != c.GetNeedCpus() {
			t.Errorf("%s: need %v, want peak + margin + calibration = %v", c.GetId(), c.GetNeedCpus(), sum)
		}
		if c.GetWarmingUp() {
			t.Errorf("%s warming up after 50 samples", c.GetId())
		}
		needs += c.GetNeedCpus()
	}
	if got, want := resp.GetCalibratedCpus(), max(0, 3-needs); got < want-1e-9 || got > want+1e-9 {
		t.Errorf("calibrated cpus %v, want allocations minus needs %v", got, want)
	}
	if resp.GetLimitingContainer() != "busy" || resp.GetReason() == "" {
		t.Errorf("limiting %q (%q), want busy with a reason", resp.GetLimitingContainer(), resp.GetReason())
	}
	c := resp.GetCalibration()
	if c.GetTargetViolation() != 0.01 || c.GetResolved() != 49 || c.GetMaxFeedbackDelay() != 1 || c.GetViolationBound() <= 0.01 {
		t.Errorf("calibration %v: want target 1%%, 49 scored, delay 1, a bound above the target", c)
	}
}
