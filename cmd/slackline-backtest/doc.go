// Command slackline-backtest measures the resource estimators on recorded
// usage, and records new usage traces from real workloads.
//
// Replay (no root needed): every trace is replayed as one guaranteed
// container with the allocation in its header, and all of them together as
// "mix"; each estimator makes one estimate per --interval from the samples
// before it, and every later sample is scored (see package
// estimator/backtest for the exact definitions):
//
//	slackline-backtest run                                  # recorded, then held-out traces
//	slackline-backtest run -o markdown --estimators fast,koordinator my/*.csv
//	slackline-backtest run --confirm 2s --safety-margin 0.1 # try other settings
//	slackline-backtest run --target-violation 0.005 --rise-interval 0
//
// With no trace arguments it replays the recorded traces
// (estimator/testdata/*.csv, with "mix") and, in a table of their own, the
// held-out traces (estimator/testdata/heldout/*.csv.gz, with
// "heldout-mix"), which no setting is ever chosen on.
//
// Besides the estimators it replays the anchors of package
// estimator/backtest, Koordinator's and Katalyst's formulas.
//
// Memory (no root needed): the same replays scored on revocable mem against
// the guaranteed containers' working sets (estimator/testdata/memory/*.csv
// by default):
//
//	slackline-backtest memory
//	slackline-backtest memory --memory-window 30s --memory-margin 0.1
//
// Plot (no root needed): the same replays over a range of each estimator's
// and anchor's settings, harvest against violations, one panel per scenario
// (docs/estimator-frontier.png is the committed traces' plot):
//
//	slackline-backtest plot -o frontier.png
//
// Record (root): runs --command under /bin/sh in a fresh cgroup
// slackline-trace-<random> (cpuacct and memory hierarchies on cgroup v1 and
// hybrid hosts, the unified tree on cgroup v2), samples its CPU (cpuacct.usage
// or cpu.stat usage_usec) and memory working set (anonymous plus active file
// pages: v1 total_rss + total_active_file, v2 anon + active_file) every --interval for --duration, writes the
// trace and removes the cgroup, killing what is left in it. No other cgroup
// is touched.
//
//	slackline-backtest record --name steady --allocation "cpus:1.5;mem:512" \
//		--duration 150s --command "stress-ng --cpu 1 --cpu-load 60 --timeout 160s -q"
//
// Errors are printed and the exit status is 1.
package main
