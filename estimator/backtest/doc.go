// Package backtest replays recorded container usage through resource
// estimators and scores what they would have offered against the slack that
// was really there.
//
// A [Trace] is one container's usage (CPU cores and memory working set, or
// RSS in traces recorded before the recorder measured working sets, per
// sampling interval) with the allocation it is replayed with; [ReadTrace] and
// [WriteTrace] handle its text form (a "# slackline trace v1" header, then
// "offset_s,cpu_cores,mem_bytes" rows), which `slackline-backtest record`
// produces from real workloads. A [Scenario] is one or more traces replayed
// together as guaranteed containers of one agent.
//
// [Replay] is deterministic and does no I/O: it calls the estimator once per
// Options.EstimateInterval with the history so far (never a sample from the
// future) and scores every later sample, as documented on [Result]: real
// slack max(0, Σ allocation − Σ usage), harvest, violations (offered − real
// slack > Options.Tolerance), their size, churn, and the mean time from
// slack appearing to being offered. Only cpus are scored: [ReplayMemory]
// scores mem the same way against working sets ([MemoryResult]).
//
// [Anchors] are reference implementations of Koordinator's batch formula
// and Katalyst's smoothed headroom ([NewKoordinator], [NewKatalyst]), for
// replaying beside Slackline's estimators; they live here and nowhere else.
//
// Errors: ReadTrace wraps [ErrInvalidTrace] for malformed input; Replay wraps
// [ErrScenario] for scenarios it cannot replay (no traces, mixed sampling
// intervals, an estimate interval that is not a multiple of the sampling
// interval, a trace shorter than one estimate interval). Estimators passed
// to Replay must be fresh: stateful ones remember what they saw.
package backtest
