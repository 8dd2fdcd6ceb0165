package estimator

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestCalibrationUpdate pins the update of adaptive conformal inference:
// α_{t+1} = α_t + γ(α − err_t), clipped at the ceiling; the margin is the
// ⌈(1−α_t)(n+1)⌉-th smallest score (0 while the window is too young for a
// level at or above the target, the largest score below it); α_t ≤ 0 pauses.
func TestCalibrationUpdate(t *testing.T) {
	t.Parallel()
	type step struct {
		err, score float64
	}
	tests := []struct {
		name       string
		cfg        CalibrationConfig
		steps      []step
		wantAlpha  float64
		wantSorted []float64
		wantMargin float64
		wantPaused bool
	}{
		{
			name:       "no scores: fast's own estimate",
			cfg:        CalibrationConfig{TargetViolation: 0.1, Gamma: 0.5, Window: 4, Tolerance: 0.05, Confirm: 1},
			wantAlpha:  0.1,
			wantMargin: 0,
		},
		{
			name:       "a success raises alpha by gamma*alpha; margin is the 4th of 4 at alpha 0.3",
			cfg:        CalibrationConfig{TargetViolation: 0.1, Gamma: 0.5, Window: 4, Tolerance: 0.05, Confirm: 1},
			steps:      []step{{0, 0.4}, {0, 0.1}, {0, 0.3}, {0, 0.2}},
			wantAlpha:  0.3, // 0.1 + 4 × 0.05, below the ceiling 1
			wantSorted: []float64{0.1, 0.2, 0.3, 0.4},
			// ⌈(1 − 0.3) × 5⌉ = 4: the 4th smallest (the scores account
			// for the tolerance: the caller's).
			wantMargin: 0.4,
		},
		{
			name:       "a violation lowers alpha by gamma*(1-alpha) and pauses at or below 0",
			cfg:        CalibrationConfig{TargetViolation: 0.1, Gamma: 0.5, Window: 4, Tolerance: 0.05, Confirm: 1},
			steps:      []step{{0, 0.4}, {1, 0.9}},
			wantAlpha:  0.15 - 0.45,
			wantSorted: []float64{0.4, 0.9},
			wantMargin: math.Inf(1),
			wantPaused: true,
		},
		{
			name:       "the window keeps the newest scores",
			cfg:        CalibrationConfig{TargetViolation: 0.01, Gamma: 0.001, Window: 3, Tolerance: 0, Confirm: 1},
			steps:      []step{{0, 5}, {0, 1}, {0, 3}, {0, 2}},
			wantAlpha:  0.01 + 4*0.001*0.01,
			wantSorted: []float64{1, 2, 3},
			// α(n+1) < 1 with α at or above the target: the window is too
			// young for the level, fast's own estimate (a warm start).
			wantMargin: 0,
		},
		{
			name:       "below the target, with too few scores for the level: the largest score",
			cfg:        CalibrationConfig{TargetViolation: 0.1, Gamma: 0.05, Window: 3, Tolerance: 0, Confirm: 1},
			steps:      []step{{0, 5}, {1, 1}, {0, 3}},
			wantAlpha:  0.1 + 0.005 - 0.045 + 0.005,
			wantSorted: []float64{1, 3, 5},
			// ⌈(1 − 0.065) × 4⌉ = 4 > 3 and α < 0.1: the largest score
			// stands for the infinite quantile.
			wantMargin: 5,
		},
		{
			name:       "an unscored estimate counts as a violation and adds no score",
			cfg:        CalibrationConfig{TargetViolation: 0.5, Gamma: 0.1, Window: 3, Tolerance: 0, Confirm: 1},
			steps:      []step{{0, 1}, {1, math.NaN()}},
			wantAlpha:  0.5 + 0.05 - 0.05,
			wantSorted: []float64{1},
			wantMargin: 1,
		},
		{
			name:       "alpha stops at its ceiling, 10 times the target",
			cfg:        CalibrationConfig{TargetViolation: 0.05, Gamma: 1, Window: 10, Tolerance: 0, Confirm: 1},
			steps:      []step{{0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}, {0, 8}, {0, 9}, {0, 10}, {0, 11}, {0, 12}},
			wantAlpha:  0.5,
			wantSorted: []float64{3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
			// ⌈0.5 × 11⌉ = 6: the 6th smallest.
			wantMargin: 8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewCalibration(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			violations := 0.0
			for _, s := range tt.steps {
				c.Observe(s.err, s.score)
				violations += s.err
			}
			if math.Abs(c.Alpha()-tt.wantAlpha) > 1e-12 {
				t.Errorf("alpha %v, want %v", c.Alpha(), tt.wantAlpha)
			}
			if !slices.Equal(c.sorted, tt.wantSorted) {
				t.Errorf("window %v, want %v", c.sorted, tt.wantSorted)
			}
			margin, paused := c.Margin()
			if margin != tt.wantMargin && math.Abs(margin-tt.wantMargin) > 1e-12 || paused != tt.wantPaused {
				t.Errorf("margin %v paused %v, want %v %v", margin, paused, tt.wantMargin, tt.wantPaused)
			}
			if c.Resolved() != len(tt.steps) || c.Violations() != violations {
				t.Errorf("resolved %d violations %v, want %d %v", c.Resolved(), c.Violations(), len(tt.steps), violations)
			}
		})
	}
}

// TestCalibrationConfigErrors: each bad field is an error naming it.
func TestCalibrationConfigErrors(t *testing.T) {
	t.Parallel()
	good := DefaultCalibrationConfig()
	tests := []struct {
		name   string
		modify func(*CalibrationConfig)
	}{
		{"target violation", func(c *CalibrationConfig) { c.TargetViolation = 0 }},
		{"target violation", func(c *CalibrationConfig) { c.TargetViolation = 1 }},
		{"calibration step", func(c *CalibrationConfig) { c.Gamma = 0 }},
		{"calibration window", func(c *CalibrationConfig) { c.Window = 0 }},
		{"calibration window", func(c *CalibrationConfig) { c.Window = maxCalibrationWindow + 1 }},
		{"calibration tolerance", func(c *CalibrationConfig) { c.Tolerance = -1 }},
		{"confirmation period", func(c *CalibrationConfig) { c.Confirm = 0 }},
	}
	for _, tt := range tests {
		cfg := good
		tt.modify(&cfg)
		_, err := NewCalibration(cfg)
		if !errors.Is(err, ErrInvalidConfig) || !containsFold(err.Error(), tt.name) {
			t.Errorf("%s: error %v, want ErrInvalidConfig naming it", tt.name, err)
		}
	}
	if _, err := NewCalibration(good); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
