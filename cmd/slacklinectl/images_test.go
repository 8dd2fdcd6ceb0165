package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// imagesNode serves a canned image store.
type imagesNode struct{ fakeNode }

func (*imagesNode) GetImages(context.Context, *connect.Request[slacklinev1.GetImagesRequest]) (*connect.Response[slacklinev1.GetImagesResponse], error) {
	at := timestamppb.New(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	return connect.NewResponse(&slacklinev1.GetImagesResponse{
		Images: []*slacklinev1.Image{{Reference: "docker://registry:5000/app:v1", Digest: "sha256:0123456789abcdef0123", SizeBytes: 3 << 20,
			Layers: 2, Tasks: 1, PulledTime: at, LastUsedTime: at}},
		StoreBytes: 3 << 20, BudgetBytes: 10 << 30, Layers: 2,
		RecentErrors: []*slacklinev1.ImagePullError{{Reference: "docker://registry:5000/gone:v1", Message: "not_found: MANIFEST_UNKNOWN", Time: at}},
	}), nil
}

func TestGetImages(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(&imagesNode{}))
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	url := serve(t, &fakeOperator{agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: server.URL},
	}}})
	got, err := run(t, "--coordinator", url, "get", "images", "--hostname", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(`
IMAGE                           DIGEST                SIZE      LAYERS   TASKS   LAST USED
docker://registry:5000/app:v1   sha256:0123456789ab   3.0 MiB   2        1       2026-11-27T09:00:00Z

store: 3.0 MiB in 2 layers, budget 10240.0 MiB

recent pull failures:
TIME                   IMAGE                            ERROR
2026-11-27T09:00:00Z   docker://registry:5000/gone:v1   not_found: MANIFEST_UNKNOWN
`, "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get images (-want +got):\n%s", diff)
	}
	// Without --agent or --hostname: the only agent.
	if only, err := run(t, "--coordinator", url, "get", "images"); err != nil || only != got {
		t.Errorf("get images of the only agent: %v\n%s", err, only)
	}
}
