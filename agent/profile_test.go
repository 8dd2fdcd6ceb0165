package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/settings"
	"github.com/slackline/slackline/estimator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
)

func TestParseProfile(t *testing.T) {
	t.Parallel()
	base := DefaultOptions()
	base.Estimator = "calibrated"
	base.Listen = "0.0.0.0:7000"
	base.QoSControllers = []string{"interference"}
	tests := []struct {
		name, settings string
		check          func(t *testing.T, o Options)
		wantErr        string
	}{
		{name: "yaml", settings: "estimator-target-violation: 0.05\nqos-runqueue-p99: 3ms\n", check: func(t *testing.T, o Options) {
			if o.EstimatorConfig.Calibration.TargetViolation != 0.05 || o.QoS.Interference.RunqP99Enter != 3*time.Millisecond {
				t.Errorf("target %v, runq p99 %v; want 0.05, 3ms", o.EstimatorConfig.Calibration.TargetViolation, o.QoS.Interference.RunqP99Enter)
			}
		}},
		{name: "json", settings: `{"estimator": "fast", "estimator-window": "30s"}`, check: func(t *testing.T, o Options) {
			if o.Estimator != "fast" || o.EstimatorConfig.Window != 30*time.Second {
				t.Errorf("estimator %s window %v, want fast 30s", o.Estimator, o.EstimatorConfig.Window)
			}
		}},
		{name: "the flags a profile does not set keep the agent's", settings: "estimator-window: 30s", check: func(t *testing.T, o Options) {
			if o.Estimator != "calibrated" || o.Listen != "0.0.0.0:7000" || strings.Join(o.QoSControllers, ",") != "interference" {
				t.Errorf("estimator %s, listen %s, qos %v: the base's were lost", o.Estimator, o.Listen, o.QoSControllers)
			}
		}},
		{name: "empty: the base", settings: "", check: func(t *testing.T, o Options) {
			if o.Estimator != "calibrated" || o.EstimatorConfig.Window != base.EstimatorConfig.Window || o.EstimatorConfig.Calibration != base.EstimatorConfig.Calibration {
				t.Errorf("empty profile changed the settings")
			}
		}},
		{name: "a flag that needs a restart", settings: "listen: 0.0.0.0:1\nqos-controller: [cpuset]", wantErr: "--listen cannot be applied without restarting the agent"},
		{name: "qos-controller needs a restart", settings: "qos-controller: [cpuset]", wantErr: "--qos-controller cannot be applied without restarting"},
		{name: "unknown key", settings: "estimator-windw: 30s", wantErr: "did you mean estimator-window"},
		{name: "bad value", settings: "estimator-window: soon", wantErr: "estimator-window"},
		{name: "not a mapping", settings: "- a\n- b", wantErr: "want a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, err := ParseProfile(base, "web", tt.settings)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
	if base.Estimator != "calibrated" || base.EstimatorConfig.Window == 30*time.Second {
		t.Errorf("ParseProfile changed its base")
	}
}

// TestValidateProfileAgreesWithParseProfile: the coordinator's check
// (settings.ValidateProfile, without the agent) accepts exactly the
// profiles an agent with default flags accepts (ParseProfile).
func TestValidateProfileAgreesWithParseProfile(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		"",
		"estimator-target-violation: 0.02",
		// docs/operators.md's example.
		"estimator-target-violation: 0.005\nestimator-rise-interval: 5s\nqos-runqueue-p99: 3ms\n",
		"estimator: fast\nestimator-confirm: 2s\nqos-memory-kill-cooldown: 1m\nqos-diskio-sync-p99: 10ms",
		"fixed-revocable: cpus:2;mem:128\nestimator: fixed",
		"estimator: nosuch",
		"estimator-target-violation: 1.5",
		"qos-memory-min-available: -1",
		"qos-controller: [memory]",
		"listen: 0.0.0.0:1",
		"oversubscribed-resources-interval: 1s",
		"qos-kill-afterr: 1s",
		"- not a mapping",
	} {
		_, agentErr := ParseProfile(DefaultOptions(), "web", data)
		coordErr := settings.ValidateProfile("web", data)
		if (agentErr == nil) != (coordErr == nil) {
			t.Errorf("%q: ParseProfile: %v; settings.ValidateProfile: %v", data, agentErr, coordErr)
		}
	}
}

func TestProfileStateApply(t *testing.T) {
	t.Parallel()
	base := DefaultOptions()
	base.Insecure = true // a valid agent's flags
	build := base.profileBuilder()
	var s profileState
	var swapped []profileSettings
	swap := func(p profileSettings) { swapped = append(swapped, p) }
	now := time.Unix(1000, 0)

	cmd := &slacklinev1.ProfileApplyCommand{Profile: "web", Version: 1, Settings: "estimator: fast"}
	if err := s.apply(cmd, build, swap, now); err != nil {
		t.Fatal(err)
	}
	if len(swapped) != 1 || swapped[0].estimatorName != "fast" || swapped[0].estimator == nil || swapped[0].qos == nil || swapped[0].version != 1 {
		t.Fatalf("swapped %+v, want one fast estimator with QoS, version 1", swapped)
	}
	if err := s.apply(cmd, build, swap, now); err != nil || len(swapped) != 1 {
		t.Errorf("the same version again: err %v, %d swaps; want a no-op", err, len(swapped))
	}
	bad := &slacklinev1.ProfileApplyCommand{Profile: "web", Version: 2, Settings: "estimator-window: -1s"}
	if err := s.apply(bad, build, swap, now); err == nil || len(swapped) != 1 {
		t.Fatalf("bad settings: err %v, %d swaps; want an error and no swap", err, len(swapped))
	}
	r := s.report()
	if r.GetProfile() != "web" || r.GetVersion() != 1 || r.GetRefusedProfile() != "web" || r.GetRefusedVersion() != 2 || !strings.Contains(r.GetRefusal(), "window -1s must be positive") {
		t.Errorf("report = %v, want web v1 running, v2 refused saying why", r)
	}
	// Back to the flags.
	if err := s.apply(&slacklinev1.ProfileApplyCommand{}, build, swap, now); err != nil || len(swapped) != 2 || swapped[1].estimatorName != DefaultOptions().Estimator {
		t.Errorf("no profile: err %v, swaps %d; want the flags' estimator back", err, len(swapped))
	}
	// An agent that cannot swap refuses.
	var none profileState
	if err := none.apply(cmd, nil, swap, now); err == nil || none.report().GetRefusedVersion() != 1 {
		t.Errorf("without a builder: err %v, report %v; want a refusal", err, none.report())
	}
}

func TestGuaranteedRunqP99(t *testing.T) {
	t.Parallel()
	if got := guaranteedRunqP99(nil); got != 0 {
		t.Errorf("no containers: %v, want 0", got)
	}
	containers := []qos.Container{
		{ID: "g", RunqP99: 2 * time.Millisecond},
		{ID: "r", Revocable: true, RunqP99: 9 * time.Millisecond},
		{ID: "p", Protected: true, RunqP99: 5 * time.Millisecond},
	}
	if got := guaranteedRunqP99(containers); got != 5*time.Millisecond {
		t.Errorf("guaranteedRunqP99 = %v, want 5ms (the protected service; revocable work is not counted)", got)
	}
}

// TestProfileReportCountsOnlyTheRunningVersion: between a profile's apply
// and the estimate loop's next pass, the latest estimate is the old
// estimator's; its counters must not be reported as the new version's (a
// rollout would judge the new version on them).
func TestProfileReportCountsOnlyTheRunningVersion(t *testing.T) {
	t.Parallel()
	a := &Agent{slack: &estimateLoop{}, qos: &qosLoop{}}
	old := &estimator.Explanation{Calibration: estimator.CalibrationStats{Resolved: 5000, Violations: 50}}
	a.slack.latest.Store(&estimate{explanation: old})
	a.qos.guaranteedRunqP99.Store(int64(2 * time.Millisecond))
	if r := a.profileReport(); r.GetEstimatesScored() != 5000 || r.GetViolations() != 50 || r.GetRunqueueP99Seconds() != 0.002 {
		t.Fatalf("report under the flags = %v, want 5000 scored, 50 violated, p99 2ms", r)
	}
	err := a.profile.apply(&slacklinev1.ProfileApplyCommand{Profile: "web", Version: 1}, func(string, string) (profileSettings, error) {
		return profileSettings{estimatorName: "calibrated"}, nil
	}, func(s profileSettings) { a.slack.next.Store(&s) }, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := a.profileReport(); r.GetProfile() != "web" || r.GetVersion() != 1 || r.GetEstimatesScored() != 0 {
		t.Errorf("report before the new estimator's first estimate = %v, want web/1 with nothing scored", r)
	}
	next := a.slack.next.Load()
	if next == nil || next.profile != "web" || next.version != 1 {
		t.Fatalf("the estimate loop was handed %+v, want web/1's settings", next)
	}
	fresh := &estimator.Explanation{Calibration: estimator.CalibrationStats{Resolved: 10, Violations: 1}}
	a.slack.latest.Store(&estimate{explanation: fresh, profile: "web", version: 1})
	if r := a.profileReport(); r.GetEstimatesScored() != 10 || r.GetViolations() != 1 {
		t.Errorf("report after it = %v, want 10 scored, 1 violated", r)
	}
}
