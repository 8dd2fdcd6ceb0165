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

// Lookups in the coordinator that turn the names an operator types
// (hostnames, framework names, task names) into ids, and lead from a task
// or a hostname to the agent that has it, whose NodeService the
// coordinator's node proxy reaches (globals.node). Ids are accepted
// wherever names are: an exact id wins over a name.

// findTask returns the task whose id (or, failing that, name) is task, of
// framework frameworkID when that is set. A task id or name that several
// frameworks use needs frameworkID.
func (g *globals) findTask(ctx context.Context, task, frameworkID string) (*slacklinev1.Task, error) {
	resp, err := g.operator().GetTasks(ctx, connect.NewRequest(&slacklinev1.GetTasksRequest{FrameworkId: frameworkID}))
	if err != nil {
		return nil, err
	}
	var byID, byName []*slacklinev1.Task
	for _, t := range resp.Msg.GetTasks() {
		if frameworkID != "" && t.GetFrameworkId() != frameworkID {
			continue
		}
		if t.GetTaskId() == task {
			byID = append(byID, t)
		} else if t.GetName() == task {
			byName = append(byName, t)
		}
	}
	found := byID
	if len(found) == 0 {
		found = byName
	}
	switch len(found) {
	case 0:
		if frameworkID != "" {
			return nil, notFoundf("task %q of framework %q not found", task, frameworkID)
		}
		return nil, notFoundf("task %q not found", task)
	case 1:
		return found[0], nil
	}
	frameworks := make([]string, 0, len(found))
	for _, t := range found {
		frameworks = append(frameworks, t.GetFrameworkId())
	}
	slices.SortFunc(frameworks, naturalCompare)
	return nil, usageErrorf("task %q is in several frameworks (%s): choose one with --framework", task, strings.Join(frameworks, ", "))
}

// resolveAgent returns the id of the agent named agent: its id, or its
// hostname. When the host registered more than once (an agent that lost
// its checkpoint), the active agent is the one meant.
func (g *globals) resolveAgent(ctx context.Context, agent string) (string, error) {
	agents, err := g.operator().GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil {
		return "", err
	}
	return matchAgent(agents.Msg.GetAgents(), agent)
}

// matchAgent is resolveAgent over a list of agents.
func matchAgent(agents []*slacklinev1.Agent, agent string) (string, error) {
	var found, active []*slacklinev1.Agent
	for _, a := range agents {
		if a.GetId() == agent {
			return a.GetId(), nil
		}
		if a.GetHostname() != agent {
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
		return "", notFoundf("no agent with hostname or id %q (see slacklinectl get agents)", agent)
	}
	ids := make([]string, 0, len(found))
	for _, a := range found {
		ids = append(ids, a.GetId())
	}
	return "", usageErrorf("several agents have hostname %q (%s): name one by its id", agent, strings.Join(ids, ", "))
}

// onlyAgent returns the id of the cluster's only agent (or, when its one
// host registered more than once, the active one), for commands that name
// none.
func (g *globals) onlyAgent(ctx context.Context) (string, error) {
	agents, err := g.operator().GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil {
		return "", err
	}
	list := agents.Msg.GetAgents()
	hosts := map[string]bool{}
	var active []*slacklinev1.Agent
	for _, a := range list {
		hosts[a.GetHostname()] = true
		if a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			active = append(active, a)
		}
	}
	switch {
	case len(list) == 1:
		return list[0].GetId(), nil
	case len(hosts) == 1 && len(active) == 1: // one host, registered again
		return active[0].GetId(), nil
	case len(list) == 0:
		return "", notFoundf("no agent has registered (see slacklinectl get agents)")
	}
	names := make([]string, 0, len(hosts))
	for h := range hosts {
		names = append(names, h)
	}
	slices.SortFunc(names, naturalCompare)
	return "", usageError{fmt.Errorf("%w: %d agents (%s)", errNoAgent, len(list), strings.Join(names, ", "))}
}

// resolveFramework returns the id of the framework named framework: its
// id, or its name. Several frameworks of one name (a framework that
// re-registered under a new id) resolve to the one not completed, when
// there is one.
func (g *globals) resolveFramework(ctx context.Context, framework string) (string, error) {
	resp, err := g.operator().GetFrameworks(ctx, connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
	if err != nil {
		return "", err
	}
	var found, live []*slacklinev1.Framework
	for _, f := range resp.Msg.GetFrameworks() {
		if f.GetInfo().GetId() == framework {
			return framework, nil
		}
		if f.GetInfo().GetName() != framework {
			continue
		}
		found = append(found, f)
		if f.GetState() != slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
			live = append(live, f)
		}
	}
	switch {
	case len(found) == 1:
		return found[0].GetInfo().GetId(), nil
	case len(live) == 1:
		return live[0].GetInfo().GetId(), nil
	case len(found) == 0:
		return "", notFoundf("no framework with name or id %q (see slacklinectl get frameworks)", framework)
	}
	ids := make([]string, 0, len(found))
	for _, f := range found {
		ids = append(ids, f.GetInfo().GetId())
	}
	return "", usageErrorf("several frameworks are named %q (%s): name one by its id", framework, strings.Join(ids, ", "))
}

// names maps agent ids to hostnames and framework ids to names, for
// tables that would otherwise show ids. A failed lookup leaves the ids.
type names struct {
	hosts      map[string]string
	frameworks map[string]string
}

func (g *globals) names(ctx context.Context) names {
	n := names{hosts: map[string]string{}, frameworks: map[string]string{}}
	if agents, err := g.operator().GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{})); err == nil {
		for _, a := range agents.Msg.GetAgents() {
			n.hosts[a.GetId()] = a.GetHostname()
		}
	}
	if fws, err := g.operator().GetFrameworks(ctx, connect.NewRequest(&slacklinev1.GetFrameworksRequest{})); err == nil {
		for _, f := range fws.Msg.GetFrameworks() {
			n.frameworks[f.GetInfo().GetId()] = f.GetInfo().GetName()
		}
	}
	return n
}

// host returns the hostname of agent id, or the id.
func (n names) host(id string) string {
	if h := n.hosts[id]; h != "" {
		return h
	}
	return id
}

// framework returns the name of framework id, or the id.
func (n names) framework(id string) string {
	if name := n.frameworks[id]; name != "" {
		return name
	}
	return id
}

// errNoAgent is returned when a command needs an agent, none was named and
// the cluster has several.
var errNoAgent = errors.New("want --agent or --hostname (a hostname or an agent id)")
