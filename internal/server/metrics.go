package server

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"runtime"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/slackline/slackline/internal/cliconfig"
)

// RPCMetrics counts the RPCs a server handles, by procedure and code, and
// times them. Its labels are bounded: procedures are those the server
// registered (an unknown path never reaches an interceptor) and codes are
// Connect's seventeen plus "ok".
type RPCMetrics struct {
	handled *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

// NewRPCMetrics registers slackline_rpc_server_handled_total{procedure,
// code} and slackline_rpc_server_handling_seconds{procedure} with reg, and
// exports the handled counter at 0 for every (procedure, "ok") of
// procedures, so that a rate or an alert has a series before the first
// call.
func NewRPCMetrics(reg prometheus.Registerer, procedures ...string) *RPCMetrics {
	m := &RPCMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slackline_rpc_server_handled_total",
			Help: "RPCs completed by the server, by procedure and Connect code (ok for success).",
		}, []string{"procedure", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slackline_rpc_server_handling_seconds",
			Help:    "Time from an RPC's arrival to its response (unary) or its end (streams), by procedure.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"procedure"}),
	}
	reg.MustRegister(m.handled, m.seconds)
	for _, p := range procedures {
		m.handled.WithLabelValues(p, "ok")
	}
	return m
}

// Interceptor returns the Connect interceptor that records each call.
func (m *RPCMetrics) Interceptor() connect.Interceptor { return rpcInterceptor{m} }

func (m *RPCMetrics) observe(procedure string, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	m.handled.WithLabelValues(procedure, code).Inc()
	m.seconds.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
}

type rpcInterceptor struct{ m *RPCMetrics }

func (i rpcInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		resp, err := next(ctx, req)
		i.m.observe(req.Spec().Procedure, start, err)
		return resp, err
	}
}

func (rpcInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i rpcInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		return i.streamEnded(ctx, conn, start, next(ctx, conn))
	}
}

// streamEnded records a stream that ended. It is kept out of line so that
// its locals are not in the frame below a stream's handler, which waits
// inside next for the stream's whole life: Go shrinks an idle goroutine's
// stack only while it uses less than a quarter of it, and an idle
// subscription's stack in use was just over a quarter of 16 KB
// (scripts/bench/idle).
//
//go:noinline
func (i rpcInterceptor) streamEnded(ctx context.Context, conn connect.StreamingHandlerConn, start time.Time, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = connect.NewError(connect.CodeCanceled, err)
	}
	i.m.observe(conn.Spec().Procedure, start, err)
	return err
}

// RegisterProcess registers, with reg, the Go runtime's (go_*) and the
// process's (process_*) collectors and slackline_build_info for program.
func RegisterProcess(reg prometheus.Registerer, program string) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), BuildInfo(program))
}

// BuildInfo returns the gauge slackline_build_info, 1, labelled with the
// program, its module version, VCS revision and Go version (as
// Prometheus's own daemons export prometheus_build_info).
func BuildInfo(program string) prometheus.Collector {
	version, revision := cliconfig.Build()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "slackline_build_info",
		Help: "Always 1: the program, module version, VCS revision and Go version this binary was built from.",
	}, []string{"program", "version", "revision", "goversion"})
	g.WithLabelValues(program, version, revision, runtime.Version()).Set(1)
	return g
}

// ErrorLog returns the log.Logger to set as an http.Server's ErrorLog, so
// that net/http's own errors (TLS handshake errors, panics in handlers)
// are slog records at Warn like the rest of the daemon's logs, in its
// format, instead of lines of text mixed into them.
func ErrorLog(logger *slog.Logger) *log.Logger {
	return slog.NewLogLogger(logger.With("source", "net/http").Handler(), slog.LevelWarn)
}
