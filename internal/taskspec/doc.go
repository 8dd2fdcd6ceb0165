// Package taskspec checks the parts of a TaskInfo that the coordinator and
// the agent both validate: the artifacts to fetch (CommandInfo.uris) and
// the health check (TaskInfo.health_check). It is pure: no I/O, no clock.
//
// The coordinator refuses a task whose fields fail here at Accept
// (TASK_STATE_ERROR, REASON_TASK_INVALID); the agent checks again before it
// acts, since a task may come from an older coordinator. Every error names
// the field at fault, e.g. "command.uris[1].sha256: want 64 hex digits".
//
// Health resolves a HealthCheck's optional fields to their defaults
// (Mesos's: delay 15 s, interval 10 s, timeout 20 s, grace period 10 s,
// 3 consecutive failures).
package taskspec
