// Package taskstate holds the one definition of which task states are final,
// shared by the coordinator, the agent, the simulator and the framework SDK.
package taskstate

import slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"

// IsTerminal reports whether a task in state s has ended for good.
// TASK_STATE_UNREACHABLE and TASK_STATE_UNKNOWN are not terminal: the task
// may come back.
func IsTerminal(s slacklinev1.TaskState) bool {
	switch s {
	case slacklinev1.TaskState_TASK_STATE_FINISHED, slacklinev1.TaskState_TASK_STATE_FAILED,
		slacklinev1.TaskState_TASK_STATE_KILLED, slacklinev1.TaskState_TASK_STATE_ERROR,
		slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.TaskState_TASK_STATE_DROPPED,
		slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR:
		return true
	}
	return false
}
