package coordinator

import (
	"net/http"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/slackline/slackline/coordinator/ui"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
)

// Handler returns the HTTP handler serving the coordinator's services over
// Connect, gRPC and gRPC-Web, plus gRPC health, reflection, /metrics and
// the live view at /ui/.
// With Config.Authz every request is authenticated and authorized
// (auth.Rules); health stays open.
func (c *Coordinator) Handler() http.Handler {
	opts := append(server.HandlerOptions(), connect.WithReadMaxBytes(c.cfg.Limits.MaxRequestBytes),
		connect.WithInterceptors(c.metrics.rpc.Interceptor(), c.cfg.Authz.Interceptor(), c.callLimiter()))
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewSchedulerServiceHandler(schedulerService{c}, opts...))
	agentPath, agentHandler := slacklinev1connect.NewAgentServiceHandler(agentService{c}, opts...)
	mux.Handle(agentPath, heartbeatStreams(agentHandler))
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(operatorService{c}, opts...))
	mux.Handle(slacklinev1connect.NewProfileServiceHandler(profileService{c}, opts...))
	server.MountStandard(mux,
		slacklinev1connect.SchedulerServiceName, slacklinev1connect.AgentServiceName, slacklinev1connect.OperatorServiceName,
		slacklinev1connect.ProfileServiceName)
	mux.Handle(auth.MetricsPath, promhttp.HandlerFor(c.cfg.Metrics, promhttp.HandlerOpts{}))
	if c.cfg.Pprof {
		server.MountPprof(mux)
	}
	root := http.NewServeMux()
	// The live view's files hold no data and need no credentials; its
	// proxy (the live view's and slacklinectl's way to agents) authorizes
	// each call as the NodeService call it forwards (a sandbox read for
	// the task it names: MayReadSandbox), then calls the agent with the
	// coordinator's own identity, never the caller's token (coordinator/ui).
	root.Handle("/ui/", ui.Handler(ui.Config{Agents: operatorService{c}, Sandboxes: operatorService{c}, AgentTLS: c.cfg.AgentTLS,
		AgentCRL: c.cfg.Authz.CRL(), Authorize: c.cfg.Authz.ProxyMiddleware, Logger: c.cfg.Logger, Metrics: c.cfg.Metrics}))
	root.Handle("/", c.cfg.Authz.Middleware(mux))
	return root
}
