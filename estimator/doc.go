// Package estimator decides how much of an agent's resources can be
// oversubscribed: offered to frameworks as revocable resources because the
// guaranteed containers they are allocated to are not using them.
//
// It is Slackline's counterpart of Mesos's ResourceEstimator. The agent's
// estimate loop calls [Estimator.Estimate] every
// --oversubscribed-resources-interval with the usage history its monitor
// collected, and sends the result to the coordinator when it changes.
//
// # What the number means
//
// An estimate is the agent's TOTAL revocable capacity: the amount of cpus
// (and, when enabled, mem) that revocable containers may hold on this agent
// altogether, INCLUDING what revocable tasks already hold. The coordinator
// subtracts the revocable resources it has allocated on the agent to find
// what it may still offer; when the estimate falls below what is allocated,
// it offers nothing more and rescinds outstanding revocable offers (the QoS
// controller, not the estimator, decides whether running revocable tasks
// must be throttled or killed). This is Mesos's meaning ("the total amount
// of oversubscribed resources that are allocated and available").
//
// Concretely, for cpus:
//
//	estimate = max(0, min(Σ alloc − Σ need, Total − Σ need))
//	need     = predicted peak + Margin × alloc            (MinSamples reached)
//	         = alloc                                       (not yet)
//
// where the sums run over the guaranteed (non-revocable) containers and the
// --protect-cgroup services, and the Total term applies when Input.Total
// has cpus. Revocable containers do not appear at all: their usage does not
// reduce the estimate (they are the ones squeezed when guaranteed work
// needs its allocation back, and counting them would make the estimate
// shrink as revocable tasks start, i.e. oscillate) and their allocations are
// not slack. A protected service's alloc is its configured reservation, or
// without one the peak of its usage in the window: it then adds roughly no
// slack of its own but its use still holds back the machine's headroom
// through the Total term. The estimate never exceeds the sum of those
// allocations, never exceeds Total, and is never negative. It holds cpus and, with Config.Memory, mem; never disk or
// ports.
//
// Sums are over the whole agent, not per container: a guaranteed container
// bursting above its allocation (cpu shares let it) uses CPU that revocable
// tasks would otherwise have had, so it eats the other containers' slack.
//
// # Estimators
//
// The estimators are registered by name in [Registry], the one place they
// are listed; [New] builds one from a [Config] (start from [DefaultConfig];
// fields out of range are errors wrapping [ErrInvalidConfig], unknown names
// [ErrUnknown]).
//
//   - noop: never oversubscribes (Mesos's noop).
//   - fixed: always Config.Fixed, whatever the usage (Mesos's fixed, its
//     amount from a flag); cpus and mem only.
//   - usage (the default): each guaranteed container and protected service
//     is predicted to need the larger of the Percentile-th percentile of its
//     CPU samples over Window (default the 99th over 60 s) and a decaying
//     peak hold (max over samples of cpu × 2^(−age/PeakHalfLife), default
//     10 s), plus Margin (10%) of its allocation. With Memory, mem is
//     predicted as the peak over the window plus MemoryMargin (25%) of the
//     allocation: memory cannot be taken back without killing, so no
//     percentile. A container with fewer than MinSamples samples in the
//     window is taken to need its whole allocation.
//   - predictive: usage with a prediction that looks ahead. It keeps the
//     per-second CPU peak of each guaranteed container for ten minutes and
//     looks for a period by autocorrelation (at least 4 s, seen three times,
//     correlation ≥ 0.6 and ≥ 0.3 lower at some shorter lag so that a level
//     shift or a trend is not read as a period). With a trusted period it
//     predicts the peak of the next seconds from the same phase of the last
//     three periods and the last two seconds, so a load that repeats leaves
//     its allocation to revocable tasks between its bursts and takes it back
//     shortly before each one. Without one, its prediction is exactly
//     usage's. It was chosen by the backtests below.
//
// Both usage and predictive publish through [Hysteresis]: a shrink is
// published at once (a band below the new safe value, so that noise does
// not shrink it again), a rise only when it exceeds two bands, and the band
// is max(0.1 cpu, 5%) and max(64 MiB, 5%). The published value is never
// above the safe one. The agent should send an estimate whenever it differs
// from the last one sent: hysteresis is already applied.
//
// # Lifecycle and ownership
//
// An estimator is built once per agent and called from one goroutine; it is
// not safe for concurrent use. It does no I/O, starts no goroutines and
// reads no clock: time is Input.Now. Estimate reads its Input and keeps no
// reference into it. usage keeps the last published estimate; predictive
// also keeps its per-container series (dropped when a container leaves).
// Their state is a function of the inputs seen: replaying the same inputs
// into a fresh estimator gives the same results, which is what makes the
// backtests exact. Samples may be repeated from call to call (the agent
// passes a sliding window); only samples newer than those seen are learned.
// The agent must keep at least Config.Window of history per container.
//
// # Adding an estimator
//
// Write a constructor with the [Factory] signature that validates the
// Config fields it uses, add it to [Registry] under its flag name, give it a
// row in the table tests (estimator_test.go) and replay it
// (slackline-backtest run). Keep it pure. Reuse slackOf for the arithmetic
// above so that the meaning of the number stays the same, and publish
// through Hysteresis.
//
// # Backtests
//
// Sub-package backtest replays recorded traces (testdata/*.csv, one
// guaranteed container each, recorded from real workloads in a cgroup of
// their own by `slackline-backtest record`; see testdata/README.md) through
// an estimator, one estimate per second from the samples before it, and
// scores each later sample j:
//
//	ideal_j    = max(0, Σ alloc − Σ usage_j)     the real slack at j
//	offered_j  = the estimate in force at j      made from samples before j
//	violation  offered_j − ideal_j > 0.05 cores  (revocable + guaranteed use
//	                                              would have exceeded the
//	                                              guaranteed allocation)
//	harvest    mean(offered) / mean(ideal); "safe": mean(min(offered, ideal)) / mean(ideal)
//
// Reproduce with `go run ./cmd/slackline-backtest run` (or
// `go test ./estimator -run TestCandidateTable -v` for the rejected
// candidates too, `go test ./estimator -bench Replay` for the benchmark).
// On the committed traces (mix: all four together, allocation 7.5 cpus):
//
//	scenario  estimator   ideal  offered  harvest  safe   violations  mean/max excess  changes/min
//	steady    usage       1.372  0.887    64.7%    64.7%  0.00%       -                2.4
//	steady    predictive  1.372  0.887    64.7%    64.7%  0.00%       -                2.4
//	bursty    usage       1.612  0.235    14.6%    14.5%  0.60%       0.311 / 0.624    4.8
//	bursty    predictive  1.612  0.235    14.6%    14.5%  0.60%       0.311 / 0.624    4.8
//	periodic  usage       1.631  0.621    38.1%    38.1%  0.27%       0.112 / 0.143    1.2
//	periodic  predictive  1.631  0.823    50.4%    50.4%  0.20%       0.087 / 0.108    6.4
//	step      usage       1.760  0.875    49.7%    49.5%  0.67%       0.586 / 0.762    4.8
//	step      predictive  1.760  0.875    49.7%    49.5%  0.67%       0.586 / 0.762    4.8
//	mix       usage       6.375  2.730    42.8%    42.8%  0.00%       -                8.5
//	mix       predictive  6.375  2.903    45.5%    45.5%  0.00%       -                12.9
//	mix       fixed 0.5   6.375  0.500     7.8%     7.8%  0.00%       -                0
//	bursty    fixed 0.5   1.612  0.500    31.0%    30.5%  1.74%       0.438 / 0.500    0
//
// predictive equals usage where there is no period (steady, bursty, step:
// the same estimates, sample for sample) and beats it where there is one:
// on periodic it offers a third more with fewer violations, and on mix
// 6% more with none. It costs churn: the estimate moves with each period
// (6.4 changes a minute instead of 1.2). The violations on step are the 1 s
// after the load step, before the next estimate: no estimator that reads
// the past avoids them; the QoS controller covers them. The rejected
// candidates (export_test.go), with the same margin and hysteresis:
//
//	scenario  candidate           safe harvest  violations
//	steady    mean-3sigma         59.2%         0.00%
//	steady    decaying-histogram  60.8%         0.00%
//	bursty    mean-3sigma         14.4%         0.27%
//	bursty    decaying-histogram  16.5%         0.60%
//	periodic  mean-3sigma         11.1%         0.00%
//	periodic  decaying-histogram  38.6%         0.27%
//	step      mean-3sigma         48.6%         0.67%
//	step      decaying-histogram  50.9%         0.67%
//	mix       mean-3sigma         33.8%         0.00%
//	mix       decaying-histogram  44.0%         0.00%
//
// mean + 3σ over-reserves whatever is not Gaussian (a square wave's σ is
// half its height); the decaying histogram moves harvest between traces (4
// points less on steady, 1-2 more on bursty and step, at the same violation
// rates) and cannot see the period. The prediction horizon
// (2 s: the estimate interval plus a second to rescind offers and throttle)
// and phase guard (1 s) were chosen on these traces among 1-3 s each; a
// shorter horizon harvests more but leaves no time to take resources back.
//
// Replay scope: cpus only (memory is not scored), one estimate per second,
// two minutes of history, 0.05 cores of tolerance, no Total cap.
package estimator
