package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	_ "github.com/slackline/slackline/gen/slackline/v1" // registers the NodeService descriptors
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/server"
)

// TestMountStandard checks what grpcurl and a load balancer see: health
// for the whole server and the mounted services (NotFound for others), and
// reflection listing the services and describing them.
func TestMountStandard(t *testing.T) {
	mux := http.NewServeMux()
	server.MountStandard(mux, slacklinev1connect.NodeServiceName)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true // reflection is a bidirectional stream
	srv.StartTLS()
	defer srv.Close()
	ctx := context.Background()

	health := grpchealth.NewClient(srv.Client(), srv.URL, connect.WithGRPC())
	for _, tt := range []struct {
		service string
		code    connect.Code // 0: SERVING
	}{
		{"", 0},
		{slacklinev1connect.NodeServiceName, 0},
		{slacklinev1connect.SchedulerServiceName, connect.CodeNotFound},
	} {
		resp, err := health.Check(ctx, &grpchealth.CheckRequest{Service: tt.service})
		switch {
		case tt.code != 0 && connect.CodeOf(err) != tt.code:
			t.Errorf("health of %q: %v, want %v", tt.service, err, tt.code)
		case tt.code == 0 && (err != nil || resp.Status != grpchealth.StatusServing):
			t.Errorf("health of %q = %v, %v; want SERVING", tt.service, resp, err)
		}
	}

	stream := grpcreflect.NewClient(srv.Client(), srv.URL, connect.WithGRPC()).NewStream(ctx)
	defer stream.Close()
	services, err := stream.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []protoreflect.FullName{slacklinev1connect.NodeServiceName, grpchealth.HealthV1ServiceName} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, want %s among them", services, want)
		}
	}
	if files, err := stream.FileContainingSymbol(slacklinev1connect.NodeServiceName); err != nil || len(files) == 0 {
		t.Errorf("reflection on %s: %d files, %v", slacklinev1connect.NodeServiceName, len(files), err)
	}
}
