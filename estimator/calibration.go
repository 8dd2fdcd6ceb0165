package estimator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// CalibrationConfig configures the online calibration of the "calibrated"
// estimator: adaptive conformal inference (Gibbs and Candès, 2021) around
// fast's estimate. The other estimators ignore it.
//
// These settings, like fast's, were chosen on the recorded traces
// (testdata/*.csv) only. The held-out traces (testdata/heldout) are never
// used to choose a setting: they are scored, not tuned on.
type CalibrationConfig struct {
	// TargetViolation (0 < α < 1) is the long-run share of estimates whose
	// offer exceeds the slack that was really there by more than
	// Tolerance (--estimator-target-violation).
	TargetViolation float64
	// Gamma (> 0) is the step of the update α_{t+1} = α_t + γ(α − err_t):
	// larger adapts faster after a change of regime, with a noisier margin.
	// The finite-sample allowance is (α + dγ)/(γT) after T estimates known d late (doc.go).
	Gamma float64
	// Window (>= 1) is how many of the latest conformity scores (one per
	// estimate) the margin is a quantile of.
	Window int
	// Tolerance is the excess, in cores, under which an over-offer is not a
	// violation (the backtest's tolerance: measurement noise). The
	// calibrated estimator's scores account for it.
	Tolerance float64
	// Confirm replaces Fast.Confirm in the calibrated estimator: how long
	// slack must last before it is offered. fast needs a second because its
	// margin is fixed; here the calibration carries the risk of offering
	// sooner (it widens its margin when early offers violate), so the
	// confirmation only has to filter noise.
	Confirm time.Duration
}

// DefaultCalibrationConfig returns the calibration's defaults: a 1% target,
// γ = 0.01, a window of 3000 scores (5 minutes of estimates at 100 ms),
// the backtest's 0.05 cores of tolerance and a 300 ms confirmation. γ and
// Confirm were chosen on the recorded traces (γ among 0.002-0.02, Confirm
// among 0.2-1 s; the window matters little between 600 and 6000), never on
// the held-out ones.
func DefaultCalibrationConfig() CalibrationConfig {
	return CalibrationConfig{TargetViolation: 0.01, Gamma: 0.01, Window: 3000, Tolerance: 0.05, Confirm: 300 * time.Millisecond}
}

func (c CalibrationConfig) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
		}
	}
	check(c.TargetViolation > 0 && c.TargetViolation < 1, "target violation %v must be in (0, 1)", c.TargetViolation)
	check(c.Gamma > 0 && c.Gamma <= 1, "calibration step %v must be in (0, 1]", c.Gamma)
	check(c.Window >= 1 && c.Window <= maxCalibrationWindow, "calibration window %d must be in [1, %d]", c.Window, maxCalibrationWindow)
	check(c.Tolerance >= 0 && !math.IsInf(c.Tolerance, 0), "calibration tolerance %v must be a non-negative number", c.Tolerance)
	check(c.Confirm > 0, "calibrated confirmation period %v must be positive", c.Confirm)
	return errors.Join(errs...)
}

// maxCalibrationWindow bounds CalibrationConfig.Window (an hour of
// estimates at 100 ms): the scores are kept in memory.
const maxCalibrationWindow = 36000

// Calibration is the state of adaptive conformal inference for one node: the
// running level α_t, the window of conformity scores and the counts behind
// the reported violation rate. It is pure: no clock, no I/O; time is the
// sequence of Observe calls.
//
// A score is a number that exceeds q exactly when the estimate, offered
// with the margin q, would have violated; the caller defines it (the
// calibrated estimator's is relative to fast's estimate: doc.go). The
// margin that lets a share α_t of the recent scores through is their
// conformal quantile,
//
//	q_t = Quantile_{⌈(1−α_t)(n+1)⌉/n}(scores)
//
// and α follows the errors actually made: α_{t+1} = α_t + γ(α − err_t).
// When α_t ≤ 0 nothing is offered at all (Margin returns paused), which is
// what bounds the long-run violation rate whatever the scores are: the
// bound holds for any margin chosen from α_t, as long as α_t ≤ 0 offers
// nothing, so the quantile is what spends the budget well, not what keeps
// the promise.
type Calibration struct {
	cfg   CalibrationConfig
	alpha float64
	// scores is the window in arrival order (a ring from next), sorted the
	// same values in order.
	scores, sorted []float64
	next           int
	// resolved counts Observe calls, violations sums their err.
	resolved   int
	violations float64
}

// NewCalibration returns the calibration at its start: α_1 = the target,
// no scores.
func NewCalibration(cfg CalibrationConfig) (*Calibration, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Calibration{cfg: cfg, alpha: cfg.TargetViolation}, nil
}

// levelCeilingFactor bounds α_t from above at this many times the target
// (and at 1): a long quiet spell would otherwise raise α_t without bound,
// and the first hard minutes after it would violate until it came back
// down. Clipping from above only lowers α, so the long-run bound holds as
// is, and it bounds the violations in any run of estimates (doc.go).
const levelCeilingFactor = 10

// Ceiling returns the largest α_t can reach: min(1, 10 α).
func (c *Calibration) Ceiling() float64 {
	return min(1, levelCeilingFactor*c.cfg.TargetViolation)
}

// Alpha returns α_t, the level the next margin is taken at.
func (c *Calibration) Alpha() float64 { return c.alpha }

// Resolved returns how many estimates have been scored.
func (c *Calibration) Resolved() int { return c.resolved }

// Violations returns the sum of err over the estimates scored.
func (c *Calibration) Violations() float64 { return c.violations }

// Observe takes in the outcome of one estimate once its horizon has passed:
// err in [0, 1] (the share of its horizon it violated; 1 or 0 when the
// horizon is one sample) and its conformity score. A score that is NaN is
// not added to the window (an estimate that could not be scored is counted
// as a violation by the caller, with no score).
func (c *Calibration) Observe(err, score float64) {
	err = min(1, max(0, err))
	c.alpha = min(c.alpha+c.cfg.Gamma*(c.cfg.TargetViolation-err), c.Ceiling())
	c.resolved++
	c.violations += err
	c.AddScore(score)
}

// AddScore adds one conformity score to the window without touching the
// level (a NaN or infinite score is not added). Observe calls it; the
// calibrated estimator also keeps one window per base prediction (expert)
// and adds each expert's score to its own.
func (c *Calibration) AddScore(score float64) {
	if math.IsNaN(score) || math.IsInf(score, 0) {
		return
	}
	if len(c.scores) < c.cfg.Window {
		c.scores = append(c.scores, score)
	} else {
		old := c.scores[c.next]
		c.scores[c.next] = score
		c.next = (c.next + 1) % c.cfg.Window
		i, _ := slices.BinarySearch(c.sorted, old)
		c.sorted = slices.Delete(c.sorted, i, i+1)
	}
	i, _ := slices.BinarySearch(c.sorted, score)
	c.sorted = slices.Insert(c.sorted, i, score)
}

// Margin returns the margin q_t in the scores' unit, or paused when α_t ≤ 0
// (offer nothing). With no scores yet it is 0 (the estimate is fast's own).
// When α_t·(n+1) < 1 the conformal quantile would be infinite: while α_t is
// at or above the target (no violation is pulling it down) the window is
// merely too young for the level and the margin is 0, fast's own (a warm
// start: the first 1/α estimates would otherwise all be held to the
// largest score seen); below the target the largest score in the window
// stands for it. When α_t ≥ 1 it is −Inf (the caller bounds what may be
// given back).
func (c *Calibration) Margin() (margin float64, paused bool) {
	return c.MarginAt(c.alpha)
}

// MarginAt is Margin at the level alpha instead of α_t: the margin the
// window's scores give at that level (the calibrated estimator takes each
// expert's margin at the one shared level).
func (c *Calibration) MarginAt(alpha float64) (margin float64, paused bool) {
	if alpha <= 0 {
		return math.Inf(1), true
	}
	n := len(c.sorted)
	if n == 0 {
		return 0, false
	}
	if alpha >= 1 {
		return math.Inf(-1), false
	}
	k := int(math.Ceil((1 - alpha) * float64(n+1)))
	if k > n && alpha >= c.cfg.TargetViolation {
		return 0, false
	}
	k = min(max(k, 1), n)
	return c.sorted[k-1], false
}
