// Package estimator decides how much of an agent's resources can be
// oversubscribed: offered to frameworks as revocable resources because the
// guaranteed containers they are allocated to are not using them.
//
// It is Slackline's counterpart of Mesos's ResourceEstimator. The agent's
// estimate loop calls [Estimator.Estimate] every
// --oversubscribed-resources-interval (100 ms) with the usage history its
// monitor collected (every --monitor-interval, 100 ms), and sends the result
// to the coordinator when it changes.
//
// # What the number means
//
// An estimate is the agent's TOTAL revocable capacity: the amount of cpus
// (and, when enabled, mem) that revocable containers may hold on this agent
// altogether, INCLUDING what revocable tasks already hold. The coordinator
// subtracts the revocable resources it has allocated on the agent to find
// what it may still offer; when the estimate falls below what is allocated,
// it offers nothing more and rescinds the fewest outstanding revocable
// offers that bring the rest back within the estimate (the QoS controller,
// not the estimator, decides whether running revocable tasks must be
// throttled or killed). An estimate that grows rescinds nothing: the growth
// is offered on its own. So the estimate can move fast both ways: up as
// soon as slack is there, down as soon as it is not. This is Mesos's
// meaning ("the total amount of oversubscribed resources that are allocated
// and available").
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
// allocations, never exceeds Total, and is never negative. It holds cpus
// and, with Config.Memory, mem; never disk or ports.
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
//   - calibrated (the default): fast's prediction (below) with a margin
//     that adaptive conformal inference adjusts online so that, in the long
//     run, at most Calibration.TargetViolation (1%) of its estimates offer
//     more than the slack that was really there, on any sequence of usage
//     (see Calibration). It calibrates three base predictions side by side
//     (experts: fast's with a Calibration.Confirm of 300 ms instead of a
//     second, the same held to the peak of the last second, and the first
//     following each container's rhythms only while they come true) at one
//     shared level and publishes the one with the least recent quantile
//     loss (see Experts), and publishes its rises at most once per
//     RiseInterval (500 ms; shrinks at once; a lasting rise, 0.5 cores or
//     more left by a confirmed fall, right after the rise before it: the
//     two steps slack usually appears in both at once; a large one, a core
//     or more, at once whatever came before it) through a [Pacer].
//   - fast: each guaranteed container and protected service
//     is taken to need the peak of its CPU over the last Fast.Confirm (1 s),
//     plus Fast.Margin (6%) of its allocation, the explicit safety margin.
//     It is asymmetric: a rise enters the peak at once, so the estimate
//     shrinks in the next estimate (100 ms), while a fall must hold for
//     Confirm before the slack it leaves is offered. Two predictions cover
//     what the past second cannot: a burst starting (a sample at least
//     Fast.Onset, 0.25 cores, above the one before) is taken to rise as much
//     again, since its first sample saw only part of it; and bursts that
//     recur (three onsets on one lattice of period p ≥ 2 s, within
//     Fast.OnsetJitter, 250 ms, over the last five minutes: a GC cycle, a
//     cron job) are held back from OnsetJitter before they are due until
//     OnsetJitter after, looking Fast.ReclaimTime (250 ms, the QoS
//     controller's correction interval) ahead: what QoS cannot take back in
//     time is not offered. Rhythms are held back out of quiet only (no fall
//     of an onset's size within the last two Confirms): a load that
//     restarts as soon as its slack is offered would otherwise teach the
//     lattice its own rhythm and never be offered anything. It publishes
//     with a band of Fast.Band (0.05 cores) of hysteresis (below).
//   - usage: each guaranteed container and protected service
//     is predicted to need the larger of the Percentile-th percentile of its
//     CPU samples over Window (default the 99th over 60 s) and a decaying
//     peak hold (max over samples of cpu × 2^(−age/PeakHalfLife), default
//     10 s), plus Margin (10%) of its allocation. With Memory (on by
//     default; --oversubscribe-memory=false turns it off), mem is predicted
//     as the peak of the working set (anonymous plus active file pages, not
//     inactive page cache) over MemoryWindow (15 s) plus MemoryMargin (3%)
//     of the allocation, with no percentile (fast does the same for mem):
//     memory offered too eagerly is first reclaimed from revocable work
//     (memory.high), frozen, and only then killed, while guaranteed tasks
//     keep memory.min/low protection. `slackline-backtest memory` scores
//     it on testdata/memory: 73-77% harvest with at most 0.2% of samples
//     over (the goal is >= 70% at <= 1%, TestMemoryBacktest). Where the
//     node's memory is known (Input.Node: the agent passes its monitor's
//     MemTotal and MemAvailable, or a bounding cgroup's, and the QoS
//     controllers' KeepFree), mem is also at most the node's total less
//     KeepFree, less what the node holds beyond the containers' working
//     sets (kernel, agent, other processes), less the guaranteed need:
//     revocable work using all of it then leaves the reclaim controller
//     calm instead of driving the node under its line (#28; NodeMemory).
//     Every estimator that estimates mem is a MemoryExplainer: its
//     MemoryAccount names the bound that set the last estimate
//     (allocations, total or node) with each bound's terms, KeepFree and
//     the node's other use among them, for GetEstimate, GetUsage and
//     /metrics (slackline_agent_estimator_memory_*).
//     The backtest's traces have no node figures and are not bounded. A container with fewer than
//     MinSamples samples in the window is taken to need its whole
//     allocation (all estimators).
//   - predictive: usage with a prediction that looks ahead. It keeps the
//     per-second CPU peak of each guaranteed container for ten minutes and
//     looks for a period by autocorrelation (at least 4 s, seen three times,
//     correlation ≥ 0.6 and ≥ 0.3 lower at some shorter lag so that a level
//     shift or a trend is not read as a period). With a trusted period it
//     predicts the peak of the next seconds from the same phase of the last
//     three periods and the last two seconds, so a load that repeats leaves
//     its allocation to revocable tasks between its bursts and takes it back
//     shortly before each one. Without one, its prediction is exactly
//     usage's.
//
// usage and predictive publish through [Hysteresis]: a shrink is
// published at once (a band below the new safe value, so that noise does
// not shrink it again), a rise only when it exceeds two bands, and the band
// is max(0.1 cpu, 5%) and max(64 MiB, 5%). fast uses the same rule with a
// band of Fast.Band cpus (and Hysteresis.MemMiB). The published value is
// never above the safe one. The agent should send an estimate whenever it
// differs from the last one sent: hysteresis is already applied.
//
// # Calibration
//
// calibrated scores every estimate it publishes once its horizon has
// passed: the estimate made at t_k is in force until the next one, t_{k+1},
// and it violated (err_k = 1) when it exceeded the real slack over that
// horizon, r_k = max(0, min(Σ alloc, Total) − Σ_members peak use in
// (t_k, t_{k+1}]), by more than Calibration.Tolerance (0.05 cores): the
// backtest's definition, sample for sample when one sample falls in each
// horizon (the agent's 100 ms and 100 ms). Its conformity score is
// relative to the raw estimate b_k of a base prediction (before any
// calibration; each expert has its own, see Experts):
//
//	s_k = (b_k − r_k − tolerance) / max(b_k, 0.1 cpus)
//
// and a margin q takes q·max(b, 0.1) cpus off b, so offering it violates
// exactly when s > q: the margin is a share of what fast would offer,
// not a fixed number of cpus. (It was additive, s = b − r, until #29's
// harvest work: the additive quantile is set by the largest misses, 0.3
// to 1 core on bursty and diurnal, and after a violation it took the whole
// of the small slack left in busy periods; the relative one cuts a large
// estimate by more than a small one.) The margin is the conformal quantile
// of the last Calibration.Window (3000) scores at the level α_t,
//
//	q_t = s_(⌈(1−α_t)(n+1)⌉)
//
// When that rank exceeds n (fewer than about 1/α_t scores) the window is
// too young for the level: q is 0 (fast's own estimate, a warm start)
// while α_t is at or above the target, the largest score once violations
// have pulled α_t below it. The level follows the errors made (Gibbs and
// Candès, 2021):
//
//	α_{t+1} = α_t + γ(α − err_t),  α = TargetViolation, γ = Calibration.Gamma (0.01)
//
// When α_t ≤ 0 nothing is offered (the calibration is paused); a negative
// margin may give back at most fast's own margins (the predicted peaks are
// always held back); α_t is clipped at min(1, 10α).
//
// Delayed feedback. err_k is known only when every member's samples reach
// t_{k+1}: at the next estimate at the earliest (d = 1), later when the
// monitor's samples arrive after the estimate that follows (in the agent
// each estimate runs just after a monitor sample, so the sample that
// reaches t_{k+1} is the next one: d = 2). The
// update uses each err_k when it becomes known, in order. At most
// maxPendingEstimates (50) wait; beyond that the oldest counts as a
// violation without a score (CalibrationStats.Unresolved), so a monitor
// that stops reporting pauses offers rather than hiding errors.
//
// Experts. Which base prediction suits a load differs: a 300 ms
// confirmation offers a dip that lasts at once (cron, steady), but on a
// ramp or a load whose dips are brief it offers slack that the next
// samples take back, and the calibration then pays for those misses with a
// wide margin and pauses (diurnal's morning ramp). And fast's rhythm
// prediction (a burst due on a lattice of three past onsets is held back
// before it starts) suits cron and GC cycles, but on a load whose onsets
// are memoryless (bursty: exponential gaps, some 45 onsets in 150 s) such
// lattices appear by chance, and it holds back slack for bursts that do
// not come. So the estimator keeps numExperts (3) base predictions
// (expertSpecs): expert 0 is fast's prediction with Calibration.Confirm
// (300 ms); expert 1 takes each member to need at least the peak of its
// CPU over Fast.Confirm (1 s), except after a confirmed fall of at least
// largeFallOnsets Onsets (1 core: the slack a finished burst leaves, which
// the slack -> offer pacing sends after 300 ms); expert 2 is expert 0 with
// each member's rhythms followed only while they come true: a member's
// prediction lasts while a burst is due, it came true when one of the
// member's onsets falls in it (from OnsetJitter before), and the member's
// rhythms are followed until rhythmMinOutcomes (4) predictions are known,
// then while at least rhythmMinHits (4) of its latest rhythmOutcomes (8)
// came true (per member: on a node with a cron job and a bursty service
// the cron job's rhythms are still followed). Each expert keeps its own window of scores, s_k^i = (b_k^i − r_k −
// tolerance)/max(b_k^i, 0.1), and its margin is the quantile of its own
// window at the one shared level α_t; each scored estimate also adds to
// each expert's discounted loss (time constant expertMemory, 1000
// estimates: 100 s) the pinball loss at level α of what it would have
// offered, o_k^i,
//
//	ρ_α(u) = α·u (u ≥ 0),  (1 − α)·(−u) (u < 0),  u = r_k + tolerance − o_k^i
//
// (its expectation is least at the α-quantile of the real slack: the
// largest offer that violates a share α of the time), and the expert with
// the least loss is published (the first of them on a tie). The level α_t
// follows only what was published. The idea is DtACI's (Gibbs and Candès,
// 2022: several experts, trusted by their recent pinball loss), but its
// experts differ in their base prediction, not in γ, share one level, and
// one is chosen rather than weighted; its guarantee is therefore not
// DtACI's regret bound but adaptive conformal inference's, unchanged: the
// argument below never looks at how the offer is formed from α_t, only at
// the errors of what was published and at (1). Its settings (the second
// expert with fast's confirmation; expertMemory among 3-300 s;
// largeFallOnsets among 0.25-1.5 cores; a third confirmation of 650 ms or
// 2 s did worse; a third expert without rhythms at all took bursty to
// 52.7% but cron to 74.4%, below fast, the long one with trusted rhythms
// bursty to 47.8% only, and a fourth beside the third cost bursty 1.7
// points and the mix 0.6; the trust among
// 4-8 outcomes and 2-6 hits: 8 and 4 in the middle, 6 and 3 take bursty to
// 51.1% and the mix to 85.1%, 8 and 5 to 54.3% and 81.5%; those figures
// were measured before the third expert kept fast's burst-start
// extrapolation, below) were chosen on the recorded traces only. Re-run
// on the recorded traces after that fix, with 8 outcomes: 2 and 3 hits
// take bursty to 48.0% and 50.6% (below fast) and the mix to 84.5% and
// 85.4%; 5 and 6 hits take bursty to 53.0% and the mix to 85.8% and
// 85.9%, every other recorded trace unchanged, against 51.7% and 85.4%
// with 4. The setting is kept at 4 for now: above rhythmMinOutcomes (4) a
// hit count distrusts a member whose first four predictions all came
// true, so re-choosing it means re-choosing both, and TestRhythmTrusted's
// cases with it.
//
// The bound. Let d be the largest delay, in estimates. (1) α_t never
// falls to −dγ: an estimate made with α_t ≤ 0 offers 0, which cannot
// violate (r ≥ 0), so once α_t ≤ 0 only the at most d estimates made
// before, with α > 0, and not yet scored can lower it further, each by
// γ(1 − α) < γ. (2) Summing the update over the T estimates scored so far,
// α_{T+1} = α_1 + γ Σ(α − err_k) − C, with C ≥ 0 what the ceiling
// clipped, so
//
//	(1/T) Σ err_k = α + (α_1 − α_{T+1} − C)/(γT) ≤ α + (α + dγ)/(γT)
//
// with α_1 = α: [ViolationBound], Gibbs and Candès's bound (their
// Proposition 4.1) with the delay added. It holds for every sequence of
// usage, not only for exchangeable or stationary ones; nothing about fast's
// prediction enters it, nor which expert is published, nor the score's
// definition, nor how the margin is
// drawn from α_t: only (1), that α_t ≤ 0 offers nothing. The score and the
// quantile decide what the violations buy in harvest, not how many there
// are. With α = 1%,
// γ = 0.01 and d = 1 (a replay) the allowance (α + dγ)/(γT) = 2/T is 0.13
// points on a 150 s trace (T = 1499) and 0.011 points on a 30-minute one;
// with d = 2 (the agent) 3/T: 0.20 and 0.017.
// The same sum over any run of n consecutive scored estimates, with α at
// most min(1, 10α) at its start, bounds the share in that run by
// α + (min(1, 10α) + dγ)/(γn) ([WindowViolationBound]): 1.46% over any
// four minutes at 100 ms. That is what brings the rate back to the target
// after the load changes kind, where a fixed margin stays wrong
// (TestCalibratedAdversarialRegimes). The price of the guarantee is
// harvest on loads whose spikes cannot be predicted (bursty: the
// calibration pays for each unforeseen spike by offering less) and, after
// a burst of violations, a pause: α_t recovers by γα = 0.0001 per clean
// estimate, so a pause lasts up to 100 estimates per violation below zero.
//
// # Why is my slack zero on node X
//
// `slacklinectl get estimate --hostname X` (GetEstimate) answers it: the
// published cpus, the published expert's estimate before the calibration
// and the calibrated one before hysteresis and pacing; one row per
// guaranteed container with its allocation, predicted peak (the published
// expert's; its whole allocation
// while it has fewer than MinSamples samples: "warming up"), safety margin
// and share of the calibration, what is held back and the rest, its
// slack; the container that holds back the most, named with a sentence
// ("c-1 holds back 1.94 of its 2.00 cpus: predicted peak 1.82 + margin
// 0.12 + calibration +0.00", followed by "(peaks held for 1s: slack that
// lasted less was recently taken back)" while the long expert is
// published); and the calibration's account (the share of
// past estimates that exceeded the real slack, against the target and the
// bound it is held to, the level and what it adds). Zero has four causes,
// each shown there: the guaranteed containers use (or are predicted to
// use, a recurring burst being due) their allocations; a container is
// warming up; the node's total is below the allocations; or the
// calibration paused after violations ("calibration paused: ...", level ≤
// 0), in which case offers resume on their own after enough clean
// estimates. /metrics has the same account per agent
// (slackline_agent_estimator_calibration_level, _violations_total,
// _estimates_scored_total, _estimates_unmeasured_total,
// _rises_held_total).
//
// # Lifecycle and ownership
//
// An estimator is built once per agent and called from one goroutine; it is
// not safe for concurrent use. It does no I/O, starts no goroutines and
// reads no clock: time is Input.Now. Estimate reads its Input and keeps no
// reference into it. usage keeps the last published estimate; predictive
// also keeps its per-container series and fast each member's onsets of the
// last five minutes (dropped when a container leaves).
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
// an estimator, one estimate per 100 ms (the agent's interval) from the
// samples before it, and scores each later sample j:
//
//	ideal_j    = max(0, Σ alloc − Σ usage_j)     the real slack at j
//	offered_j  = the estimate in force at j      made from samples before j
//	violation  offered_j − ideal_j > 0.05 cores  (revocable + guaranteed use
//	                                              would have exceeded the
//	                                              guaranteed allocation)
//	harvest    mean(offered) / mean(ideal); "safe": mean(min(offered, ideal)) / mean(ideal)
//	to offer   mean time from slack appearing (0.25 cores more free for at
//	           least 5 s) to half of it offered; ">": some never was (a
//	           lower bound; backtest.Result.MeanTimeToOffer)
//
// Beside Slackline's estimators it replays two anchors, reference
// implementations (in package backtest only) of what production colocation
// systems do: "koordinator", Koordinator's batch formula (node total × 60% −
// guaranteed use, the use averaged over 30 s and reported every 60 s, the
// node updated past a 10% change) and "katalyst", Katalyst's smoothed
// headroom (total − guaranteed use sampled every 30 s, averaged over a full
// 2 min window, moved in steps of 0.3 to 4 cores). Both start cold, as every
// estimator does: Katalyst offers nothing until its window is full (90 s),
// which weighs on 150 s traces; its settings at 5 s and 10 s are on the
// frontier plot, which shows every estimator and anchor over a range of
// settings (`slackline-backtest plot -o frontier.png`;
// docs/estimator-frontier.png).
//
// Reproduce with `go run ./cmd/slackline-backtest run` (`go test ./estimator
// -run TestCandidateTable -v` adds the rejected candidates). On the
// committed traces (mix: all seven together, allocation 13.5 cpus):
//
//	scenario  estimator    ideal  offered  harvest  safe   violations  excess mean/max  changes/min  to offer
//	bursty    fast         1.613  0.834    51.7%    51.4%  1.53%       0.287 / 1.421    255.0         0.7s
//	bursty    usage        1.613  0.218    13.5%    13.5%  0.20%       0.259 / 0.313      6.8       >10.9s
//	bursty    predictive   1.613  0.218    13.5%    13.5%  0.20%       0.259 / 0.313      6.8       >10.9s
//	bursty    koordinator  1.613  0.657    40.7%    40.0%  2.54%       0.457 / 0.918      0.8        >7.4s
//	bursty    katalyst     1.613  0.527    32.7%    30.5%  8.07%       0.442 / 1.319      0.4       >11.5s
//	cron      fast         1.840  1.402    76.2%    76.1%  0.93%       0.202 / 0.398     79.7         0.6s
//	cron      usage        1.840  0.561    30.5%    30.5%  0.13%       0.135 / 0.159      4.4       >10.9s
//	cron      predictive   1.840  0.567    30.8%    30.8%  0.13%       0.135 / 0.159      5.2       >10.9s
//	cron      koordinator  1.840  0.866    47.1%    46.8%  2.07%       0.271 / 0.842      0.4        >7.8s
//	cron      katalyst     1.840  0.731    39.7%    36.9%  9.14%       0.575 / 1.588      0.4        >5.0s
//	diurnal   fast         1.645  1.250    76.0%    75.9%  0.87%       0.189 / 0.359     78.1         1.0s
//	diurnal   usage        1.645  0.533    32.4%    32.4%  0.07%       0.179 / 0.179      8.0       >29.6s
//	diurnal   predictive   1.645  0.533    32.4%    32.4%  0.07%       0.179 / 0.179      8.0       >29.6s
//	diurnal   koordinator  1.645  0.824    50.1%    48.8%  5.27%       0.393 / 0.937      0.8         0.0s
//	diurnal   katalyst     1.645  0.690    41.9%    35.7%  19.15%      0.536 / 1.555      0.4        18.1s
//	jvm-gc    fast         1.746  1.398    80.1%    80.0%  0.67%       0.194 / 0.741     61.6         0.8s
//	jvm-gc    usage        1.746  0.893    51.1%    51.1%  0.13%       0.203 / 0.309      7.6       >22.3s
//	jvm-gc    predictive   1.746  0.893    51.1%    51.1%  0.13%       0.203 / 0.309      7.6       >22.3s
//	jvm-gc    koordinator  1.746  0.737    42.2%    42.2%  0.07%       0.135 / 0.135      0.4       >21.7s
//	jvm-gc    katalyst     1.746  0.656    37.6%    37.4%  1.20%       0.218 / 0.855      0.4       >17.8s
//	periodic  fast         1.627  1.319    81.1%    81.0%  0.27%       0.241 / 0.556     49.2         1.0s
//	periodic  usage        1.627  0.618    38.0%    37.9%  0.07%       0.096 / 0.096      1.6       >12.1s
//	periodic  predictive   1.627  0.819    50.4%    50.4%  0.07%       0.061 / 0.061      6.4        >6.4s
//	periodic  koordinator  1.627  0.591    36.3%    36.2%  1.73%       0.171 / 0.288      0.8       >11.1s
//	periodic  katalyst     1.627  0.691    42.4%    36.6%  15.74%      0.604 / 1.240      0.4        >7.6s
//	steady    fast         1.372  1.109    80.8%    80.7%  0.93%       0.127 / 0.222     76.5         1.0s
//	steady    usage        1.372  0.835    60.8%    60.8%  0.00%       -                  4.4        >6.3s
//	steady    predictive   1.372  0.835    60.8%    60.8%  0.00%       -                  4.4        >6.3s
//	steady    koordinator  1.372  0.669    48.7%    48.7%  0.20%       0.063 / 0.067      0.4        >6.3s
//	steady    katalyst     1.372  0.580    42.3%    36.6%  24.55%      0.318 / 0.683      0.4        >6.3s
//	step      fast         1.762  1.519    86.2%    86.1%  0.40%       0.349 / 0.626     29.2         0.9s
//	step      usage        1.762  0.874    49.6%    49.6%  0.07%       0.496 / 0.496      8.0       >28.2s
//	step      predictive   1.762  0.874    49.6%    49.6%  0.07%       0.496 / 0.496      8.0       >28.2s
//	step      koordinator  1.762  0.614    34.9%    32.6%  18.48%      0.210 / 0.568      0.8       >26.6s
//	step      katalyst     1.762  0.714    40.5%    40.4%  0.47%       0.345 / 0.555      0.4        >5.7s
//	mix       fast         11.605 9.075    78.2%    78.2%  0.07%       0.116 / 0.116    417.9         0.5s
//	mix       usage        11.605 4.926    42.4%    42.4%  0.00%       -                 14.8        >9.3s
//	mix       predictive   11.605 5.087    43.8%    43.8%  0.00%       -                 19.2        >7.9s
//	mix       koordinator  11.605 4.983    42.9%    42.9%  0.00%       -                  0.8       >12.1s
//	mix       katalyst     11.605 4.700    40.5%    39.0%  21.55%      0.779 / 2.863      0.8        >7.3s
//
// That table is fast's (the default from issue 15 to issue 29); the rows of
// fast, usage, predictive and the anchors still reproduce (with a
// shrinks/min column added). calibrated, the default since (its rows as
// of #29's third expert, with the relative score, the warm start and the
// pacer), against fast and the anchors, on the recorded traces and, apart, on the held-out ones
// (testdata/heldout: never used to choose a setting), with
// `go run ./cmd/slackline-backtest run --estimators
// fast,calibrated,koordinator,katalyst` (columns: harvest, violations,
// changes/min, shrinks/min, to offer):
//
//	recorded  fast                           calibrated (target 1%)         koordinator   katalyst
//	bursty    51.7% 1.53% 255.0 116.5  0.7s  51.7% 1.00% 211.7 103.3  0.4s  40.7%  2.54%  32.7%  8.07%
//	cron      76.2% 0.93%  79.7  34.0  0.6s  76.2% 0.80%  96.5  44.8  0.3s  47.1%  2.07%  39.7%  9.14%
//	diurnal   76.0% 0.87%  78.1  34.0  1.0s  76.2% 0.80%  78.9  34.8  2.1s  50.1%  5.27%  41.9% 19.15%
//	jvm-gc    80.1% 0.67%  61.6  25.6  0.8s  82.4% 0.93%  86.1  36.8  0.6s  42.2%  0.07%  37.6%  1.20%
//	periodic  81.1% 0.27%  49.2  18.0  1.0s  87.9% 0.67%  56.4  23.6  0.5s  36.3%  1.73%  42.4% 15.74%
//	steady    80.8% 0.93%  76.5  38.4  1.0s  81.2% 0.87%  99.3  48.0  0.3s  48.7%  0.20%  42.3% 24.55%
//	step      86.2% 0.40%  29.2  10.0  0.9s  92.0% 0.47%  27.6  10.0  0.6s  34.9% 18.48%  40.5%  0.47%
//	mix       78.2% 0.07% 417.9 191.7  0.5s  85.4% 0.93% 272.2 156.9  0.3s  42.9%  0.00%  40.5% 21.55%
//
//	held-out                   fast                           calibrated (target 1%)         koordinator   katalyst
//	build-contended            85.6% 0.17%  33.2  15.7  0.8s  91.4% 0.73%  35.6  17.3  0.8s  57.1%  0.03%  93.7%  7.93%
//	bursts-heavytail-contended 89.5% 0.12%  33.7  16.2  0.9s  96.2% 0.72%  37.2  17.9  0.6s  58.3%  0.00%  95.7% 10.98%
//	http-heavytail-contended   86.2% 0.32%  45.4  21.0 >1.2s  90.9% 0.95%  49.3  22.7  0.8s  57.4%  0.01%  94.4% 11.79%
//	queue-contended            86.3% 0.33%  44.8  20.6  1.0s  90.5% 1.01%  55.7  25.9 >1.4s  56.7%  0.01%  96.4% 21.69%
//	ramps-contended            89.3% 0.00%  11.2   5.6     -  95.8% 0.07%  16.1   8.0     -  58.1%  0.00%  95.5%  9.42%
//	heldout-mix                86.9% 0.00% 343.2 158.4 >1.4s  93.5% 0.57% 243.9 137.6  0.9s  56.4%  0.00%  95.2% 42.37%
//	build                      80.2% 0.72%  66.5  29.5  0.9s  81.4% 0.98%  92.0  42.7  0.8s  54.5%  0.23%  94.2% 28.09%
//	bursts-heavytail           83.2% 0.93%  75.6  35.0  0.8s  84.4% 1.00%  69.1  31.6  1.1s  58.3%  0.59%  97.3% 20.18%
//	http-heavytail             79.7% 0.71%  92.5  41.1  1.0s  80.7% 0.99% 139.0  65.5 >1.6s  55.4%  0.01%  99.2% 45.54%
//	queue                      73.6% 1.10% 123.4  55.8  0.8s  73.6% 1.00% 145.6  69.6 >0.8s  52.5%  0.99%  89.4% 19.77%
//	ramps                      88.3% 0.00%  18.7   9.3     -  94.7% 0.22%  20.0   9.9     -  57.2%  0.00%  97.0% 38.49%
//
// (the first six rows: the set recorded at nice 10 under heavy
// contention, heldout-mix being those five together; the last five: the
// set recorded at nice -10, as the recorded traces were.)
//
// calibrated holds every trace within its bound (1.13% on the 150 s
// traces, 1.011% on the 30-minute ones; TestCalibratedViolationBound),
// bursty included (1.00%), where fast violates 1.53%, and it harvests at
// least what fast does on every trace, recorded and held out
// (TestCalibratedViolationBound), on bursty and held out queue by a hair
// (0.835 cores offered against fast's 0.834; 1.236 against 1.235), at
// fewer violations. Where fast breaks the bound (bursty; held out, queue
// at 1.10%) it also harvests at least what fast held to the target in
// hindsight does, its margin raised until its violations on that very
// trace are at most 1% (TestFastHeldToTarget): bursty 51.7% against 46.8%
// at 0.93% (margin 10.5%), queue 73.6% against 72.4% at 0.93% (margin 7%;
// `go test ./estimator -run TestFastHeldToTarget -v -args
// -fast-target-heldout`).
//
// Before and after #29's third expert (rhythms followed only where they
// came true; harvest, violations, changes a minute and their change). The
// after column is the third expert as fixed: when first measured it took
// the plain peak where it distrusted a member's rhythms, losing fast's
// burst-start extrapolation (a burst's first sample + its rise;
// TestExpertsBurstStart); that version had bursty at 52.6% 1.07% 155.3/min,
// the mix at 83.5% 1.00% 259.0/min, held out queue 74.2%, bursts-heavytail
// 84.9%, http-heavytail 79.9% and heldout-mix 95.3% at 1.00% 258.7/min:
//
//	trace                      before (two experts)     after (three experts)           fast
//	bursty                     43.5% 0.93% 215.3/min  51.7% 1.00% 211.7/min   -2%  51.7% 1.53% 255.0/min
//	cron                       76.2% 0.80%  96.5/min  76.2% 0.80%  96.5/min   +0%  76.2% 0.93%  79.7/min
//	diurnal                    76.2% 0.80%  78.9/min  76.2% 0.80%  78.9/min   +0%  76.0% 0.87%  78.1/min
//	jvm-gc                     82.4% 0.93%  86.1/min  82.4% 0.93%  86.1/min   +0%  80.1% 0.67%  61.6/min
//	periodic                   87.9% 0.67%  56.4/min  87.9% 0.67%  56.4/min   +0%  81.1% 0.27%  49.2/min
//	steady                     81.2% 0.87%  99.3/min  81.2% 0.87%  99.3/min   +0%  80.8% 0.93%  76.5/min
//	step                       92.0% 0.47%  27.6/min  92.0% 0.47%  27.6/min   +0%  86.2% 0.40%  29.2/min
//	mix                        83.7% 0.93% 280.2/min  85.4% 0.93% 272.2/min   -3%  78.2% 0.07% 417.9/min
//	build-contended            91.4% 0.73%  35.6/min  91.4% 0.73%  35.6/min   +0%  85.6% 0.17%  33.2/min
//	bursts-heavytail-contended 96.2% 0.72%  37.2/min  96.2% 0.72%  37.2/min   +0%  89.5% 0.12%  33.7/min
//	http-heavytail-contended   90.8% 0.95%  49.3/min  90.9% 0.95%  49.3/min   +0%  86.2% 0.32%  45.4/min
//	queue-contended            90.5% 1.01%  55.7/min  90.5% 1.01%  55.7/min   +0%  86.3% 0.33%  44.8/min
//	ramps-contended            95.8% 0.07%  16.1/min  95.8% 0.07%  16.1/min   +0%  89.3% 0.00%  11.2/min
//	heldout-mix                93.2% 0.26% 234.3/min  93.5% 0.57% 243.9/min   +4%  86.9% 0.00% 343.2/min
//	build                      81.3% 0.98%  90.2/min  81.4% 0.98%  92.0/min   +2%  80.2% 0.72%  66.5/min
//	bursts-heavytail           82.3% 0.99%  77.9/min  84.4% 1.00%  69.1/min  -11%  83.2% 0.93%  75.6/min
//	http-heavytail             78.9% 1.00% 128.7/min  80.7% 0.99% 139.0/min   +8%  79.7% 0.71%  92.5/min
//	queue                      71.1% 1.00% 149.1/min  73.6% 1.00% 145.6/min   -2%  73.6% 1.10% 123.4/min
//	ramps                      94.7% 0.22%  20.0/min  94.7% 0.22%  20.0/min   +0%  88.3% 0.00%  18.7/min
//
// Before it, four traces fell short of fast: bursty (43.5%, 3.3 points
// below fast held to the target: its spikes' onsets are memoryless, and
// fast's rhythm prediction, finding lattices among them by chance, held
// back slack for bursts that did not come; the third expert was published
// 76% of the time there when first measured), and held out queue,
// bursts-heavytail and http-heavytail (0.8-2.5 points below fast). With it
// bursty harvests 51.7% (+8.2 points, fast's harvest at 1.00% rather than
// 1.53%, 4.9 points above fast held to the target) and the recorded mix
// 85.4% (+1.7, at 0.93%); the other recorded traces are unchanged. The
// held-out traces were not used to choose it; they improve as they fall
// (queue +2.5, bursts-heavytail +2.1, http-heavytail +1.8, heldout-mix
// +0.3, build +0.1 points). Changes a minute fall on bursty (-2%), the mix
// (-3%), queue and bursts-heavytail (-2%, -11%) and are unchanged
// elsewhere but for three held-out traces: http-heavytail +8%, heldout-mix
// +4% and build +2%, all within the 10% that #29's harvest work allowed
// itself. Against the first-measured version the fix costs bursty 0.9
// points and raises its changes a minute from 155.3 to 211.7 (+36%, still
// below fast's 255.0), at 1.00% violations rather than 1.07%; on
// heldout-mix it harvests 1.8 points less than the first version (93.5% at
// 0.57% rather than 95.3% at 1.00%, whose changes a minute were +10.4%,
// over the 10%). No setting was changed with the fix.
//
// The experts (two, before the third) took diurnal from 73.3% to 76.2%,
// bursty from 42.8% to 43.5%, build from 80.3% to 81.3%; they cost cron
// 2.0 points (78.2% to 76.2%, fast's), jvm-gc 0.9, step 0.8, the mix 1.2,
// and held out http-heavytail 1.2, ramps 1.0, heldout-mix 1.2, and cut the
// changes a minute on every trace but steady, since the long expert's
// offers move less. On the contended held-out set fast stays far below 1%
// and calibrated spends more of the budget on harvest (+4 to +7 points),
// which is what a target, as opposed to a fixed margin, means.
// The anchors either harvest 57% (koordinator's 60% ceiling) or violate
// 8-26% (katalyst).
//
// The same table the other way, calibrated with its target set to the
// violation rate fast reached on each trace (measured with the additive
// score): harvest at equal violations. There fast is ahead: bursty 43.6%
// at 1.40% (fast 51.7% at 1.53%), cron 74.8% at 0.73%, diurnal 72.7% at
// 0.67%, jvm-gc 78.4% at 0.67%, periodic 74.3% at 0.27%, steady 79.6% at
// 0.80%, step 67.4% at 0.33%; held out, 66-78% where fast has 86-89%. A
// low target is expensive for adaptive conformal inference: each violation
// costs γ(1 − α) of a level α, and below the target, until α_t(n+1) ≥ 1,
// the margin is the largest score in the window. fast's 0.07-0.33% on
// those traces is luck it cannot promise (1.53% on bursty); calibrated's
// 1% is a bound.
//
// Changes reaching the coordinator: calibrated's 300 ms confirmation alone
// would change the estimate more often than fast (mix: 518 a minute, 232
// of them shrinks, against fast's 418 and 192); pacing its rises at 500 ms
// brings that to 273 and 161, below fast's, for a point of harvest on the
// mix (the calibration sees the paced value and compensates).
//
// # Slack that lasts, and slack that does not (#29)
//
// scripts/bench/slack once burned a guaranteed task's 2 cpus for 3 s,
// idled until a revocable offer came, and burned again at once: calibrated
// took p50 6.8 s, p99 17.4 s to offer (quiet machine), fast 1.0 s. Polling
// GetEstimate through the bench (its per-trial account) and replaying the
// pattern in logical time (TestCalibratedBenchPattern) say where the
// seconds went: every offer was followed within a few hundred milliseconds
// by the next burst, an onset nothing can foresee, so the estimate in
// force then violated: one violation per trial, two when the agent's
// estimate ran before the monitor's sample that showed the burst (its
// loops ticked independently), in trials of 40 to 60 estimates. fast
// violates 2.5% on that pattern. calibrated promises 1%, and the only way
// to keep it is what it did: the level fell by γ per violation and the
// margin held the slack back until about 100 clean estimates per violation
// had passed. The estimator was right; offering slack that a burst takes
// back 0.x s later is exactly a violation. The bench now keeps the node
// idle for a random 10-20 s after each offer (--idle; 0 is the old
// pattern), slack that lasts, as the issue means it. Two things in the
// agent and the pacer were wrong and are fixed: the estimate now runs just
// after each monitor sample (one violation per onset where there were
// often two, which alone made the calibration bind at 10-20 s idle), and
// the pacer lets the second step of a rise through at once (the burst's
// last, partly busy, sample leaves the confirmation window one estimate
// before the idle ones; holding the second step cost up to 500 ms). At
// first only after two seconds without any change: the bench's slow
// trials (p99 0.84 s on a quiet machine, the rest 0.3-0.47 s) were those
// where the estimate had changed shortly before, which
// TestCalibratedBenchPatternChangeBefore replays (a dip in the burn a
// second before it ends: p99 0.7 s, up to 1.5 s). Now the estimator says
// which rises are lasting (a member's usage fell by an Onset and stayed
// down for the whole confirmation, and the rise is at least two Onsets)
// and the pacer sends a lasting rise at once when the estimate before it
// sent a rise: the replay's p99 is 0.3 s with or without a change before.
// Changes reaching the coordinator per minute on the recorded traces,
// before and after that rule: bursty 214.9 to 219.3, cron 111.3 to 106.1,
// diurnal 119.7 to 120.9, jvm-gc 160.5 to 160.5, periodic 64.8 to 65.2,
// steady 101.3 to 101.3, step 39.2 to 39.2, mix 273.0 to 285.8 (+4.7%);
// harvest and violations moved by at most 1.4 points and 0.07 points
// (bursty 38.7% to 40.1%). A 200 ms confirmation (--calibrated-confirm
// 200ms) would take 100 ms off every offer and keeps every trace within
// its bound (at most 1.01%), but the changes a minute rise by 3-25% on
// the recorded traces (mix 286 to 301, diurnal 121 to 151, step 39 to
// 49) and up to 48% on the held-out ones, and harvest moves by -2.4 to
// +0.4 points: it stays at 300 ms. In logical time, 60 trials, with the
// relative score (see the calibration above): slack reclaimed at once,
// calibrated p50 6.4 s, p99 15.8 s, 1.00% violations (fast 1.0 s, 2.52%);
// slack that lasts, p50 0.3 s, p99 0.3 s, 0.67%, and 0.3 s with a change
// before it (0.71%); with a sample of lag p50 3.8 s, p99 15.2 s, 1.00%:
// the calibration binding.
//
// Then the bench (20 trials, quiet machine) still had a slow tail: p50
// 346 ms, max 1.355 s; four trials (450 ms, 531 ms, 1.35 s, 1.35 s) spent
// 0.08-0.48 s in pacing. Its estimate log (--trace) says why. In those
// trials the guaranteed task did not hold its 2 cpus (1.3-1.5 in the last
// second of the burn: the machine was quiet, not idle), and
// in the last few hundred milliseconds of a burn it lost a little more:
// the estimate rose by 0.1-0.3 cores and that rise was sent. The slack's
// first step then came within RiseInterval of it and was held, and a
// held step is not a sent one: the lasting second step was held with it.
// TestCalibratedBenchPatternSagBefore replays it (the burn sagging to
// 1.6-1.75 cpus for its last 2 or 3 samples): on that pacer the sagged
// trials waited 300-800 ms, the others 200-300 ms. The pacer now sends a
// large lasting rise (a core or more, RiseLarge) at once whatever came
// before it: the replay's sagged trials take 200-300 ms. On the traces
// changes a minute move by at most 1 on every trace but the mixes (mix 272
// to 291, +6.8%; held-out mix 244 to 248), harvest by -0 to +0.8 points
// (bursty 51.7% to 51.8% at 1.00%), violations by at most 0.02. Sending every
// lasting rise at once fixes the replay too but not the traces: bursty's
// harvest fell from 51.7% to 50.5% (at 1.07%), below fast's, and the
// changes a minute on the mix rose by 13% (272 to 308); so did sending a
// lasting rise after a held one. The bench's two slowest trials (1.35 s)
// are another rule, not fixed: there the calibration published the
// expert held to the peak of the last second, whose large-fall exemption
// lasts only while the confirmation before the last still holds the
// load: it offered the slack for one estimate (held by the pacer), took
// it back and offered it again a second after the fall. Keeping the
// exemption for the whole second fixes that and costs bursty a point of
// harvest (50.6%, below fast's).
//
// The bench's estimate log on main in the next session (20 trials, quiet
// call, the machine quiet but not idle: p50 967 ms, p99 5.16 s, the first
// trial paused by two violations in the calibration's first 100
// estimates) had the long expert published in every slow trial: the
// guaranteed task held 1.1-1.6 cpus while burning, with dips, and its use
// fell in steps (about 1.1, then the sample it stopped in, then 0.2-0.3:
// its idle loop forks a sleep every 20 ms), so that exemption, a core
// between the confirmation before the last and the last, never held, and
// the long expert (published throughout the run) kept the slack back for
// its whole second: 0.77-1.04 s of "prediction" in 10 of the 20 trials
// (the first included, which the calibration then paused for 4.9 s),
// with 0.2-0.6 s of pacing after it in 7; one of them, with the level
// near 0, also waited 0.9 s for the calibration's margin (0.7 cores). One
// more was slow for reasons this does not change: its burn held 0.8 cpus
// (a fall of 0.6 cores, not large, behind a calibration margin of 0.2
// cores). Now, after a large fall (largeFallOnsets) that
// has held for the short confirmation anywhere within the long one, no
// long expert is published (pick); every expert's scores and loss are
// kept as they were. TestCalibratedBenchPatternLongExpert replays it: 0.9-
// 1.2 s per trial before, 200-300 ms after. On the traces, harvest moves
// by +0 to +0.2 points (bursty 51.8% to 51.9%, cron 76.4% to 76.6%,
// periodic 87.9% to 88.1%, held-out mix 93.7% to 93.8%), violations not
// at all but on the held-out mix (0.59% to 0.60%), changes a minute by
// -0.7% to +0.5%. Keeping the exemption for the whole second in the long
// expert's own prediction instead cost bursty 1.2 points (50.6%) again.
// Its cost: with the same replay's burn at 2 cpus (where the old
// exemption held) one trial of 40 took 1.2 s instead of 200 ms.
//
// fast was the default because of the first table (TestRecordedTraces pins it):
// on every trace but bursty it harvests at least 75% of the ideal slack with
// at most 1% of the samples violated, and on every trace it harvests more
// than both anchors at a violation rate no higher than theirs or at most
// 1%. On bursty (0.3-2 s spikes every ~2 s, unpredictable at 100 ms) it
// violates 1.53%: each spike's first sample is over-offered; the QoS
// controller takes that back. Its price is churn: the estimate changes 30
// to 260 times a minute (420 on the mix of seven containers) where usage's
// changes a few times, which is what the coordinator's minimal rescinds
// make affordable (a shrink within what is free rescinds nothing, a rise
// adds an offer). usage and predictive are safer still and slow: they hold
// a minute's 99th percentile and a 10 s peak, so slack reaches the offer
// tens of seconds after it appears, and harvest 13-61%.
//
// fast's settings were chosen on these traces by sweeping Confirm (0.3-1
// s), Margin (3-7%), Band (0.04-0.12 cores), Onset (0.2-0.4 cores),
// OnsetJitter (200-400 ms) and ReclaimTime (200-500 ms); the bench
// scripts/bench/slack (slack -> offer p99 <= 2 s) bounds Confirm at about a
// second. Without the two predictions (Onset 0) cron violates about 2.2%,
// diurnal 1.1% and bursty 3.8% (with less churn: about 280 changes a
// minute on the mix); a shorter Confirm violates more (0.5 s: steady 1.5%,
// diurnal 1.6%, cron 1.3%); a Band of 0.12 cores cuts churn by a sixth at
// about five points of harvest. Holding rhythms back right after a fall
// too (without the quiet rule) moves the traces by less than a point
// (bursty: 48% at 1.40%) but, replayed on the bench's own rhythm, delays
// the offer to a p99 of 5.8 s. Every setting is tuned on the same traces it
// is scored on: cron and steady sit at 0.93%, close to the bound.
//
// The rejected candidates (export_test.go), with usage's margin and
// hysteresis, harvest no more than usage or predictive do:
//
//	scenario  candidate           harvest  violations
//	bursty    mean-3sigma         14.4%    0.13%
//	bursty    decaying-histogram  16.1%    0.20%
//	cron      mean-3sigma         34.3%    0.20%
//	cron      decaying-histogram  29.2%    0.13%
//	diurnal   mean-3sigma         37.8%    0.13%
//	diurnal   decaying-histogram  31.3%    0.13%
//	jvm-gc    mean-3sigma         60.4%    0.13%
//	jvm-gc    decaying-histogram  55.2%    0.13%
//	periodic  mean-3sigma         10.9%    0.00%
//	periodic  decaying-histogram  38.6%    0.07%
//	steady    mean-3sigma         58.8%    0.00%
//	steady    decaying-histogram  59.9%    0.00%
//	step      mean-3sigma         48.2%    0.07%
//	step      decaying-histogram  50.8%    0.13%
//	mix       mean-3sigma         39.7%    0.00%
//	mix       decaying-histogram  42.7%    0.00%
//
// mean + 3σ over-reserves whatever is not Gaussian (a square wave's σ is
// half its height); the decaying histogram moves harvest between traces and
// cannot see a period. predictive's horizon (2 s) and phase guard (1 s)
// were chosen among 1-3 s each when estimates came once a second.
//
// Replay scope: cpus only (memory is scored by backtest.ReplayMemory on
// testdata/memory, bandwidth not at all), one
// estimate per 100 ms, two minutes of history, 0.05 cores of tolerance, no
// Total cap.
package estimator
