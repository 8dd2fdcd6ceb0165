package estimator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/slackline/slackline/resources"
)

// Sample is one measurement of a container.
type Sample struct {
	// Time is the end of the measured interval.
	Time time.Time
	// CPU is the cores used over the interval ending at Time.
	CPU float64
	// MemBytes is the memory working set at Time: anonymous memory plus
	// active page cache (the agent's mem_working_set_bytes); not usage,
	// whose inactive page cache reclaim takes for free.
	MemBytes uint64
	// NetTx is the egress bandwidth used over the interval, in Mbit/s.
	NetTx float64
}

// Usable reports whether the sample's CPU is finite and non-negative.
// Estimators leave other samples out: a bad sample from the monitor is
// dropped rather than read as zero use.
func (s Sample) Usable() bool { return !math.IsNaN(s.CPU) && !math.IsInf(s.CPU, 0) && s.CPU >= 0 }

// Container is what an estimator knows of one container or protected
// service.
type Container struct {
	// ID names the container in the agent (for diagnostics only).
	ID string
	// Revocable marks a container running on revocable resources. Such
	// containers are ignored: their usage does not reduce the estimate and
	// their allocation is not slack.
	Revocable bool
	// Allocated is the container's allocation (cpus, mem). For a protected
	// service it is the configured reservation, or empty to mean "its usage
	// peak" (see Input.Protected).
	Allocated resources.Resources
	// History holds the container's samples, oldest first. The agent bounds
	// it (it should keep at least Config.Window); estimators only read it.
	History []Sample
	// HistoryChecked promises that every sample of History has a finite,
	// non-negative CPU (the agent drops the others as it records them), so
	// that estimators need not check each sample of the window again at
	// every estimate (#29: that walk was a tenth of the agent's CPU).
	// Unset, they check, and leave bad samples out.
	HistoryChecked bool
}

// Input is everything an estimator may look at. Estimators read it and must
// not modify it or keep references into it after Estimate returns.
type Input struct {
	// Now is the time of the estimate; samples after Now are ignored.
	Now time.Time
	// Total is the agent's total resources. When it has cpus (or mem), the
	// estimate never exceeds Total minus the predicted use of guaranteed
	// containers and protected services.
	Total resources.Resources
	// Containers are the agent's containers, guaranteed and revocable.
	Containers []Container
	// Protected are services outside Slackline named with --protect-cgroup.
	// Their usage counts as guaranteed use. Their allocation is their
	// Allocated reservation when set, otherwise the peak of their History in
	// the window, so that without a reservation they add no slack of their
	// own but still hold back what they use.
	Protected []Container
	// Node is the node's memory as the QoS controllers see it (zero: not
	// known, and the memory estimate is not bounded by it).
	Node NodeMemory
}

// NodeMemory is the node's memory at Input.Now (bytes): its total and
// available memory as the agent's monitor samples them (MemTotal and
// MemAvailable, or a bounding cgroup's limit and what it leaves), and what
// revocable work must leave available for the QoS controllers that take
// memory back to stay calm (qos.MemoryKeeper's KeepFree: the reclaim
// controller's low line plus its calm margin).
//
// With Total and AvailableBytes set, the memory estimate is at most
//
//	Total − KeepFree − other − Σ need
//
// over guaranteed containers and protected services (their memory need,
// as in slackOf), where other = max(0, (Total − Available) − Σ working
// set) is what the node holds beyond the containers' latest working sets
// (the kernel, the agent, other processes). Revocable work holding that
// estimate leaves Available at least KeepFree while guaranteed work stays
// within its need. This bounds the slack from the node's side; the sum of
// the allocations less the needs (slackOf) bounds it from the guaranteed
// containers' side, and neither implies the other: the node bound sees
// memory no container is charged for, the allocation bound keeps the page
// cache a guaranteed container works on, which MemAvailable counts as
// available, out of the offer.
type NodeMemory struct {
	TotalBytes, AvailableBytes uint64
	// KeepFreeBytes is what must stay available (0: nothing beyond the
	// working sets and other use).
	KeepFreeBytes uint64
}

// Estimator turns the usage of an agent's containers into the resources the
// agent can oversubscribe.
//
// The returned value is the agent's TOTAL revocable capacity: it includes
// what revocable tasks already hold (Mesos semantics; the coordinator
// subtracts its allocated revocable resources to find what it can still
// offer). It only ever holds cpus, mem when enabled, and bandwidth when
// Input.Total has it; never ports or disk; never negative amounts.
//
// Estimate is called from one goroutine (the agent's estimate loop) and is not
// safe for concurrent use. Implementations do no I/O, start no goroutines and
// read no clock: the result is a function of the inputs seen so far. Stateful
// implementations (hysteresis, learned models) say so; their state is a
// deterministic function of the sequence of inputs, so replaying the same
// inputs into a fresh estimator gives the same outputs.
type Estimator interface {
	Estimate(in Input) resources.Resources
}

// Func adapts a function to Estimator.
type Func func(in Input) resources.Resources

// Estimate calls f(in).
func (f Func) Estimate(in Input) resources.Resources { return f(in) }

// Factory builds an estimator from a configuration; it returns an error
// wrapping ErrInvalidConfig when the fields it uses are out of range.
type Factory func(Config) (Estimator, error)

// Registry holds every estimator by name. It is the one place an estimator is
// added (see doc.go); callers treat it as read-only.
var Registry = map[string]Factory{
	"noop":       newNoop,
	"fixed":      newFixed,
	"usage":      newUsage,
	"predictive": newPredictive,
	"fast":       newFast,
	"calibrated": newCalibrated,
}

// DefaultName is the estimator the agent uses unless told otherwise.
const DefaultName = "calibrated"

// Errors of New and the factories.
var (
	// ErrUnknown is returned by New for a name not in Registry.
	ErrUnknown = errors.New("unknown estimator")
	// ErrInvalidConfig is wrapped by errors about out-of-range Config fields.
	ErrInvalidConfig = errors.New("invalid estimator config")
)

// New builds the estimator registered under name.
func New(name string, cfg Config) (Estimator, error) {
	factory, ok := Registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return factory(cfg)
}

// Names returns the registered names, sorted.
func Names() []string {
	names := make([]string, 0, len(Registry))
	for name := range Registry {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Config configures the estimators; each uses the fields it documents.
// Start from DefaultConfig: zero values are taken as given (a zero Margin
// means no margin) and fields out of range are errors.
type Config struct {
	// Fixed is what the fixed estimator returns (--oversubscribed-fixed).
	Fixed resources.Resources
	// Memory makes the usage estimators (usage, predictive, fast)
	// oversubscribe mem as well as cpus, from guaranteed containers'
	// working sets (Sample.MemBytes). On by default: revocable memory is
	// shaped by reclaim (the revocable subtree's memory.high, lowered by the
	// reclaim QoS controller under node memory pressure) and frozen before
	// a revocable task is killed, and guaranteed tasks keep their
	// allocation as memory.min/low protection (see qos.MemoryReclaim).
	Memory bool
	// Window is how far back usage looks for its percentile and peaks.
	Window time.Duration
	// Percentile (0 < p <= 100) is the percentile of CPU samples in the
	// window that usage takes as a container's steady peak.
	Percentile float64
	// PeakHalfLife is the half-life of usage's decaying peak hold: a sample
	// s seconds old counts for cpu*2^(-s/PeakHalfLife).
	PeakHalfLife time.Duration
	// Margin (0 <= m < 1) is the fraction of each guaranteed CPU allocation
	// never offered, on top of the predicted peak.
	Margin float64
	// MemoryMargin (0 <= m < 1) is the same for memory.
	MemoryMargin float64
	// MemoryWindow (>= 0) is how far back the working-set peak is taken
	// (0, or more than Window: Window).
	MemoryWindow time.Duration
	// MinSamples is how many samples in the window a container needs before
	// its allocation counts as slack at all; until then its whole allocation
	// is taken as used.
	MinSamples int
	// Hysteresis keeps small changes from reaching the coordinator (usage
	// and predictive; fast has its own band, and honours Off).
	Hysteresis Hysteresis
	// Fast configures the fast estimator (and the calibrated one, which
	// wraps it).
	Fast FastConfig
	// Calibration configures the calibrated estimator's online control of
	// its violation rate.
	Calibration CalibrationConfig
	// RiseInterval is the least time between two rises of the calibrated
	// estimator's published estimate (a Pacer; 0: every rise is published).
	// Shrinks, and a lasting rise right after a rise, are published at
	// once.
	RiseInterval time.Duration
}

// DefaultConfig returns the configuration the agent uses by default. Its
// settings were chosen on the recorded traces (testdata/*.csv); the
// held-out traces (testdata/heldout) are never used to tune them, only to
// score them.
func DefaultConfig() Config {
	return Config{
		Memory:       true,
		Window:       60 * time.Second,
		Percentile:   99,
		PeakHalfLife: 10 * time.Second,
		Margin:       0.10,
		MemoryMargin: 0.03,
		MemoryWindow: 15 * time.Second,
		MinSamples:   10,
		Hysteresis:   DefaultHysteresis(),
		Fast:         DefaultFastConfig(),
		Calibration:  DefaultCalibrationConfig(),
		RiseInterval: DefaultRiseInterval,
	}
}

// validate checks the fields usage and predictive read.
func (c Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
		}
	}
	check(c.Window > 0, "window %v must be positive", c.Window)
	check(c.Percentile > 0 && c.Percentile <= 100, "percentile %v must be in (0, 100]", c.Percentile)
	check(c.PeakHalfLife > 0, "peak half-life %v must be positive", c.PeakHalfLife)
	check(c.Margin >= 0 && c.Margin < 1, "margin %v must be in [0, 1)", c.Margin)
	check(c.MemoryMargin >= 0 && c.MemoryMargin < 1, "memory margin %v must be in [0, 1)", c.MemoryMargin)
	check(c.MemoryWindow >= 0, "memory window %v must not be negative", c.MemoryWindow)
	check(c.MinSamples >= 1, "min samples %d must be at least 1", c.MinSamples)
	if err := c.Hysteresis.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// newNoop returns an estimator that never oversubscribes (Mesos's noop).
func newNoop(Config) (Estimator, error) {
	return Func(func(Input) resources.Resources { return resources.Resources{} }), nil
}

// newFixed returns an estimator that always offers cfg.Fixed (cpus, mem and
// bandwidth only), whatever the usage: Mesos's fixed estimator.
func newFixed(cfg Config) (Estimator, error) {
	fixed := resources.New(cfg.Fixed.CPUs(), cfg.Fixed.Mem(), 0).With(resources.Bandwidth, cfg.Fixed.Bandwidth())
	return Func(func(Input) resources.Resources { return fixed }), nil
}

// mib converts bytes to MiB.
func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }
