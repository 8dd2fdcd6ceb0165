package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/tasks"
	"github.com/slackline/slackline/bpf"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// Sandbox reads: default and largest lengths.
const (
	defaultReadLength = 64 << 10
	maxReadLength     = 1 << 20
)

// Handler returns the HTTP handler of the agent's NodeService, with gRPC
// health, reflection and /metrics. With Config.Authz every request is
// authenticated and authorized (auth.Rules); health stays open.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	reg := prometheus.NewRegistry()
	rpc := server.NewRPCMetrics(reg)
	opts := append(server.HandlerOptions(), connect.WithInterceptors(rpc.Interceptor(), a.cfg.Authz.Interceptor()))
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(nodeService{a}, opts...))
	server.MountStandard(mux, slacklinev1connect.NodeServiceName)
	server.RegisterProcess(reg, "slackline-agent")
	reg.MustRegister(featuresCollector{a.features}, a.slack,
		a.qos.correctionsTotal, a.qos.reaction, a.qos.limits.hits, a.qos.deferredCounter(), qosStateCollector{a.cfg.Containerizer},
		warmSupervisorCollector{a.cfg.Containerizer})
	if a.shadows != nil {
		reg.MustRegister(shadowCollector{a.shadows})
	}
	if a.cfg.Monitor != nil {
		reg.MustRegister(a.cfg.Monitor.Collector())
	}
	if a.network != nil {
		reg.MustRegister(a.network.Collector())
	}
	if a.history != nil {
		reg.MustRegister(a.history.store.Collectors()...)
	}
	reg.MustRegister(a.fetch.Collector())
	reg.MustRegister(a.health.Collectors()...)
	if a.cfg.Images != nil {
		reg.MustRegister(a.cfg.Images.Collector())
	}
	mux.Handle(auth.MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if a.cfg.Pprof {
		server.MountPprof(mux)
	}
	return a.cfg.Authz.Middleware(mux)
}

type nodeService struct{ a *Agent }

func (s nodeService) GetContainers(ctx context.Context, _ *connect.Request[slacklinev1.GetContainersRequest]) (*connect.Response[slacklinev1.GetContainersResponse], error) {
	a := s.a
	containers := a.cfg.Containerizer.Containers()
	states := map[tasks.Key]slacklinev1.TaskState{}
	a.tasks.read(func(m *tasks.Machine) {
		for _, c := range containers {
			if v, ok := m.Task(tasks.Key{FrameworkID: c.Spec.FrameworkID, TaskID: c.Spec.TaskID}); ok {
				states[v.Key] = v.State
			}
		}
	})
	out := make([]*slacklinev1.Container, 0, len(containers))
	for _, c := range containers {
		pc := &slacklinev1.Container{
			ContainerId: c.ID, TaskId: c.Spec.TaskID, FrameworkId: c.Spec.FrameworkID, CgroupPath: c.CgroupPath,
			Resources: c.Spec.Resources.Proto("", resources.Revocability(c.Spec.Revocable)), Sandbox: c.Sandbox, Revocable: c.Spec.Revocable,
			Pid: int32(c.Pid), StartedTime: timestamppb.New(c.StartedAt), CgroupMode: string(c.Mode),
		}
		pc.State = states[tasks.Key{FrameworkID: c.Spec.FrameworkID, TaskID: c.Spec.TaskID}]
		out = append(out, pc)
	}
	slices.SortFunc(out, func(x, y *slacklinev1.Container) int { return strings.Compare(x.GetTaskId(), y.GetTaskId()) })
	return connect.NewResponse(&slacklinev1.GetContainersResponse{Containers: out}), nil
}

// sandboxOf returns the sandbox directory of a task the agent knows, and
// the principal of the task's framework ("" when unknown).
func (a *Agent) sandboxOf(frameworkID, taskID string) (sandbox, principal string, err error) {
	// The checkpoint records every launched task's sandbox and principal;
	// ended containers keep their sandbox.
	path, principal, err := a.ckpt.sandbox(context.Background(), frameworkID, taskID)
	for _, c := range a.cfg.Containerizer.Containers() {
		if c.Spec.TaskID == taskID && (frameworkID == "" || c.Spec.FrameworkID == frameworkID) {
			if path != c.Sandbox {
				principal = "" // not this container's record
			}
			return c.Sandbox, principal, nil
		}
	}
	if err == nil && path != "" {
		return path, principal, nil
	}
	return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("no sandbox for task %q on this agent", taskID))
}

// maySeeSandbox checks that the caller may read a sandbox of a framework
// of principal: it is that principal, or is granted access_sandboxes on it,
// or it is the coordinator's identity, whose node proxy checked exactly
// that for its own caller before forwarding (slacklinectl logs).
func (a *Agent) maySeeSandbox(ctx context.Context, principal string) error {
	authz := a.cfg.Authz
	if !authz.Enabled() {
		return nil
	}
	if p := auth.FromContext(ctx); p != nil && (p.IsCoordinator() || (principal != "" && p.Name == principal)) {
		return nil
	}
	return authz.Check(ctx, auth.AccessSandboxes, principal)
}

func (s nodeService) ReadSandboxFile(ctx context.Context, req *connect.Request[slacklinev1.ReadSandboxFileRequest]) (*connect.Response[slacklinev1.ReadSandboxFileResponse], error) {
	msg := req.Msg
	if msg.GetTaskId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("task_id is empty"))
	}
	rel := filepath.Clean(msg.GetPath())
	if msg.GetPath() == "" || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q must be relative to the sandbox, e.g. stdout", msg.GetPath()))
	}
	length := msg.GetLength()
	switch {
	case length == 0:
		length = defaultReadLength
	case length < 0 || length > maxReadLength:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("length %d must be between 1 and %d", length, maxReadLength))
	}
	sandbox, principal, err := s.a.sandboxOf(msg.GetFrameworkId(), msg.GetTaskId())
	if err != nil {
		return nil, err
	}
	if err := s.a.maySeeSandbox(ctx, principal); err != nil {
		return nil, err
	}
	// The task controls its sandbox: open through an os.Root so symlinks
	// cannot lead outside it, without blocking on FIFOs, regular files only.
	root, err := os.OpenRoot(sandbox)
	if err != nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("sandbox of %q: %w", msg.GetTaskId(), err))
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s not found in the sandbox of %q", rel, msg.GetTaskId()))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s in the sandbox of %q: %w", rel, msg.GetTaskId(), err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if !info.Mode().IsRegular() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s in the sandbox of %q is not a regular file", rel, msg.GetTaskId()))
	}
	offset := msg.GetOffset()
	if offset < 0 {
		offset = max(0, info.Size()+offset)
	}
	offset = min(offset, info.Size())
	buf := make([]byte, min(length, info.Size()-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&slacklinev1.ReadSandboxFileResponse{Data: buf[:n], Offset: offset, Size: info.Size()}), nil
}

func (s nodeService) GetUsage(context.Context, *connect.Request[slacklinev1.GetUsageRequest]) (*connect.Response[slacklinev1.GetUsageResponse], error) {
	m := s.a.cfg.Monitor
	if m == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this agent runs without a monitor"))
	}
	resp := &slacklinev1.GetUsageResponse{Node: m.Node().Stats}
	delays := s.a.watch.delayReader()
	for _, u := range m.Usages() {
		st := u.Stats
		if !u.Revocable && st != nil {
			if delays := delays(u.ContainerID); delays != nil {
				st = proto.Clone(st).(*slacklinev1.ResourceStatistics)
				st.DelayedBy = delays
			}
		}
		resp.Usage = append(resp.Usage, &slacklinev1.ContainerUsage{TaskId: u.TaskID, Statistics: st})
	}
	slices.SortFunc(resp.Usage, func(x, y *slacklinev1.ContainerUsage) int { return strings.Compare(x.GetTaskId(), y.GetTaskId()) })
	s.a.addNetwork(resp)
	if l := s.a.slack; l != nil {
		resp.Memory = memoryProto(l.latest.Load().memory)
	}
	return connect.NewResponse(resp), nil
}

func (s nodeService) GetFeatures(context.Context, *connect.Request[slacklinev1.GetFeaturesRequest]) (*connect.Response[slacklinev1.GetFeaturesResponse], error) {
	resp := &slacklinev1.GetFeaturesResponse{}
	for _, r := range s.a.features() {
		f := &slacklinev1.Feature{Name: r.Name, Status: featureStatusProto(r.Status())}
		if r.Err != nil {
			f.Detail = r.Err.Error()
		}
		resp.Features = append(resp.Features, f)
	}
	resp.Features = append(resp.Features, qosFeatures(s.a.cfg.Containerizer, s.a.syncLatencySignal())...)
	return connect.NewResponse(resp), nil
}

// featureStatusProto maps a probe status onto the API's FeatureStatus.
func featureStatusProto(s bpf.FeatureStatus) slacklinev1.FeatureStatus {
	switch s {
	case bpf.FeatureAvailable:
		return slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE
	case bpf.FeatureNotSupported:
		return slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED
	case bpf.FeatureNoPermission:
		return slacklinev1.FeatureStatus_FEATURE_STATUS_NO_PERMISSION
	case bpf.FeatureLoading:
		return slacklinev1.FeatureStatus_FEATURE_STATUS_LOADING
	}
	return slacklinev1.FeatureStatus_FEATURE_STATUS_UNKNOWN
}
