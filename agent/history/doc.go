// Package history keeps an agent's recent per-container series, so that a
// page opened (or reloaded) now shows the last minutes at once, and who
// delayed whom on the node over that time.
//
// # What is kept, and how much
//
// A Store keeps, per container, a fixed-size ring of points at the
// monitor's resolution: Config.Window / Config.Interval points (15 minutes
// at 100 ms is 9000), at most MaxPoints. A point is 16 bytes: the time
// since the previous point in milliseconds and six values in bfloat16 (3
// significant digits, plenty to draw): CPU cores, charged memory, network
// egress and ingress, run-queue p99 and the share of the interval delayed
// by revocable tasks. 100 containers' full 15 minutes at 100 ms cost about
// 14 MB. A ring is allocated whole when its container is first seen.
//
// Who-delayed-whom is kept as snapshots of each victim's cumulative delays
// by culprit every DelayStep (a ring of Window/DelayStep+2 snapshots, at
// most MaxCulprits culprits each, the rest folded into OtherCulprit);
// Delays subtracts the oldest snapshot in a window from the current
// figures.
//
// At most MaxSeries containers have a series at once. A container that
// ended keeps its series until its last point is older than the window,
// then Record drops it. What a limit cut is counted by
// slackline_agent_history_cut_total{limit="series"|"points"|"culprits"}.
//
// # Lifecycle and ownership
//
// The agent calls Record and RecordDelays after each monitor pass, from
// the monitor's goroutine, and Query and Delays from NodeService handlers
// (GetHistory, GetDelays). One mutex guards everything; no I/O happens
// under it. The Store takes no clock: the times come with the samples, so
// tests drive it with logical time.
package history
