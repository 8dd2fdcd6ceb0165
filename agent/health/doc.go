// Package health checks the health of an agent's running tasks, with
// Mesos's semantics: COMMAND checks run inside the task's container, HTTP
// checks want a 2xx or 3xx status, TCP checks want a connection.
//
// # Decision core
//
// Checker is pure: a task's policy (internal/taskspec.Health: delay,
// interval, timeout, grace period, consecutive failures), the time it
// started, and the results with the times they came in; no clock, no I/O.
// The first check is due Delay after the task started, each next one
// Interval after the previous started, or when it ended if that is later
// (checks of a task never overlap). A failure before the first success
// and within Grace of the start is ignored. A success makes the task
// healthy and resets the count; ConsecutiveFailures failures in a row
// make it unhealthy, then condemned: Decision.Kill. A Decision reports
// healthy only when it changes, so status updates are sent on change. A
// check of any type that finds the task paused (its container frozen by
// the QoS freezer: Probes.SetPaused's function says so before the check,
// or the Execer's error wraps ErrPaused) is skipped (Checker.Skip):
// a paused task is not unhealthy, and killing it for the pause would turn
// a reversible QoS action into a lost task; its health and count stay as
// they were and the next check is due an interval later.
//
// # Shells
//
// Probes turns a policy into one probe through a Dialer (the agent's:
// the task's own address, loopback; a check names a port and a path,
// never a host, follows no redirect and uses no proxy) and an Execer (the
// containerizer's: the command inside the task's namespaces, cgroups and
// user). Runner keeps one Checker per watched container, sleeps until the
// earliest due check, runs each check on a goroutine within its timeout,
// at most MaxConcurrentChecks at once (a check finding no slot waits
// 100 ms, counted), and hands every Decision that changes something to
// RunnerConfig.Decide; the agent turns those into task events (an update
// with healthy set, or a kill with REASON_TASK_HEALTH_CHECK_STATUS_FAILED).
//
// # Lifecycle and locks
//
//	r := health.NewRunner(cfg)        // watching nothing
//	go r.Run(ctx)                     // until ctx ends; waits for checks in flight
//	r.Watch(containerID, policy, t)   // when the task runs (and after recovery)
//	r.Forget(containerID)             // when it is killed or ends
//
// The runner's mutex guards its checkers and is never held during a probe
// or a call to Decide. Metrics: slackline_health_checks_total{type,result}
// (result ok, failed or paused), slackline_health_checks_deferred_total,
// slackline_health_check_kills_total, slackline_health_checked_tasks.
package health
