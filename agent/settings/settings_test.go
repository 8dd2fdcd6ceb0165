package settings

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// TestValidateProfile: the coordinator's check accepts valid settings
// and refuses, naming the flag or key, bad values, --qos-controller and
// anything that is no setting.
func TestValidateProfile(t *testing.T) {
	t.Parallel()
	tests := []struct{ settings, wantErr string }{
		{"estimator-target-violation: 0.02", ""},
		// docs/operators.md's example.
		{"estimator-target-violation: 0.005\nestimator-rise-interval: 5s\nqos-runqueue-p99: 3ms\n", ""},
		{"", ""},
		{"estimator: nosuch", "--estimator nosuch"},
		{"estimator-target-violation: 1.5", "target"},
		{"qos-memory-min-available: -1", "--qos-memory-min-available: must not be negative"},
		{"qos-controller: [memory]", "--qos-controller cannot be applied without restarting the agent"},
		{"listen: 0.0.0.0:1", "listen: unknown setting (no such flag)\n(a profile may set only --estimator"},
		{"qos-kill-afterr: 1s", "did you mean qos-kill-after"},
		{"estimator-window: soon", "estimator-window"},
	}
	for _, tt := range tests {
		err := ValidateProfile("web", tt.settings)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("ValidateProfile(%q) = %v, want %q", tt.settings, err, tt.wantErr)
		}
	}
}

// TestDefaultIsValid: the flags' defaults build an estimator and the
// default QoS controllers.
func TestDefaultIsValid(t *testing.T) {
	t.Parallel()
	s := Default()
	ctl, err := s.NewControllers()
	if err != nil {
		t.Fatal(err)
	}
	if ctl.EstimatorName != s.Estimator || ctl.Estimator == nil || ctl.QoS == nil || len(ctl.QoSNames) == 0 {
		t.Errorf("controllers %+v", ctl)
	}
}

// TestQoSConfigDerivesExits: the calm thresholds follow the enter ones,
// and the MiB floors replace the fractions.
func TestQoSConfigDerivesExits(t *testing.T) {
	t.Parallel()
	var s Settings
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s.AddFlags(fs)
	if err := fs.Parse([]string{"--qos-runqueue-p99", "4ms", "--qos-cpu-pressure", "50", "--qos-network-saturation", "0.9",
		"--qos-memory-min-available", "300", "--qos-reclaim-low-available", "600"}); err != nil {
		t.Fatal(err)
	}
	c := s.QoSConfig()
	if c.Interference.RunqP99Exit != 2*time.Millisecond || c.Interference.CPUPressureExit != 20 {
		t.Errorf("interference exits %v %v", c.Interference.RunqP99Exit, c.Interference.CPUPressureExit)
	}
	if got := c.Network.SaturationExit; got < 0.799 || got > 0.801 {
		t.Errorf("network exit %v", got)
	}
	if c.Memory.MinAvailableBytes != 300<<20 || c.Memory.MinAvailableFraction != 0 || c.Reclaim.CriticalAvailableBytes != 300<<20 ||
		c.Reclaim.LowAvailableBytes != 600<<20 || c.Reclaim.LowAvailableFraction != 0 {
		t.Errorf("memory floors %+v %+v", c.Memory, c.Reclaim)
	}
}
