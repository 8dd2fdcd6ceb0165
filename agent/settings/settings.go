// Package settings is the agent's estimator and QoS settings (#29): the
// flags that shadow candidates and fleet profiles may set, their defaults,
// parsers and validation, and the one place that builds an estimator and
// QoS controllers from them. agent.Options embeds Settings, so the flags
// an agent takes and the settings a profile carries are declared once,
// here.
//
// It is its own package so that the coordinator validates a profile with
// the agent's own code (ValidateProfile) without linking the agent: its
// containerizer, image store, eBPF programs and network code. It imports
// only estimator, qos, resources and internal/cliconfig.
//
// Errors name the flag (and the profile or file and the key, where the
// settings came as a map).
package settings

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

// Settings are the agent's estimator and QoS settings: one field per
// flag AddFlags declares. Start from Default (or AddFlags): the zero
// Settings is not valid.
type Settings struct {
	// Estimator names the oversubscription estimator (--estimator),
	// configured by EstimatorConfig (--estimator-*, --fixed-revocable,
	// --oversubscribe-memory).
	Estimator       string
	EstimatorConfig estimator.Config
	// QoSControllers name the QoS controllers in order (--qos-controller),
	// configured by QoS (--qos-*). QoSConfig derives the exit thresholds
	// from the enter ones (RunqP99Exit is half of RunqP99Enter,
	// CPUPressureExit 40% of CPUPressureEnter; SaturationExit 0.1 below
	// SaturationEnter) and the memory floor from QoSMemoryMinAvailableMiB
	// (--qos-memory-min-available; 0: the controller's default).
	QoSControllers           []string
	QoS                      qos.Config
	QoSMemoryMinAvailableMiB float64
	// Memory and disk I/O QoS (#28): QoSReclaimLowAvailableMiB is the
	// MemAvailable below which the reclaim controller starts reclaiming
	// revocable memory (--qos-reclaim-low-available; 0: max(512 MiB, 10%
	// of memory), the 512 MiB at most 15% of memory: on small nodes the
	// line scales with their memory).
	QoSReclaimLowAvailableMiB float64
	// QoSDiskRateMiB is the sandbox disk's rate as the operator knows it,
	// MiB/s (--qos-diskio-disk-rate; 0: unknown, learned): the diskio
	// controller's DiskBytesPerSecond.
	QoSDiskRateMiB float64
}

// Default returns the defaults of every setting: those of the flags
// AddFlags declares.
func Default() Settings {
	var s Settings
	s.AddFlags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return s
}

// AddFlags declares one flag per setting on fs, bound to s's fields and
// setting them to their defaults. Every flag it declares is a setting
// (Flags); the agent's other --estimator* and --qos-* flags (the loops'
// intervals) are declared by agent.Options.AddFlags.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Estimator, "estimator", estimator.DefaultName, "oversubscription estimator: "+strings.Join(estimator.Names(), ", "))
	s.EstimatorConfig = estimator.DefaultConfig()
	est := &s.EstimatorConfig
	fs.Var(cliconfig.Parsed(&est.Fixed, resources.Parse, resources.Resources.String), "fixed-revocable", `resources the "fixed" estimator reports, e.g. "cpus:2;bandwidth:500" (with network QoS, revocable egress is paced to its bandwidth: 1% of the link without)`)
	fs.BoolVar(&est.Memory, "oversubscribe-memory", est.Memory, "estimate memory slack too, from guaranteed tasks' working sets (--oversubscribe-memory=false: offer no revocable mem)")
	fs.DurationVar(&est.Window, "estimator-window", est.Window, "how far back the usage estimators look for peaks (shorter: slack is offered sooner after usage drops, with less safety)")
	fs.Float64Var(&est.Percentile, "estimator-percentile", est.Percentile, "percentile of CPU samples in the window taken as a container's peak")
	fs.DurationVar(&est.PeakHalfLife, "estimator-peak-half-life", est.PeakHalfLife, "half-life of the decaying peak hold")
	fs.DurationVar(&est.Fast.Confirm, "estimator-confirm", est.Fast.Confirm, "fast: how long slack must last before it is offered (a rise shrinks the estimate at once)")
	fs.Float64Var(&est.Fast.Margin, "estimator-safety-margin", est.Fast.Margin, "fast: fraction of each guaranteed CPU allocation never offered")
	fs.DurationVar(&est.Fast.ReclaimTime, "estimator-reclaim-time", est.Fast.ReclaimTime, "fast: how long QoS takes to take CPU back; recurring bursts due within it are held back in advance")
	// Estimator calibration (#29).
	fs.Float64Var(&est.Calibration.TargetViolation, "estimator-target-violation", est.Calibration.TargetViolation, "calibrated: long-run share of estimates that may exceed the slack really there (adaptive conformal inference keeps the rate at it)")
	fs.Float64Var(&est.Calibration.Gamma, "estimator-calibration-step", est.Calibration.Gamma, "calibrated: step of the calibration (larger: adapts faster to a new kind of load, with a noisier margin)")
	fs.DurationVar(&est.Calibration.Confirm, "estimator-calibrated-confirm", est.Calibration.Confirm, "calibrated: how long slack must last before it is offered (the calibration carries the risk that fast's 1 s carried)")
	fs.DurationVar(&est.RiseInterval, "estimator-rise-interval", est.RiseInterval, "calibrated: least time between two rises of the estimate sent to the coordinator (shrinks, and rises the estimator takes as lasting, go at once; 0: every rise)")

	s.QoSControllers = qos.ParseNames(qos.DefaultControllers)
	fs.Var(cliconfig.Parsed(&s.QoSControllers, func(v string) ([]string, error) { return qos.ParseNames(v), nil }, joinList), "qos-controller", "QoS controllers, comma separated: "+strings.Join(qos.Names(), ", "))
	s.QoS = qos.DefaultConfig()
	in, nw := &s.QoS.Interference, &s.QoS.Network
	fs.DurationVar(&in.RunqP99Enter, "qos-runqueue-p99", in.RunqP99Enter, "interference: guaranteed run-queue p99 above this throttles revocable work (calm below half of it)")
	fs.Float64Var(&in.CPUPressureEnter, "qos-cpu-pressure", in.CPUPressureEnter, "interference: guaranteed cgroup cpu.pressure some avg10 (percent) above this throttles revocable work (calm below 40% of it; 0: ignore CPU pressure)")
	fs.IntVar(&in.EventCount, "qos-event-count", in.EventCount, "interference: with eBPF, this many guaranteed wakeups waiting over 1ms within 250ms throttle revocable work (0: ignore them)")
	fs.DurationVar(&in.MinAttributedDelay, "qos-min-attributed-delay", in.MinAttributedDelay, "interference: with eBPF, act only on latency that revocable tasks caused at least this much of per interval (0: act on any)")
	fs.DurationVar(&in.KillAfter, "qos-kill-after", in.KillAfter, "interference: kill revocable work after this long throttled to the floor without relief")
	fs.DurationVar(&in.ThrottlePeriod, "qos-throttle-period", in.ThrottlePeriod, "interference: CFS period of the revocable subtree's CPU limit (0: the kernel's 100ms); shorter periods make throttled spells shorter")
	fs.DurationVar(&in.EffectWindow, "qos-effect-window", in.EffectWindow, "interference, cpuset: with eBPF, how long after a correction its effect on the delay revocable work causes is judged (corrections that did not help are undone)")
	fs.Float64Var(&in.MinWaitGain, "qos-min-wait-gain", in.MinWaitGain, "interference, cpuset: with eBPF, a correction is kept only if guaranteed work's whole run-queue wait fell by this fraction (else undone and backed off)")
	fs.DurationVar(&nw.RTTIncrease, "qos-network-rtt-increase", nw.RTTIncrease, "network: guaranteed TCP round-trip p99 this far above its baseline (and 3x it) slows revocable egress down")
	fs.Float64Var(&nw.SaturationEnter, "qos-network-saturation", nw.SaturationEnter, "network: fraction of the bandwidth resource at which the link counts as saturated (calm 0.1 below)")
	fs.Float64Var(&s.QoSMemoryMinAvailableMiB, "qos-memory-min-available", 0, "memory: kill revocable work when MemAvailable falls below this many MiB (0: max(256 MiB, 5% of memory), the 256 MiB at most 7.5% of memory); reclaim: freeze it at once below it (0: the same, the 256 MiB at most 7.5% of memory)")
	// Jobs (#26): the memory controller's pace between kills, so that a
	// test (or an operator) can let it kill once and then watch.
	fs.DurationVar(&s.QoS.Memory.KillCooldown, "qos-memory-kill-cooldown", s.QoS.Memory.KillCooldown, "memory: least time between two kills for lack of memory")
	fs.Float64Var(&s.QoSReclaimLowAvailableMiB, "qos-reclaim-low-available", 0, "reclaim: reclaim revocable memory (memory.high), then freeze, then kill it while MemAvailable stays below this many MiB (0: max(512 MiB, 10% of memory), the 512 MiB at most 15% of memory)")
	// Disk I/O QoS (#28): the diskio controller's signal and pace.
	dio := &s.QoS.DiskIO
	fs.DurationVar(&dio.SyncP99Enter, "qos-diskio-sync-p99", dio.SyncP99Enter, "diskio: a guaranteed task's fsync p99 (eBPF, ext4) above this over an interval halves the revocable disk I/O cap (calm below half; 0: ignore fsync latency)")
	fs.Float64Var(&dio.SyncRatioEnter, "qos-diskio-sync-ratio", dio.SyncRatioEnter, "diskio: a guaranteed task's fsync p99 above this many times its p99 while revocable work wrote nothing (and at least --qos-diskio-sync-p99-min) halves the revocable disk I/O cap (0: absolute threshold only)")
	fs.DurationVar(&dio.SyncP99Min, "qos-diskio-sync-p99-min", dio.SyncP99Min, "diskio: the relative fsync threshold (--qos-diskio-sync-ratio) is never below this")
	fs.Uint64Var(&dio.MinSyncs, "qos-diskio-min-syncs", dio.MinSyncs, "diskio: fewest fsyncs of a guaranteed task in a monitor interval whose p99 counts (fewer make it their maximum)")
	fs.DurationVar(&dio.BlockP99Enter, "qos-diskio-block-p99", dio.BlockP99Enter, "diskio: a guaranteed task's own block requests' p99 latency (eBPF, submission to completion) above this over an interval halves the revocable disk I/O cap (calm below half; 0: ignore)")
	fs.Uint64Var(&dio.MinBlockIOs, "qos-diskio-min-block-ios", dio.MinBlockIOs, "diskio: fewest block requests of a guaranteed task in a monitor interval whose p99 counts")
	fs.DurationVar(&dio.StallEnter, "qos-diskio-stall", dio.StallEnter, "diskio: a guaranteed task's fsync or block request p99 above this over an interval, however few completed, sends the revocable disk I/O cap to its floor at once (0: off)")
	fs.DurationVar(&dio.DecreaseInterval, "qos-diskio-decrease-interval", dio.DecreaseInterval, "diskio: shortest time between two halvings of the revocable disk I/O cap")
	fs.DurationVar(&dio.CalmPeriod, "qos-diskio-calm-period", dio.CalmPeriod, "diskio: guaranteed I/O calm this long before the revocable disk I/O cap rises")
	fs.Uint64Var(&dio.RequestKiB, "qos-diskio-request-kib", dio.RequestKiB, "diskio: while revocable disk I/O is capped, the sandbox disk's largest request (queue/max_sectors_kb) is lowered to this many KiB, so that a guaranteed fsync waits behind one short revocable command; the device's own size comes back with the cap's removal (0: leave it alone)")
	fs.Float64Var(&dio.FloorFraction, "qos-diskio-floor-fraction", dio.FloorFraction, "diskio: the revocable disk I/O cap is never lowered below this fraction of the disk's rate (--qos-diskio-disk-rate, else the highest rate revocable I/O reached) (its share of the disk; 0: a 1 MiB/s trickle)")
	fs.Float64Var(&dio.GuardedStartFraction, "qos-diskio-start-fraction", dio.GuardedStartFraction, "diskio: on a node whose guaranteed tasks do disk I/O (fsyncs or block requests, eBPF, within --qos-diskio-guarded-window), revocable disk I/O starts capped at this fraction of the disk's rate (--qos-diskio-disk-rate, else the highest rate revocable I/O reached, else 256 MiB/s), at least the floor, before any latency signal, and rises only while guaranteed I/O stays calm (0: revocable I/O starts uncapped)")
	fs.DurationVar(&dio.GuardedIOWindow, "qos-diskio-guarded-window", dio.GuardedIOWindow, "diskio: how long after a guaranteed task's last fsync or block request revocable disk I/O still starts capped and its cap stays on (at most the disk's rate)")
	fs.Float64Var(&dio.IncreaseUseFraction, "qos-diskio-increase-use", dio.IncreaseUseFraction, "diskio: the revocable disk I/O cap rises only after revocable I/O used at least this fraction of it (a cap that nothing tested is not raised; 0: off)")
	fs.Float64Var(&s.QoSDiskRateMiB, "qos-diskio-disk-rate", 0, "diskio: the sandbox disk's rate in MiB/s, as the operator knows it, from which the start cap, the floor and the cap's steps are taken (0: the highest rate revocable I/O reached, once seen)")
	fs.Float64Var(&s.QoS.Load.Threshold5Min, "qos-load-threshold-5min", 0, "load: 5-minute load average above which revocable work is killed (Mesos load_threshold_5min)")
	fs.Float64Var(&s.QoS.Load.Threshold15Min, "qos-load-threshold-15min", 0, "load: 15-minute load average threshold (Mesos load_threshold_15min)")
}

// Flags lists the flags AddFlags declares (the settings), sorted.
func Flags() []string {
	var names []string
	fs := flag.NewFlagSet("settings", flag.ContinueOnError)
	new(Settings).AddFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// ProfileFlags are the flags a node profile may set: every setting but
// --qos-controller. The agent swaps their settings in place, by building
// a new estimator and QoS controller set; the QoS controllers themselves
// are wiring (a controller that needs a subsystem the agent did not start
// cannot join later).
var ProfileFlags = profileFlags()

func profileFlags() []string {
	var out []string
	for _, f := range Flags() {
		if f != "qos-controller" {
			out = append(out, f)
		}
	}
	return out
}

// IsProfileFlag tells whether a node profile may set the flag name
// (without dashes).
func IsProfileFlag(name string) bool { return slices.Contains(ProfileFlags, name) }

// ProfileRefusal is the error for a profile that sets flag, an agent flag
// that is no ProfileFlag.
func ProfileRefusal(flag string) error {
	return fmt.Errorf("--%s cannot be applied without restarting the agent (a profile may set the estimator and QoS settings but --qos-controller)", flag)
}

// cpuPressureExitRatio derives the interference controller's calm CPU
// pressure from its enter threshold (qos.DefaultConfig: 10 of 25).
const cpuPressureExitRatio = 0.4

// QoSConfig is QoS with the thresholds derived from the enter ones and
// the memory floors.
func (s Settings) QoSConfig() qos.Config {
	c := s.QoS
	c.Interference.RunqP99Exit = c.Interference.RunqP99Enter / 2
	c.Interference.CPUPressureExit = c.Interference.CPUPressureEnter * cpuPressureExitRatio
	c.Network.SaturationExit = max(c.Network.SaturationEnter-0.1, c.Network.SaturationEnter/2)
	if s.QoSMemoryMinAvailableMiB > 0 {
		c.Memory.MinAvailableBytes, c.Memory.MinAvailableFraction = uint64(s.QoSMemoryMinAvailableMiB*(1<<20)), 0
		c.Reclaim.CriticalAvailableBytes, c.Reclaim.CriticalAvailableFraction = c.Memory.MinAvailableBytes, 0
	}
	if s.QoSReclaimLowAvailableMiB > 0 {
		c.Reclaim.LowAvailableBytes, c.Reclaim.LowAvailableFraction = uint64(s.QoSReclaimLowAvailableMiB*(1<<20)), 0
	}
	c.DiskIO.DiskBytesPerSecond = s.QoSDiskRateMiB * (1 << 20)
	return c
}

// Validate checks the settings; each error names its flag.
func (s Settings) Validate() error {
	var errs []error
	check := func(ok bool, flag, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flag}, args...)...))
		}
	}
	check(s.QoSMemoryMinAvailableMiB >= 0, "qos-memory-min-available", "must not be negative, got %v", s.QoSMemoryMinAvailableMiB)
	check(s.QoSReclaimLowAvailableMiB >= 0, "qos-reclaim-low-available", "must not be negative, got %v", s.QoSReclaimLowAvailableMiB)
	check(s.QoSDiskRateMiB >= 0, "qos-diskio-disk-rate", "must not be negative, got %v", s.QoSDiskRateMiB)
	if _, err := s.NewControllers(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Controllers are an estimator and QoS controllers built from Settings.
type Controllers struct {
	// Estimator is named EstimatorName (--estimator).
	Estimator     estimator.Estimator
	EstimatorName string
	// QoS evaluates the controllers QoSNames (--qos-controller) in order.
	QoS      qos.Controller
	QoSNames []string
}

// NewControllers builds a fresh estimator and QoS controller set from s:
// the one place that does, for the agent's Build and Validate, shadows and
// profiles. Errors name the flags.
func (s Settings) NewControllers() (Controllers, error) {
	est, estErr := estimator.New(s.Estimator, s.EstimatorConfig)
	if estErr != nil {
		estErr = fmt.Errorf("--estimator %s (and --estimator-*, --fixed-revocable): %w", s.Estimator, estErr)
	}
	set, qosErr := qos.NewSet(s.QoSControllers, s.QoSConfig())
	if qosErr != nil {
		qosErr = fmt.Errorf("--qos-controller %s (and --qos-*): %w", strings.Join(s.QoSControllers, ","), qosErr)
	}
	if err := errors.Join(estErr, qosErr); err != nil {
		return Controllers{}, err
	}
	return Controllers{Estimator: est, EstimatorName: s.Estimator, QoS: set, QoSNames: slices.Clone(s.QoSControllers)}, nil
}

// ValidateProfile checks a node profile's settings as the coordinator
// does before it accepts them: a YAML or JSON mapping of flag names to
// values (the --config format, each value through its flag's own parser)
// over the defaults, restricted to ProfileFlags (--qos-controller is
// refused with ProfileRefusal; any other key is no setting) and checked by
// Validate. name names the profile in errors. An agent applies the same
// settings over its own flags and validates them again
// (agent.ParseProfile) before it applies them.
func ValidateProfile(name, data string) error {
	source := "profile " + name
	var s Settings
	fs := flag.NewFlagSet(source, flag.ContinueOnError)
	s.AddFlags(fs)
	restricted := flag.NewFlagSet(source, flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if IsProfileFlag(f.Name) {
			restricted.Var(f.Value, f.Name, f.Usage)
		} else {
			restricted.Var(refused{ProfileRefusal(f.Name)}, f.Name, f.Usage)
		}
	})
	if err := cliconfig.Apply(restricted, source, []byte(data)); err != nil {
		return fmt.Errorf("%w\n(%s)", err, profileHint)
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	return nil
}

// profileHint follows a profile's refused keys: the agent's other flags
// are keys of the same files, but no settings.
const profileHint = "a profile may set only --estimator, --fixed-revocable, --oversubscribe-memory and the --estimator-* and --qos-* flags but --qos-controller and --qos-correction-interval-min; the agent's other flags need a restart"

// refused is the flag.Value of a flag a settings map may not set:
// setting it is the error why.
type refused struct{ why error }

func (r refused) String() string { return "" }

func (r refused) Set(string) error { return r.why }

func joinList(l []string) string { return strings.Join(l, ",") }
