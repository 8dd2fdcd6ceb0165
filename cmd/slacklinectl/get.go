package main

import (
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

var getResources = []string{"agents", "frameworks", "tasks", "roles", "containers", "features"}

// newGetCommand is "get RESOURCE": read-only views of the cluster. Rows
// are in natural order (batch-2 before batch-10), and the JSON and YAML
// lists in the same order; names are shown where the API has ids, which
// -o wide adds.
func newGetCommand(g *globals) *cobra.Command {
	get := &cobra.Command{
		Use:   "get RESOURCE",
		Short: "Show agents, frameworks, tasks, roles, or an agent's containers or features",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("get: want a resource: %s", strings.Join(getResources, ", "))
			}
			return usageErrorf("get: unknown resource %q: want one of %s", args[0], strings.Join(getResources, ", "))
		},
	}

	agents := &cobra.Command{
		Use:     "agents [HOSTNAME|ID...]",
		Aliases: []string{"agent"},
		Short:   "List agents (all, or those named): resources, allocation, revocable estimate, maintenance mode",
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := g.operator().GetAgents(cmd.Context(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
			if err != nil {
				return fmt.Errorf("get agents: %w", err)
			}
			list := resp.Msg.GetAgents()
			if len(args) > 0 {
				var picked []*slacklinev1.Agent
				for _, name := range args {
					n := len(picked)
					for _, a := range list {
						if (a.GetHostname() == name || a.GetId() == name) && !slices.Contains(picked, a) {
							picked = append(picked, a)
						}
					}
					if len(picked) == n {
						return fmt.Errorf("get agents: %w", notFoundf("no agent with hostname or id %q", name))
					}
				}
				list = picked
			}
			slices.SortStableFunc(list, func(x, y *slacklinev1.Agent) int {
				return naturalCompare(x.GetHostname(), y.GetHostname())
			})
			resp.Msg.Agents = list
			return g.print(resp.Msg, agentTable(list))
		},
	}

	frameworks := &cobra.Command{
		Use:     "frameworks [NAME|ID...]",
		Aliases: []string{"framework"},
		Short:   "List frameworks (all, or those named): roles, state and allocation",
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := g.operator().GetFrameworks(cmd.Context(), connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
			if err != nil {
				return fmt.Errorf("get frameworks: %w", err)
			}
			list := resp.Msg.GetFrameworks()
			if len(args) > 0 {
				var picked []*slacklinev1.Framework
				for _, name := range args {
					n := len(picked)
					for _, f := range list {
						if (f.GetInfo().GetName() == name || f.GetInfo().GetId() == name) && !slices.Contains(picked, f) {
							picked = append(picked, f)
						}
					}
					if len(picked) == n {
						return fmt.Errorf("get frameworks: %w", notFoundf("no framework with name or id %q", name))
					}
				}
				list = picked
			}
			slices.SortStableFunc(list, func(x, y *slacklinev1.Framework) int {
				return naturalCompare(x.GetInfo().GetName(), y.GetInfo().GetName())
			})
			resp.Msg.Frameworks = list
			return g.print(resp.Msg, frameworkTable(list))
		},
	}

	var taskFramework, taskAgent string
	tasks := &cobra.Command{
		Use:     "tasks",
		Aliases: []string{"task"},
		Short:   "List tasks with their state and latest status message",
		Args:    exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var req slacklinev1.GetTasksRequest
			var err error
			if taskFramework != "" {
				if req.FrameworkId, err = g.resolveFramework(cmd.Context(), taskFramework); err != nil {
					return fmt.Errorf("get tasks: --framework: %w", err)
				}
			}
			if taskAgent != "" {
				if req.AgentId, err = g.resolveAgent(cmd.Context(), taskAgent); err != nil {
					return fmt.Errorf("get tasks: --agent: %w", err)
				}
			}
			resp, err := g.operator().GetTasks(cmd.Context(), connect.NewRequest(&req))
			if err != nil {
				return fmt.Errorf("get tasks: %w", err)
			}
			var n names
			if !g.structured() {
				n = g.names(cmd.Context())
			}
			list := resp.Msg.GetTasks()
			slices.SortStableFunc(list, func(x, y *slacklinev1.Task) int {
				if c := naturalCompare(n.framework(x.GetFrameworkId()), n.framework(y.GetFrameworkId())); c != 0 {
					return c
				}
				return naturalCompare(x.GetTaskId(), y.GetTaskId())
			})
			return g.print(resp.Msg, taskTable(list, n))
		},
	}
	tasks.Flags().StringVar(&taskFramework, "framework", "", "only the tasks of this framework (name or id)")
	tasks.Flags().StringVar(&taskAgent, "agent", "", "only the tasks on this agent (hostname or id)")

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
			var n names
			if !g.structured() {
				n = g.names(cmd.Context())
			}
			slices.SortStableFunc(resp.Msg.Roles, func(x, y *slacklinev1.Role) int { return naturalCompare(x.GetName(), y.GetName()) })
			return g.print(resp.Msg, roleTable(resp.Msg.GetRoles(), n))
		},
	}

	var agent agentFlags
	containers := &cobra.Command{
		Use:     "containers [--agent HOST]",
		Aliases: []string{"container"},
		Short:   "List the containers of one agent (--agent HOST, or the only agent)",
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
			var n names
			if !g.structured() {
				n = g.names(cmd.Context())
			}
			slices.SortStableFunc(resp.Msg.Containers, func(x, y *slacklinev1.Container) int {
				return naturalCompare(x.GetTaskId(), y.GetTaskId())
			})
			return g.print(resp.Msg, containerTable(resp.Msg.GetContainers(), n))
		},
	}
	agent.register(containers)

	get.AddCommand(agents, frameworks, tasks, roles, containers, newFeaturesCommand(g), newImagesCommand(g), newGetEstimateCommand(g), newGetShadowsCommand(g))
	return get
}
