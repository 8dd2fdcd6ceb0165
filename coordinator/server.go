package coordinator

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	healthv1 "github.com/slackline/slackline/gen/grpc/health/v1"
	"github.com/slackline/slackline/gen/grpc/health/v1/healthv1connect"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// MaxRequestBytes bounds the size of any request message.
const MaxRequestBytes = 4 << 20

// Handler returns the HTTP handler serving the coordinator's services over
// Connect, gRPC and gRPC-Web, plus gRPC health, reflection and /metrics.
func (c *Coordinator) Handler() http.Handler {
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes)}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewSchedulerServiceHandler(schedulerService{c}, opts...))
	mux.Handle(slacklinev1connect.NewAgentServiceHandler(agentService{c}, opts...))
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(operatorService{c}, opts...))
	services := []string{
		slacklinev1connect.SchedulerServiceName, slacklinev1connect.AgentServiceName, slacklinev1connect.OperatorServiceName,
	}
	mux.Handle(healthv1connect.NewHealthHandler(NewHealth(services...), opts...))
	reflector := grpcreflect.NewStaticReflector(append(services, healthv1connect.HealthName)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, opts...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, opts...))
	mux.Handle("/metrics", promhttp.HandlerFor(c.cfg.Metrics, promhttp.HandlerOpts{}))
	return mux
}

// Health serves the standard grpc.health.v1 protocol: the named services
// (and the empty name, the whole server) are SERVING for as long as the
// process serves requests.
type Health struct {
	services map[string]bool
}

// NewHealth returns a Health that reports the given services as serving.
func NewHealth(services ...string) *Health {
	h := &Health{services: map[string]bool{"": true}}
	for _, s := range services {
		h.services[s] = true
	}
	return h
}

// Check implements grpc.health.v1.Health.Check.
func (h *Health) Check(ctx context.Context, req *connect.Request[healthv1.HealthCheckRequest]) (*connect.Response[healthv1.HealthCheckResponse], error) {
	if !h.services[req.Msg.GetService()] {
		return nil, connect.NewError(connect.CodeNotFound, errUnknownService(req.Msg.GetService()))
	}
	return connect.NewResponse(&healthv1.HealthCheckResponse{Status: healthv1.HealthCheckResponse_SERVING}), nil
}

// Watch implements grpc.health.v1.Health.Watch: it sends the status once and
// holds the stream until the client leaves.
func (h *Health) Watch(ctx context.Context, req *connect.Request[healthv1.HealthCheckRequest], stream *connect.ServerStream[healthv1.HealthCheckResponse]) error {
	status := healthv1.HealthCheckResponse_SERVING
	if !h.services[req.Msg.GetService()] {
		status = healthv1.HealthCheckResponse_SERVICE_UNKNOWN
	}
	if err := stream.Send(&healthv1.HealthCheckResponse{Status: status}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

type errUnknownService string

func (e errUnknownService) Error() string { return "unknown service " + string(e) }
