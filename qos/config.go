package qos

import (
	"errors"
	"fmt"
	"time"
)

// Config configures every controller; each reads its own part. Start from
// DefaultConfig and change what you need; Validate says what is wrong.
type Config struct {
	Interference InterferenceConfig
	CPUSet       CPUSetConfig
	Memory       MemoryConfig
	Reclaim      ReclaimConfig
	DiskIO       DiskIOConfig
	Load         LoadConfig
	Network      NetworkConfig
	// KillRetry is how long a controller waits for a container it asked to
	// kill to disappear from the input before asking again. Default 10 s.
	KillRetry time.Duration
}

// InterferenceConfig configures the interference controller. A signal
// enters violation above its Enter threshold and counts as calm only below
// its Exit threshold; between the two the controller holds the limit.
type InterferenceConfig struct {
	// RunqP99Enter is the run-queue latency p99 of a guaranteed or protected
	// container above which it is interfered with. Default 1 ms.
	RunqP99Enter time.Duration
	// RunqP99Exit is the p99 below which it is calm. Default 500 µs.
	RunqP99Exit time.Duration
	// CPUPressureEnter is the cgroup cpu.pressure some avg10 (percent) above
	// which a guaranteed container is interfered with; 0 ignores CPU PSI.
	// Default 25.
	CPUPressureEnter float64
	// CPUPressureExit is the avg10 below which it is calm. Default 10.
	CPUPressureExit float64
	// EventLatency is the wakeup latency from which an eBPF threshold event
	// counts. Default 1 ms.
	EventLatency time.Duration
	// EventCount is how many such events within EventWindow make a
	// violation, so that the controller reacts to a burst of slow wakeups
	// without waiting for the next percentile sample; 0 ignores events.
	// Default 5.
	EventCount int
	// MinAttributedDelay: when eBPF attribution is available (a container's
	// DelayedBy is not nil), a guaranteed container's run-queue or PSI
	// violation counts only if revocable containers delayed it at least this
	// much over the last interval, and only threshold events with a
	// revocable culprit count. Work that suffers from itself or from
	// something outside Slackline is not the revocable tasks' fault and
	// throttling them would not help. 0 turns the check off. Default 1 ms.
	MinAttributedDelay time.Duration
	// MinAttributedShare: with the container's total run-queue wait known
	// (Container.RunqWait), revocable containers must also have caused at
	// least this fraction of it, and a threshold event counts only if they
	// held the CPU for at least this fraction of its wait (when measured).
	// A server that waits mostly behind its own threads, the host or the
	// kernel is not helped by slowing best-effort work down: at 400 wakeups
	// a second, revocable work preempted within microseconds adds up to a
	// millisecond per interval while being a few percent of the waiting.
	// Default 0.25.
	MinAttributedShare float64
	// EventWindow is the sliding window for EventCount. Default 250 ms.
	EventWindow time.Duration
	// DecreaseFactor multiplies the revocable subtree's CPU limit at each
	// decrease (0 < f < 1). Default 0.5.
	DecreaseFactor float64
	// DecreaseInterval is the minimum time between two decreases, long
	// enough for the previous one to show in the signals. The first decrease
	// after a calm spell is immediate. Default 500 ms.
	DecreaseInterval time.Duration
	// IncreaseStepCores and IncreaseStepFraction give the additive increase:
	// max(IncreaseStepCores, IncreaseStepFraction × node CPUs). Defaults 0.1
	// cores and 0.05.
	IncreaseStepCores, IncreaseStepFraction float64
	// CalmPeriod is how long every signal must stay below its Exit threshold
	// before the limit is raised; a violation within CalmPeriod of a raise
	// is a failed probe and undoes the raise. Default 3 s.
	CalmPeriod time.Duration
	// IncreaseInterval is the minimum time between two raises. Default 1 s.
	IncreaseInterval time.Duration
	// ProbeBackoff is how long the limit stays below a level that caused a
	// violation before it is tried again; it doubles after each failed probe
	// up to ProbeBackoffMax, and is forgotten when the guaranteed work's CPU
	// use falls by more than one increase step. Defaults 30 s and 5 min.
	ProbeBackoff, ProbeBackoffMax time.Duration
	// FloorCores and FloorFraction give the lowest limit:
	// max(FloorCores, FloorFraction × node CPUs). Defaults 0.1 cores and 0.02.
	FloorCores, FloorFraction float64
	// KillAfter is how long the subtree must sit at the floor with guaranteed
	// work still interfered with before a revocable container is killed.
	// Default 5 s.
	KillAfter time.Duration
	// KillCooldown is the minimum time between two kills. Default 2 s.
	KillCooldown time.Duration
	// ThrottlePeriod is the CFS period of the limits it sets (0: the
	// kernel's 100 ms). A throttled group waits for the next period once it
	// has used its quota; with 100 ms, best-effort work at 0.1 core runs 10
	// ms and stops 90 ms, and the bursts at each period's start are long
	// ones. Default 10 ms.
	ThrottlePeriod time.Duration
	// EffectWindow is how long after an episode's first decrease the
	// controller compares the delay revocable containers cause guaranteed
	// work since then with the delay just before it (eBPF attribution only).
	// Default 2 s.
	EffectWindow time.Duration
	// MinEffect is the fraction by which throttling must cut that delay to
	// stay; below it the episode is undone and revocable containers that
	// still cause delay are killed instead. Default 0.3.
	MinEffect float64
	// MinWaitGain is the fraction by which guaranteed and protected work's
	// whole run-queue wait (Container.RunqWait, or its run-queue p99 where
	// the wait is not measured) must fall over the last half EffectWindow,
	// against just before the episode, for a correction to stay, whatever
	// it did to the part revocable work causes: a correction that cut that
	// part while the waiting moved elsewhere, or after a passing violation,
	// costs best-effort work CPU for nothing, and is undone without killing
	// anything. Default 0.1.
	MinWaitGain float64
}

// CPUSetConfig configures the cpuset controller, which keeps revocable work
// off CPUs guaranteed work uses, one CPU at a time (Heracles's core
// controller). It shares InterferenceConfig's thresholds for violation and
// calm, and its EffectWindow and MinEffect.
type CPUSetConfig struct {
	// MinCPUs is the fewest CPUs revocable work keeps. Default 1.
	MinCPUs int
	// Headroom, when positive (at least 1), sizes revocable work's CPUs by
	// the guaranteed and protected work's CPU use without waiting for a
	// violation: ceil(use × Headroom) CPUs are kept free of it. 0 (the
	// default) confines only on violations; growing back never takes the
	// last CPU free of it while guaranteed work uses any.
	Headroom float64
	// ShrinkInterval is the minimum time between two CPUs taken away, long
	// enough to see the previous one's effect. Default 1 s.
	ShrinkInterval time.Duration
	// GrowAfter is how long every signal must stay calm before a CPU is
	// given back, and GrowInterval the minimum time between two. A
	// violation within GrowAfter of a CPU given back takes it back, and that
	// size is not tried again for ProbeBackoff (doubling up to
	// ProbeBackoffMax). Defaults 5 s, 5 s, 30 s and 5 min.
	GrowAfter, GrowInterval       time.Duration
	ProbeBackoff, ProbeBackoffMax time.Duration
}

// MemoryConfig configures the memory controller.
type MemoryConfig struct {
	// MinAvailableBytes and MinAvailableFraction: the node is short of memory
	// when MemAvailable < max(MinAvailableBytes, MinAvailableFraction ×
	// MemTotal). Defaults 256 MiB and 0.05.
	MinAvailableBytes    uint64
	MinAvailableFraction float64
	// ByteLineCap bounds MinAvailableBytes to ByteLineCap times
	// MinAvailableFraction of MemTotal where that fraction is positive, as
	// ReclaimConfig.ByteLineCap does the reclaim controller's lines
	// (default 1.5: 256 MiB becomes 115 MiB on a 1.5 GiB node, nodes of
	// 3.4 GiB or more are unchanged; 0: not bounded).
	ByteLineCap float64
	// PressureFullEnter is the memory.pressure full avg10 (percent) of a
	// guaranteed or protected container above which revocable memory is
	// reclaimed; 0 ignores it. Default 10.
	PressureFullEnter float64
	// PressureSomeEnter is the same for "some" avg10; 0 (the default) ignores it.
	PressureSomeEnter float64
	// KillCooldown is the minimum time between two kills for lack of
	// MemAvailable, which reacts within a sample. Default 1 s.
	KillCooldown time.Duration
	// PressureCooldown is the minimum time between two kills for memory
	// pressure: avg10 is a 10-second average and needs that long to show
	// that the previous kill helped. Default 10 s.
	PressureCooldown time.Duration
}

// NetworkConfig configures the network controller. Like the
// interference controller's, each signal enters violation above its Enter
// threshold and counts as calm only below its Exit threshold.
type NetworkConfig struct {
	// RTTFactor and RTTIncrease: a guaranteed or protected container's TCP
	// round trips are delayed when their p99 exceeds both RTTFactor times
	// its baseline and its baseline plus RTTIncrease; calm when below
	// either threshold halfway to the baseline. The baseline is the least
	// interval p99 seen over BaselineWindow: the container's own tail
	// without queueing (a server sending large responses has a long one).
	// Defaults 2, 1 ms and 30 s.
	RTTFactor      float64
	RTTIncrease    time.Duration
	BaselineWindow time.Duration
	// RTTLinkFloor: when the node's capacity is known, delayed round trips
	// and losses count only while the managed interfaces carry at least
	// this fraction of it. Below, the queue is not the node's link: the
	// host (a busy CPU delays acknowledgements just as well) or the path is
	// slow, and pacing revocable egress would not help. Default 0.8.
	RTTLinkFloor float64
	// Persistence is how many consecutive samples of a container must show
	// delayed round trips or losses before they count: one slow sample is
	// usually the host (a descheduled peer, a tail-loss probe), not the
	// link. Default 2.
	Persistence int
	// RetransmitFraction: a guaranteed or protected container whose
	// retransmitted segments over an interval exceed this fraction of its
	// packets sent (and at least MinRetransmits) suffers losses; 0 ignores
	// retransmissions. Defaults 0.01 and 3.
	RetransmitFraction float64
	MinRetransmits     uint64
	// SaturationEnter and SaturationExit: the link nears saturation when
	// the managed interfaces' egress exceeds SaturationEnter of the node's
	// capacity, and is calm below SaturationExit. Defaults 0.95 and 0.85.
	SaturationEnter, SaturationExit float64
	// MinRevocableMbps is the revocable egress (Mbit/s) below which there
	// is no revocable traffic to blame. Default 1.
	MinRevocableMbps float64
	// DecreaseFactor multiplies the revocable pace at each decrease (0 < f
	// < 1), at most every DecreaseInterval: a cut shows in the link's
	// throughput within one sampling interval of the link (100 ms), so
	// several steps fit in one monitor interval. Defaults 0.7 and 200 ms.
	DecreaseFactor   float64
	DecreaseInterval time.Duration
	// IncreaseStepFraction of the capacity (of the estimate when the
	// capacity is unknown) is added to the pace at each raise, once every
	// signal has been calm for CalmPeriod, at most every
	// IncreaseInterval. Defaults 0.05, 2 s and 500 ms.
	IncreaseStepFraction         float64
	CalmPeriod, IncreaseInterval time.Duration
	// FloorFraction of the capacity (at least 1 Mbit/s) is the lowest
	// pace: revocable tasks are slowed down, never cut off. Default 0.01.
	FloorFraction float64
	// PlateauFraction and PlateauHold: for PlateauHold after a decrease,
	// raises stop at PlateauFraction of the pace at which guaranteed
	// traffic was delayed; 0 PlateauHold raises up to the estimate at
	// once. Defaults 0.85 and 30 s.
	PlateauFraction float64
	PlateauHold     time.Duration
}

// LoadConfig configures the load controller (Mesos's LoadQoSController). A
// threshold of 0 is not checked; at least one must be set.
type LoadConfig struct {
	// Threshold5Min is load_threshold_5min: the 5-minute load average above
	// which every revocable container is killed.
	Threshold5Min float64
	// Threshold15Min is load_threshold_15min.
	Threshold15Min float64
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Interference: InterferenceConfig{
			RunqP99Enter:         time.Millisecond,
			RunqP99Exit:          500 * time.Microsecond,
			CPUPressureEnter:     25,
			CPUPressureExit:      10,
			MinAttributedDelay:   time.Millisecond,
			MinAttributedShare:   0.25,
			EventLatency:         time.Millisecond,
			EventCount:           5,
			EventWindow:          250 * time.Millisecond,
			DecreaseFactor:       0.5,
			DecreaseInterval:     500 * time.Millisecond,
			IncreaseStepCores:    0.1,
			IncreaseStepFraction: 0.05,
			CalmPeriod:           3 * time.Second,
			IncreaseInterval:     time.Second,
			ProbeBackoff:         30 * time.Second,
			ProbeBackoffMax:      5 * time.Minute,
			FloorCores:           0.1,
			FloorFraction:        0.02,
			KillAfter:            5 * time.Second,
			KillCooldown:         2 * time.Second,
			ThrottlePeriod:       10 * time.Millisecond,
			EffectWindow:         2 * time.Second,
			MinEffect:            0.3,
			MinWaitGain:          0.1,
		},
		CPUSet: CPUSetConfig{
			MinCPUs:         1,
			Headroom:        0,
			ShrinkInterval:  time.Second,
			GrowAfter:       5 * time.Second,
			GrowInterval:    5 * time.Second,
			ProbeBackoff:    30 * time.Second,
			ProbeBackoffMax: 5 * time.Minute,
		},
		Reclaim: DefaultReclaimConfig(),
		DiskIO:  DefaultDiskIOConfig(),
		Memory: MemoryConfig{
			MinAvailableBytes:    256 << 20,
			MinAvailableFraction: 0.05,
			ByteLineCap:          1.5,
			PressureFullEnter:    10,
			KillCooldown:         time.Second,
			PressureCooldown:     10 * time.Second,
		},
		Network: NetworkConfig{
			RTTFactor:            2,
			RTTLinkFloor:         0.8,
			Persistence:          2,
			RTTIncrease:          time.Millisecond,
			BaselineWindow:       30 * time.Second,
			RetransmitFraction:   0.01,
			MinRetransmits:       3,
			SaturationEnter:      0.95,
			SaturationExit:       0.85,
			MinRevocableMbps:     1,
			DecreaseFactor:       0.7,
			DecreaseInterval:     200 * time.Millisecond,
			IncreaseStepFraction: 0.05,
			CalmPeriod:           2 * time.Second,
			IncreaseInterval:     500 * time.Millisecond,
			FloorFraction:        0.01,
			PlateauFraction:      0.85,
			PlateauHold:          30 * time.Second,
		},
		KillRetry: 10 * time.Second,
	}
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid qos config")

// Validate reports every nonsensical value, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			bad("%s must be positive, got %v", name, d)
		}
	}
	percent := func(name string, p float64) {
		if p < 0 || p > 100 {
			bad("%s must be a percentage in [0, 100], got %v", name, p)
		}
	}
	fraction := func(name string, f float64) {
		if f < 0 || f >= 1 {
			bad("%s must be in [0, 1), got %v", name, f)
		}
	}

	i := c.Interference
	positive("interference run-queue p99 exit", i.RunqP99Exit)
	if i.RunqP99Enter < i.RunqP99Exit {
		bad("interference run-queue p99 enter (%v) must not be below exit (%v)", i.RunqP99Enter, i.RunqP99Exit)
	}
	percent("interference cpu pressure enter", i.CPUPressureEnter)
	percent("interference cpu pressure exit", i.CPUPressureExit)
	if i.CPUPressureEnter > 0 && i.CPUPressureEnter < i.CPUPressureExit {
		bad("interference cpu pressure enter (%v) must not be below exit (%v)", i.CPUPressureEnter, i.CPUPressureExit)
	}
	if i.EventCount < 0 {
		bad("interference event count must not be negative, got %d", i.EventCount)
	}
	if i.EventCount > 0 {
		positive("interference event latency", i.EventLatency)
		positive("interference event window", i.EventWindow)
	}
	if !(i.DecreaseFactor > 0 && i.DecreaseFactor < 1) {
		bad("interference decrease factor must be in (0, 1), got %v", i.DecreaseFactor)
	}
	positive("interference decrease interval", i.DecreaseInterval)
	if i.IncreaseStepCores < 0 || i.IncreaseStepFraction < 0 || i.IncreaseStepCores+i.IncreaseStepFraction <= 0 {
		bad("interference increase step must be positive (cores %v, fraction %v)", i.IncreaseStepCores, i.IncreaseStepFraction)
	}
	fraction("interference increase step fraction", i.IncreaseStepFraction)
	positive("interference calm period", i.CalmPeriod)
	positive("interference increase interval", i.IncreaseInterval)
	positive("interference probe backoff", i.ProbeBackoff)
	if i.ProbeBackoffMax < i.ProbeBackoff {
		bad("interference probe backoff max (%v) must not be below probe backoff (%v)", i.ProbeBackoffMax, i.ProbeBackoff)
	}
	if i.FloorCores < 0 || i.FloorFraction < 0 || i.FloorCores+i.FloorFraction <= 0 {
		bad("interference floor must be positive (cores %v, fraction %v): a zero CPU limit would stop revocable work without killing it", i.FloorCores, i.FloorFraction)
	}
	fraction("interference floor fraction", i.FloorFraction)
	positive("interference kill after", i.KillAfter)
	positive("interference kill cooldown", i.KillCooldown)
	if i.ThrottlePeriod != 0 && (i.ThrottlePeriod < time.Millisecond || i.ThrottlePeriod > time.Second) {
		bad("interference throttle period must be 0 (the kernel's default) or within [1ms, 1s], got %v", i.ThrottlePeriod)
	}
	positive("interference effect window", i.EffectWindow)
	fraction("interference min effect", i.MinEffect)
	fraction("interference min wait gain", i.MinWaitGain)
	if i.MinAttributedShare < 0 || i.MinAttributedShare > 1 {
		bad("interference min attributed share must be in [0, 1], got %v", i.MinAttributedShare)
	}

	cs := c.CPUSet
	if cs.MinCPUs < 1 {
		bad("cpuset min cpus must be at least 1 (revocable work is never left without a CPU), got %d", cs.MinCPUs)
	}
	if cs.Headroom != 0 && cs.Headroom < 1 {
		bad("cpuset headroom must be 0 (no sizing) or at least 1, got %v", cs.Headroom)
	}
	positive("cpuset shrink interval", cs.ShrinkInterval)
	positive("cpuset grow after", cs.GrowAfter)
	positive("cpuset grow interval", cs.GrowInterval)
	positive("cpuset probe backoff", cs.ProbeBackoff)
	if cs.ProbeBackoffMax < cs.ProbeBackoff {
		bad("cpuset probe backoff max (%v) must not be below probe backoff (%v)", cs.ProbeBackoffMax, cs.ProbeBackoff)
	}

	m := c.Memory
	fraction("memory min available fraction", m.MinAvailableFraction)
	if m.ByteLineCap < 0 || (m.ByteLineCap > 0 && m.ByteLineCap < 1) {
		bad("memory byte line cap must be 0 or at least 1, got %v", m.ByteLineCap)
	}
	percent("memory pressure full enter", m.PressureFullEnter)
	percent("memory pressure some enter", m.PressureSomeEnter)
	positive("memory kill cooldown", m.KillCooldown)
	positive("memory pressure cooldown", m.PressureCooldown)

	n := c.Network
	if !(n.RTTFactor >= 1) {
		bad("network rtt factor must be at least 1, got %v", n.RTTFactor)
	}
	if n.RTTIncrease < 0 {
		bad("network rtt increase must not be negative, got %v", n.RTTIncrease)
	}
	positive("network baseline window", n.BaselineWindow)
	if n.Persistence < 1 {
		bad("network persistence must be at least 1 sample, got %d", n.Persistence)
	}
	if n.RTTLinkFloor < 0 || n.RTTLinkFloor > 1 {
		bad("network rtt link floor must be in [0, 1], got %v", n.RTTLinkFloor)
	}
	fraction("network retransmit fraction", n.RetransmitFraction)
	if !(n.SaturationExit > 0 && n.SaturationExit <= n.SaturationEnter && n.SaturationEnter <= 1) {
		bad("network saturation thresholds must satisfy 0 < exit (%v) <= enter (%v) <= 1", n.SaturationExit, n.SaturationEnter)
	}
	if n.MinRevocableMbps < 0 {
		bad("network min revocable egress must not be negative, got %v", n.MinRevocableMbps)
	}
	if !(n.DecreaseFactor > 0 && n.DecreaseFactor < 1) {
		bad("network decrease factor must be in (0, 1), got %v", n.DecreaseFactor)
	}
	positive("network decrease interval", n.DecreaseInterval)
	if !(n.IncreaseStepFraction > 0 && n.IncreaseStepFraction < 1) {
		bad("network increase step fraction must be in (0, 1), got %v", n.IncreaseStepFraction)
	}
	positive("network calm period", n.CalmPeriod)
	positive("network increase interval", n.IncreaseInterval)
	fraction("network floor fraction", n.FloorFraction)
	if n.PlateauHold < 0 || (n.PlateauHold > 0 && !(n.PlateauFraction > 0 && n.PlateauFraction <= 1)) {
		bad("network plateau needs a hold >= 0 (got %v) and, when held, a fraction in (0, 1] (got %v)", n.PlateauHold, n.PlateauFraction)
	}

	if c.Load.Threshold5Min < 0 || c.Load.Threshold15Min < 0 {
		bad("load thresholds must not be negative (5min %v, 15min %v)", c.Load.Threshold5Min, c.Load.Threshold15Min)
	}
	positive("kill retry", c.KillRetry)
	// Their errors wrap ErrInvalidConfig too, as Validate says.
	if err := c.Reclaim.validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if err := c.DiskIO.validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	return errors.Join(errs...)
}
