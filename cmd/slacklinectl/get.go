package main

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

var getResources = []string{"agents", "frameworks", "tasks", "roles", "containers"}

// newGetCommand is "get RESOURCE": read-only views of the cluster.
func newGetCommand(g *globals) *cobra.Command {
	get := &cobra.Command{
		Use:   "get RESOURCE",
		Short: "Show agents, frameworks, tasks, roles or an agent's containers",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("get: want a resource: %s", strings.Join(getResources, ", "))
			}
			return fmt.Errorf("get: unknown resource %q: want one of %s", args[0], strings.Join(getResources, ", "))
		},
	}

	agents := &cobra.Command{
		Use:     "agents",
		Aliases: []string{"agent"},
		Short:   "List agents: resources, allocation, revocable estimate, maintenance mode",
		Args:    exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := g.operator().GetAgents(cmd.Context(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
			if err != nil {
				return fmt.Errorf("get agents: %w", err)
			}
			return g.print(resp.Msg, agentTable(resp.Msg.GetAgents()))
		},
	}

	frameworks := &cobra.Command{
		Use:     "frameworks",
		Aliases: []string{"framework"},
		Short:   "List frameworks: roles, state and allocation",
		Args:    exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := g.operator().GetFrameworks(cmd.Context(), connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
			if err != nil {
				return fmt.Errorf("get frameworks: %w", err)
			}
			return g.print(resp.Msg, frameworkTable(resp.Msg.GetFrameworks()))
		},
	}

	var taskFilter slacklinev1.GetTasksRequest
	tasks := &cobra.Command{
		Use:     "tasks",
		Aliases: []string{"task"},
		Short:   "List tasks with their state and latest status message",
		Args:    exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := g.operator().GetTasks(cmd.Context(), connect.NewRequest(&taskFilter))
			if err != nil {
				return fmt.Errorf("get tasks: %w", err)
			}
			return g.print(resp.Msg, taskTable(resp.Msg.GetTasks()))
		},
	}
	tasks.Flags().StringVar(&taskFilter.FrameworkId, "framework", "", "only the tasks of this framework id")
	tasks.Flags().StringVar(&taskFilter.AgentId, "agent", "", "only the tasks on this agent id")

	roles := &cobra.Command{
		Use:     "roles",
		Aliases: []string{"role"},
		Short:   "List roles: weight, quota, allocation and dominant share",
		Args:    exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := g.operator().GetRoles(cmd.Context(), connect.NewRequest(&slacklinev1.GetRolesRequest{}))
			if err != nil {
				return fmt.Errorf("get roles: %w", err)
			}
			return g.print(resp.Msg, roleTable(resp.Msg.GetRoles()))
		},
	}

	var agent agentFlags
	containers := &cobra.Command{
		Use:     "containers",
		Aliases: []string{"container"},
		Short:   "List the containers of one agent (--agent ID or --hostname H)",
		Args:    exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			agentID, err := agent.agent(cmd.Context(), g)
			if err != nil {
				return fmt.Errorf("get containers: %w", err)
			}
			resp, err := g.node(agentID).GetContainers(cmd.Context(), connect.NewRequest(&slacklinev1.GetContainersRequest{}))
			if err != nil {
				return fmt.Errorf("get containers: %w", err)
			}
			return g.print(resp.Msg, containerTable(resp.Msg.GetContainers()))
		},
	}
	agent.register(containers)

	get.AddCommand(agents, frameworks, tasks, roles, containers, newFeaturesCommand(g), newGetEstimateCommand(g))
	return get
}
