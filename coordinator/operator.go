package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/core"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/resources"
)

const maxWeight = 1e6

type operatorService struct{ c *Coordinator }

// Snapshots are built under the lock and sorted for stable output.

func (c *Coordinator) agentsProto() []*slacklinev1.Agent {
	out := make([]*slacklinev1.Agent, 0, len(c.agents))
	for _, a := range c.agents {
		var offered resources.Resources
		for _, o := range c.core.AgentOffers(a.ID) {
			offered = offered.Add(o.Resources)
		}
		alloc := c.core.Allocator()
		_, allocatedRevocable := alloc.AgentRevocable(a.ID)
		pa := &slacklinev1.Agent{
			Id: a.ID, Hostname: a.Info.GetHostname(), Resources: a.Total.Proto("", resources.Regular),
			Allocated: alloc.AgentAllocated(a.ID).Proto("", resources.Regular), Offered: offered.Proto("", resources.Regular),
			Revocable: c.core.AgentRevocable(a.ID).Proto("", resources.Revocable), AllocatedRevocable: allocatedRevocable.Proto("", resources.Revocable),
			Attributes: a.Info.GetAttributes(), Mode: a.Maint.Mode, State: a.State,
			RegisteredTime: timestamppb.New(a.RegisteredAt), Endpoint: a.Info.GetEndpoint(), Ip: a.Info.GetIp(),
		}
		out = append(out, pa)
	}
	slices.SortFunc(out, func(x, y *slacklinev1.Agent) int {
		return strings.Compare(x.GetHostname()+x.GetId(), y.GetHostname()+y.GetId())
	})
	return out
}

func (c *Coordinator) frameworksProto() []*slacklinev1.Framework {
	out := make([]*slacklinev1.Framework, 0, len(c.frameworks))
	for _, fw := range c.frameworks {
		pf := &slacklinev1.Framework{
			Info: fw.info, State: fw.state, Allocated: c.core.Allocator().FrameworkAllocated(fw.id()).Proto("", resources.Regular),
			Offered: c.core.FrameworkOffered(fw.id()).Proto("", resources.Regular), SuppressedRoles: c.core.Suppressed(fw.id()), RegisteredTime: c.core.FrameworkRecord(fw.id()).GetRegisteredTime(),
		}
		if fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED {
			pf.DisconnectedTime = timestamppb.New(fw.disconnectedAt)
		}
		out = append(out, pf)
	}
	slices.SortFunc(out, func(x, y *slacklinev1.Framework) int {
		return strings.Compare(x.GetInfo().GetName()+x.GetInfo().GetId(), y.GetInfo().GetName()+y.GetInfo().GetId())
	})
	return out
}

func (c *Coordinator) tasksProto(frameworkID, agentID string) []*slacklinev1.Task {
	var out []*slacklinev1.Task
	for _, fw := range c.frameworks {
		if frameworkID != "" && fw.id() != frameworkID {
			continue
		}
		for _, list := range [][]*core.Task{slices.Collect(c.core.FrameworkTasks(fw.id())), c.core.Completed(fw.id())} {
			for _, t := range list {
				if agentID == "" || t.AgentID == agentID {
					out = append(out, t.Proto())
				}
			}
		}
	}
	slices.SortFunc(out, func(x, y *slacklinev1.Task) int {
		return strings.Compare(x.GetFrameworkId()+"/"+x.GetTaskId(), y.GetFrameworkId()+"/"+y.GetTaskId())
	})
	return out
}

func (c *Coordinator) rolesProto() []*slacklinev1.Role {
	states := c.core.Allocator().RoleStates()
	out := make([]*slacklinev1.Role, 0, len(states))
	for _, rs := range states {
		r := &slacklinev1.Role{
			Name: rs.Name, Weight: rs.Weight, Allocated: rs.Allocated.Proto(rs.Name, resources.Regular),
			FrameworkIds: rs.Frameworks, DominantShare: rs.Share,
		}
		if !rs.QuotaLimit.IsEmpty() {
			r.Quota = &slacklinev1.Quota{Limits: rs.QuotaLimit.Proto(rs.Name, resources.Regular)}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y *slacklinev1.Role) int { return strings.Compare(x.GetName(), y.GetName()) })
	return out
}

func (s operatorService) GetState(ctx context.Context, _ *connect.Request[slacklinev1.GetStateRequest]) (*connect.Response[slacklinev1.GetStateResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return connect.NewResponse(c.visibleState(ctx, &slacklinev1.GetStateResponse{
		Agents: c.agentsProto(), Frameworks: c.frameworksProto(), Tasks: c.tasksProto("", ""), Roles: c.rolesProto(),
		LeaderUrl: c.cfg.AdvertiseURL,
	})), nil
}

func (s operatorService) GetAgents(ctx context.Context, _ *connect.Request[slacklinev1.GetAgentsRequest]) (*connect.Response[slacklinev1.GetAgentsResponse], error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	visible := s.c.visibleState(ctx, &slacklinev1.GetStateResponse{Agents: s.c.agentsProto()})
	return connect.NewResponse(&slacklinev1.GetAgentsResponse{Agents: visible.Agents}), nil
}

func (s operatorService) GetFrameworks(ctx context.Context, _ *connect.Request[slacklinev1.GetFrameworksRequest]) (*connect.Response[slacklinev1.GetFrameworksResponse], error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	visible := s.c.visibleState(ctx, &slacklinev1.GetStateResponse{Frameworks: s.c.frameworksProto()})
	return connect.NewResponse(&slacklinev1.GetFrameworksResponse{Frameworks: visible.Frameworks}), nil
}

func (s operatorService) GetTasks(ctx context.Context, req *connect.Request[slacklinev1.GetTasksRequest]) (*connect.Response[slacklinev1.GetTasksResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if id := req.Msg.GetFrameworkId(); id != "" && (c.frameworks[id] == nil || !c.mayView(ctx, auth.ViewTasks, c.principalOfFramework(id))) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("framework %q is unknown", id))
	}
	if id := req.Msg.GetAgentId(); id != "" && c.agents[id] == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %q is unknown", id))
	}
	visible := c.visibleState(ctx, &slacklinev1.GetStateResponse{Tasks: c.tasksProto(req.Msg.GetFrameworkId(), req.Msg.GetAgentId())})
	return connect.NewResponse(&slacklinev1.GetTasksResponse{Tasks: visible.Tasks}), nil
}

func (s operatorService) GetRoles(ctx context.Context, _ *connect.Request[slacklinev1.GetRolesRequest]) (*connect.Response[slacklinev1.GetRolesResponse], error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	visible := s.c.visibleState(ctx, &slacklinev1.GetStateResponse{Roles: s.c.rolesProto()})
	return connect.NewResponse(&slacklinev1.GetRolesResponse{Roles: visible.Roles}), nil
}

func (s operatorService) UpdateWeights(ctx context.Context, req *connect.Request[slacklinev1.UpdateWeightsRequest]) (*connect.Response[slacklinev1.UpdateWeightsResponse], error) {
	if len(req.Msg.GetWeights()) == 0 {
		return nil, invalidArgument(errors.New("weights is empty"))
	}
	configs := make([]core.RoleConfig, 0, len(req.Msg.GetWeights()))
	for _, w := range req.Msg.GetWeights() {
		if err := validateRole(w.GetRole()); err != nil {
			return nil, invalidArgument(err)
		}
		if v := w.GetWeight(); math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > maxWeight {
			return nil, invalidArgument(fmt.Errorf("weight %v of role %q must be a finite number in (0, %g]", v, w.GetRole(), float64(maxWeight)))
		}
		configs = append(configs, core.RoleConfig{Role: w.GetRole(), Weight: w.GetWeight()})
	}
	if err := s.c.updateRoles(ctx, "weights", configs); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.UpdateWeightsResponse{}), nil
}

func (s operatorService) UpdateQuota(ctx context.Context, req *connect.Request[slacklinev1.UpdateQuotaRequest]) (*connect.Response[slacklinev1.UpdateQuotaResponse], error) {
	if len(req.Msg.GetConfigs()) == 0 {
		return nil, invalidArgument(errors.New("configs is empty"))
	}
	configs := make([]core.RoleConfig, 0, len(req.Msg.GetConfigs()))
	for _, cfg := range req.Msg.GetConfigs() {
		if err := validateRole(cfg.GetRole()); err != nil {
			return nil, invalidArgument(err)
		}
		regular, revocable, err := resources.FromProto(cfg.GetLimits())
		if err != nil {
			return nil, invalidArgument(fmt.Errorf("quota of role %q: %w", cfg.GetRole(), err))
		}
		if !revocable.IsEmpty() {
			return nil, invalidArgument(fmt.Errorf("quota of role %q: revocable resources never count against quota", cfg.GetRole()))
		}
		configs = append(configs, core.RoleConfig{Role: cfg.GetRole(), Quota: regular, SetQuota: true})
	}
	if err := s.c.updateRoles(ctx, "quota", configs); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.UpdateQuotaResponse{}), nil
}

// updateRoles changes role weights and quota limits through the core's
// persist step. It takes a turn of the roles' scope (role changes are
// ordered changes; order.go) and c.mu.
func (c *Coordinator) updateRoles(ctx context.Context, what string, configs []core.RoleConfig) error {
	defer c.takeTurn(scopeRoles)()
	return c.step(ctx, what, func() core.Ready { return c.core.UpdateRoles(configs) })
}
