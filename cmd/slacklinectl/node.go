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
// NodeService of the agent that has it.

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

// agentEndpoint returns the NodeService URL of the agent with id agentID.
func (g *globals) agentEndpoint(ctx context.Context, agentID string) (string, error) {
	agents, err := g.operator().GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil {
		return "", err
	}
	for _, a := range agents.Msg.GetAgents() {
		if a.GetId() == agentID {
			return g.endpointOf(a)
		}
	}
	return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %q not found", agentID))
}

// hostEndpoint returns the NodeService URL of the agent registered with
// hostname. When the host registered more than once (an agent that lost its
// checkpoint), the active agent is the one meant.
func (g *globals) hostEndpoint(ctx context.Context, hostname string) (string, error) {
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
		return g.endpointOf(found[0])
	case len(active) == 1:
		return g.endpointOf(active[0])
	case len(found) == 0:
		return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("no agent with hostname %q", hostname))
	}
	ids := make([]string, 0, len(found))
	for _, a := range found {
		ids = append(ids, a.GetId())
	}
	return "", fmt.Errorf("several agents have hostname %q (%s): use --agent URL", hostname, strings.Join(ids, ", "))
}

func (g *globals) endpointOf(a *slacklinev1.Agent) (string, error) {
	if a.GetEndpoint() == "" {
		return "", fmt.Errorf("agent %q (%s) registered no NodeService endpoint: use --agent URL", a.GetId(), a.GetHostname())
	}
	g.rememberNode(a.GetEndpoint(), a.GetHostname())
	return a.GetEndpoint(), nil
}

// errNoAgent is returned when a command needs an agent and none was named.
var errNoAgent = errors.New("want --agent URL or --hostname HOSTNAME")
