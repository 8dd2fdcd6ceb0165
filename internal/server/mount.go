package server

import (
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
)

// MaxRequestBytes bounds the size of any request message a Slackline
// server accepts; larger requests fail with ResourceExhausted.
const MaxRequestBytes = 4 << 20

// CompressMinBytes is the smallest response a Slackline server compresses:
// heartbeats and small events go as they are, which saves the CPU and the
// pooled compressors (hundreds of KB each) that compressing them costs.
const CompressMinBytes = 1024

// HandlerOptions returns the Connect handler options every Slackline
// service is mounted with: the MaxRequestBytes read limit and
// CompressMinBytes.
func HandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes), connect.WithCompressMinBytes(CompressMinBytes)}
}

// MountStandard mounts, beside a process's own services, the standard gRPC
// health protocol (grpc.health.v1.Health), which reports the named services
// and the whole server as SERVING for as long as the process serves
// requests, and gRPC server reflection (v1 and v1alpha) for those services
// and the health service.
func MountStandard(mux *http.ServeMux, services ...string) {
	opts := HandlerOptions()
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(services...), opts...))
	reflector := grpcreflect.NewStaticReflector(append(slices.Clip(services), grpchealth.HealthV1ServiceName)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, opts...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, opts...))
}
