package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// CgroupModeSimulated is the cgroup_mode of every container a simulated
// agent reports: it marks the container as pretend (no cgroup, no process).
const CgroupModeSimulated = "simulated"

// MaxEndedContainers bounds, per agent, the ended pretend containers kept
// so that their output can still be read (slacklinectl logs); past it the
// oldest is forgotten and Fleet.EndedContainersDropped counts it.
const MaxEndedContainers = 100

// DefaultUsage is the fraction of its cpus and mem a pretend container
// reports using when its task has no LabelUsage.
const DefaultUsage = 0.5

// container is a pretend container of a simulated agent.
type container struct {
	id        string
	key       tasks.Key
	principal string
	command   string
	resources resources.Resources
	revocable bool
	usage     float64
	started   time.Time
	ended     bool
	message   string // how it ended
}

// stdout is the pretend container's standard output: it says that nothing
// ran, what would have, and how it ended.
func (c *container) stdout() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "slackline-sim: simulated task %q of framework %s: no process runs here\n", c.key.TaskID, c.key.FrameworkID)
	if c.command != "" {
		fmt.Fprintf(&b, "slackline-sim: a real agent would run: %s\n", c.command)
	}
	if c.ended {
		fmt.Fprintf(&b, "slackline-sim: ended: %s\n", c.message)
	}
	return []byte(b.String())
}

// recordStartLocked records a pretend container that started running.
func (a *Agent) recordStartLocked(start tasks.Start, usage float64, now time.Time) {
	cmd := start.Task.GetCommand()
	command := cmd.GetValue()
	if args := cmd.GetArguments(); len(args) > 0 && !cmd.GetShell() {
		command = strings.Join(args, " ")
	}
	a.containers[start.ContainerID] = &container{
		id: start.ContainerID, key: start.Key, principal: start.Framework.GetPrincipal(), command: command,
		resources: start.Resources, revocable: start.Revocable, usage: usage, started: now,
	}
}

// recordEndLocked marks a pretend container ended, keeping at most
// MaxEndedContainers ended ones.
func (a *Agent) recordEndLocked(containerID, message string) {
	c := a.containers[containerID]
	if c == nil || c.ended {
		return
	}
	c.ended, c.message = true, message
	a.ended = append(a.ended, containerID)
	if len(a.ended) > MaxEndedContainers {
		delete(a.containers, a.ended[0])
		a.ended = slices.Delete(a.ended, 0, 1)
		a.fleet.endedDropped.Add(1)
	}
}

// EndedContainersDropped counts the ended pretend containers forgotten
// because an agent already kept MaxEndedContainers.
func (f *Fleet) EndedContainersDropped() uint64 { return f.endedDropped.Load() }

// NodeHandler returns the HTTP handler of the fleet's NodeService: the
// real agent's API (slackline.v1.NodeService) over the agents' pretend
// containers, marked CgroupModeSimulated, with gRPC health and reflection.
// A call is for the agent whose hostname the TLS client asked for (SNI,
// which the coordinator's node proxy sets to the agent's registered
// hostname) or, without TLS, the Host header's name; a fleet of one agent
// answers every call. With authz, every call is authenticated and
// authorized as the real agent's are (auth.Rules: the coordinator's
// certificate may call them).
func (f *Fleet) NodeHandler(authz *auth.Authorizer) http.Handler {
	mux := http.NewServeMux()
	opts := append(server.HandlerOptions(), connect.WithInterceptors(authz.Interceptor()))
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(simNode{f, authz}, opts...))
	server.MountStandard(mux, slacklinev1connect.NodeServiceName)
	return withHost(authz.Middleware(mux))
}

type simNode struct {
	f     *Fleet
	authz *auth.Authorizer
}

// hostKey carries, in a call's context, the hostname it is for.
type hostKey struct{}

// withHost puts the hostname a request is for in its context: the TLS
// server name when there is one, else the Host header's name.
func withHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if r.TLS != nil && r.TLS.ServerName != "" {
			host = r.TLS.ServerName
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), hostKey{}, host)))
	})
}

// agent returns the agent a call is for.
func (s simNode) agent(ctx context.Context) (*Agent, error) {
	if len(s.f.agents) == 1 {
		return s.f.agents[0], nil
	}
	host, _ := ctx.Value(hostKey{}).(string)
	for _, a := range s.f.agents {
		if strings.EqualFold(a.hostname, host) {
			return a, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no simulated agent has hostname %q", host))
}

func (s simNode) GetContainers(ctx context.Context, req *connect.Request[slacklinev1.GetContainersRequest]) (*connect.Response[slacklinev1.GetContainersResponse], error) {
	a, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	out := make([]*slacklinev1.Container, 0, len(a.containers))
	for _, c := range a.containers {
		if c.ended {
			continue
		}
		state := slacklinev1.TaskState_TASK_STATE_RUNNING
		if v, ok := a.machine.Task(c.key); ok {
			state = v.State
		}
		out = append(out, &slacklinev1.Container{
			ContainerId: c.id, TaskId: c.key.TaskID, FrameworkId: c.key.FrameworkID,
			Resources: c.resources.Proto("", resources.Revocability(c.revocable)), Revocable: c.revocable,
			State: state, StartedTime: timestamppb.New(c.started), CgroupMode: CgroupModeSimulated,
		})
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y *slacklinev1.Container) int { return strings.Compare(x.GetTaskId(), y.GetTaskId()) })
	return connect.NewResponse(&slacklinev1.GetContainersResponse{Containers: out}), nil
}

func (s simNode) GetUsage(ctx context.Context, req *connect.Request[slacklinev1.GetUsageRequest]) (*connect.Response[slacklinev1.GetUsageResponse], error) {
	a, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	resp := &slacklinev1.GetUsageResponse{}
	var cpus float64
	var mem uint64
	a.mu.Lock()
	for _, c := range a.containers {
		if c.ended {
			continue
		}
		st := pretendStatistics(c, now)
		cpus += st.GetCpusRate()
		mem += st.GetMemRssBytes()
		resp.Usage = append(resp.Usage, &slacklinev1.ContainerUsage{TaskId: c.key.TaskID, Statistics: st})
	}
	a.mu.Unlock()
	total := s.f.cfg.Resources
	totalMem := uint64(total.Mem() * (1 << 20))
	resp.Node = &slacklinev1.ResourceStatistics{
		Timestamp: timestamppb.New(now), CpusRate: cpus, CpusLimit: total.CPUs(),
		MemRssBytes: mem, MemLimitBytes: totalMem, MemAvailableBytes: totalMem - min(mem, totalMem),
	}
	slices.SortFunc(resp.Usage, func(x, y *slacklinev1.ContainerUsage) int { return strings.Compare(x.GetTaskId(), y.GetTaskId()) })
	return connect.NewResponse(resp), nil
}

// pretendStatistics is what a pretend container reports using: its usage
// fraction of its cpus and mem, and the CPU time that makes since it
// started.
func pretendStatistics(c *container, now time.Time) *slacklinev1.ResourceStatistics {
	cpus := c.resources.CPUs()
	memLimit := uint64(c.resources.Mem() * (1 << 20))
	rate := cpus * c.usage
	return &slacklinev1.ResourceStatistics{
		Timestamp: timestamppb.New(now), CpusRate: rate, CpusLimit: cpus,
		CpusUserTimeSecs: rate * now.Sub(c.started).Seconds(),
		MemRssBytes:      uint64(float64(memLimit) * c.usage), MemLimitBytes: memLimit,
	}
}

func (s simNode) GetFeatures(ctx context.Context, req *connect.Request[slacklinev1.GetFeaturesRequest]) (*connect.Response[slacklinev1.GetFeaturesResponse], error) {
	if _, err := s.agent(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.GetFeaturesResponse{Features: []*slacklinev1.Feature{{
		Name: "simulated", Status: slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED,
		Detail: "a simulated agent (slackline-sim) runs no eBPF programs: run the real agent, as root, for its probes",
	}}}), nil
}

// GetImages: a simulated agent pulls no images; it lists none.
func (s simNode) GetImages(ctx context.Context, _ *connect.Request[slacklinev1.GetImagesRequest]) (*connect.Response[slacklinev1.GetImagesResponse], error) {
	if _, err := s.agent(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.GetImagesResponse{}), nil
}

// GetShadows: a simulated agent runs no estimator, so no shadows either.
func (s simNode) GetShadows(context.Context, *connect.Request[slacklinev1.GetShadowsRequest]) (*connect.Response[slacklinev1.GetShadowsResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("a simulated agent runs no estimator, so no shadow settings"))
}

func (s simNode) GetEstimate(context.Context, *connect.Request[slacklinev1.GetEstimateRequest]) (*connect.Response[slacklinev1.GetEstimateResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("a simulated agent runs no estimator (see slackline-sim --revocable)"))
}

func (s simNode) GetCorrections(context.Context, *connect.Request[slacklinev1.GetCorrectionsRequest]) (*connect.Response[slacklinev1.GetCorrectionsResponse], error) {
	return connect.NewResponse(&slacklinev1.GetCorrectionsResponse{}), nil
}

// Pretend sandbox files.
const (
	stdoutFile = "stdout"
	stderrFile = "stderr"
)

func (s simNode) ReadSandboxFile(ctx context.Context, req *connect.Request[slacklinev1.ReadSandboxFileRequest]) (*connect.Response[slacklinev1.ReadSandboxFileResponse], error) {
	a, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	msg := req.Msg
	if msg.GetTaskId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("task_id is empty"))
	}
	rel := filepath.Clean(msg.GetPath())
	if rel != stdoutFile && rel != stderrFile {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s not found in the sandbox of %q: a simulated task has only stdout and stderr", msg.GetPath(), msg.GetTaskId()))
	}
	a.mu.Lock()
	var found *container
	for _, c := range a.containers {
		if c.key.TaskID == msg.GetTaskId() && (msg.GetFrameworkId() == "" || c.key.FrameworkID == msg.GetFrameworkId()) &&
			(found == nil || c.started.After(found.started)) {
			found = c
		}
	}
	var data []byte
	var principal string
	if found != nil {
		principal = found.principal
		if rel == stdoutFile {
			data = found.stdout()
		}
	}
	a.mu.Unlock()
	if found == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no sandbox for task %q on this agent", msg.GetTaskId()))
	}
	if s.authz.Enabled() {
		if p := auth.FromContext(ctx); p == nil || (!p.IsCoordinator() && (principal == "" || p.Name != principal)) {
			if err := s.authz.Check(ctx, auth.AccessSandboxes, principal); err != nil {
				return nil, err
			}
		}
	}
	size := int64(len(data))
	offset := msg.GetOffset()
	if offset < 0 {
		offset = max(0, size+offset)
	}
	offset = min(offset, size)
	end := size
	if l := msg.GetLength(); l > 0 {
		end = min(size, offset+l)
	}
	return connect.NewResponse(&slacklinev1.ReadSandboxFileResponse{Data: data[offset:end], Offset: offset, Size: size}), nil
}

// parseUsage reads LabelUsage.
func parseUsage(labels map[string]string) (float64, error) {
	v, ok := labels[LabelUsage]
	if !ok {
		return DefaultUsage, nil
	}
	u, err := strconv.ParseFloat(v, 64)
	if err != nil || u < 0 || u > 1 {
		return 0, fmt.Errorf("invalid %s label %q: want a fraction between 0 and 1", LabelUsage, v)
	}
	return u, nil
}

// errSimHistory answers GetHistory and GetDelays: pretend containers have
// no measured series.
var errSimHistory = connect.NewError(connect.CodeFailedPrecondition,
	errors.New("a simulated agent (slackline-sim) measures nothing, so it keeps no history and no who-delayed-whom: run the real agent, as root"))

// GetHistory: a simulated agent keeps no history.
func (s simNode) GetHistory(ctx context.Context, _ *connect.Request[slacklinev1.GetHistoryRequest]) (*connect.Response[slacklinev1.GetHistoryResponse], error) {
	if _, err := s.agent(ctx); err != nil {
		return nil, err
	}
	return nil, errSimHistory
}

// GetDelays: a simulated agent runs no eBPF programs.
func (s simNode) GetDelays(ctx context.Context, _ *connect.Request[slacklinev1.GetDelaysRequest]) (*connect.Response[slacklinev1.GetDelaysResponse], error) {
	if _, err := s.agent(ctx); err != nil {
		return nil, err
	}
	return nil, errSimHistory
}
