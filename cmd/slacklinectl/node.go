package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Lookups in the coordinator that lead from a task or a hostname to the
// agent that has it, whose NodeService the coordinator's node proxy
// reaches (globals.node).

// findTask returns the task taskID, of framework frameworkID when that is
// set. A task id that several frameworks use needs frameworkID.
func (g *globals) findTask(ctx context.Context, taskID, frameworkID string) (*slacklinev1.Task, error) {
	resp, err := g.operator().GetTasks(ctx, connect.NewRequest(&slacklinev1.GetTasksRequest{FrameworkId: frameworkID}))
	if err != nil {
		return nil, err
	}
	var found []*slacklinev1.Task
	for _, t := range resp.Msg.GetTasks() {
		if t.GetTaskId() == taskID && (frameworkID == "" || t.GetFrameworkId() == frameworkID) {
			found = append(found, t)
		}
	}
	switch len(found) {
	case 0:
		if frameworkID != "" {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %q of framework %q not found", taskID, frameworkID))
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %q not found", taskID))
	case 1:
		return found[0], nil
	}
	frameworks := make([]string, 0, len(found))
	for _, t := range found {
		frameworks = append(frameworks, t.GetFrameworkId())
	}
	slices.Sort(frameworks)
	return nil, fmt.Errorf("task %q is in several frameworks (%s): choose one with --framework", taskID, strings.Join(frameworks, ", "))
}

// hostAgent returns the id of the agent registered with hostname. When
// the host registered more than once (an agent that lost its checkpoint),
// the active agent is the one meant.
func (g *globals) hostAgent(ctx context.Context, hostname string) (string, error) {
	agents, err := g.operator().GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil {
		return "", err
	}
	var found, active []*slacklinev1.Agent
	for _, a := range agents.Msg.GetAgents() {
		if a.GetHostname() != hostname {
			continue
		}
		found = append(found, a)
		if a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			active = append(active, a)
		}
	}
	switch {
	case len(found) == 1:
		return found[0].GetId(), nil
	case len(active) == 1:
		return active[0].GetId(), nil
	case len(found) == 0:
		return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("no agent with hostname %q", hostname))
	}
	ids := make([]string, 0, len(found))
	for _, a := range found {
		ids = append(ids, a.GetId())
	}
	return "", fmt.Errorf("several agents have hostname %q (%s): use --agent ID", hostname, strings.Join(ids, ", "))
}

// errNoAgent is returned when a command needs an agent and none was named.
var errNoAgent = errors.New("want --agent ID or --hostname HOSTNAME")
