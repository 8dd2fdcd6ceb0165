// Package shadow runs candidate estimator and QoS settings beside the
// active ones on the same inputs, and scores what each would have offered
// and corrected, without any of it reaching the coordinator or a cgroup.
//
// An agent started with --shadow NAME=FILE (at most [MaxShadows]) builds
// one [Shadow] per candidate from a copy of its own settings with the
// file's estimator and QoS keys applied (agent.Options.WithSettings,
// validated as the flags are). Its estimate loop passes every
// estimator.Input it builds for the active estimator to each shadow's
// [Shadow.Estimate] after the active estimate is made, and its QoS loop
// every qos.Input to [Shadow.Evaluate] after the active controllers'
// corrections are applied. A shadow's estimates and corrections are
// counted and dropped: they never change what is offered or corrected.
// The agent scores its active estimator with a [Scorer] too (reported as
// [ActiveName]), so the numbers can be compared.
//
// # What is scored
//
// [Scorer] applies the backtest's definition (estimator/backtest.Result)
// to the samples the estimator is given, one sample time at a time: at a
// sample time t, the real slack is
//
//	ideal_t   = max(0, min(Σ alloc, Total) − Σ usage_t)
//
// over the guaranteed containers and protected services that have a
// sample at t (Total only when the input has cpus), offered_t is the latest
// estimate made strictly before t, and t is a violation when
// offered_t − ideal_t > Tolerance (0.05 cores). Samples before the first
// estimate are not scored. A sample time is scored once every member that
// has samples has one at or after it, so a monitor pass seen half-way
// is scored when complete. Harvest is Σ offered / Σ ideal over the scored
// samples, SafeHarvest Σ min(offered, ideal) / Σ ideal, ViolationRate the
// share of scored samples that are violations: fed the inputs a backtest
// replay builds, a Scorer's [Report] equals the replay's
// backtest.Result to the last bit (TestShadowEqualsReplay), and on the
// agent it is the same replay run on live samples. The backtest's time to
// offer, which needs the whole series, is not computed.
//
// A QoS shadow counts its corrections by kind; corrections per hour are
// over the logical time from its first to its latest evaluation. A shadow
// QoS controller sees the limits the active controllers applied
// (qos.Input.RevocableLimit and the samples they shaped), not its own: it
// says what it would have done from the live state, not what the node
// would have become under it.
//
// # Bounds
//
// At most [MaxShadows] shadows per agent. A Scorer keeps the last
// [MaxEstimates] estimates (to score late samples against the estimate in
// force at their time) and the last scored sample time; a sample older
// than every kept estimate is counted in Report.Unscored and not scored.
// Metrics carry a shadow label with at most MaxShadows+1 values.
//
// # Lifecycle and ownership
//
// Pure: no I/O, goroutines or clock; time is the inputs' Now and sample
// times. A Shadow's Estimate and Evaluate may be called from two
// goroutines (the agent's estimate and QoS loops): each half has its own
// lock, and Report takes both. Nothing of an input is kept.
package shadow
