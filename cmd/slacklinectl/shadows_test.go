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
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// shadowsNode is an agent's NodeService answering GetShadows.
type shadowsNode struct {
	slacklinev1connect.UnimplementedNodeServiceHandler
	resp *slacklinev1.GetShadowsResponse
}

func (n *shadowsNode) GetShadows(context.Context, *connect.Request[slacklinev1.GetShadowsRequest]) (*connect.Response[slacklinev1.GetShadowsResponse], error) {
	return connect.NewResponse(n.resp), nil
}

func TestGetShadows(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	half := timestamppb.New(t0.Add(30 * time.Minute))
	report := func(name, est string, latest, harvest, rate float64, violations, shrinks int64, perHour float64, kinds ...*slacklinev1.ShadowCorrections) *slacklinev1.ShadowReport {
		return &slacklinev1.ShadowReport{Name: name, Estimator: est, QosControllers: []string{"cpuset", "interference"},
			LatestCpus: latest, Harvest: harvest, ViolationRate: rate, Violations: violations, Samples: 18000, Estimates: 18000, Shrinks: shrinks,
			FirstEstimate: timestamppb.New(t0), LastEstimate: half, FirstEvaluation: timestamppb.New(t0), LastEvaluation: half,
			CorrectionsPerHour: perHour, Corrections: kinds}
	}
	resp := &slacklinev1.GetShadowsResponse{
		Active: report("active", "calibrated", 1.5, 0.656, 0.0093, 167, 60, 4, &slacklinev1.ShadowCorrections{Kind: "throttle", Count: 2, PerHour: 4}),
		Shadows: []*slacklinev1.ShadowReport{
			report("loose", "calibrated", 1.7, 0.679, 0.0127, 229, 90, 0),
			report("fast", "fast", 1.2, 0.61, 0.002, 36, 30, 6, &slacklinev1.ShadowCorrections{Kind: "kill", Count: 1, PerHour: 2},
				&slacklinev1.ShadowCorrections{Kind: "throttle", Count: 2, PerHour: 4}),
		},
	}
	resp.Shadows[0].Settings = []*slacklinev1.ShadowSetting{{Flag: "estimator-calibrated-confirm", Value: "1s"}, {Flag: "estimator-target-violation", Value: "0.05"}}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(&shadowsNode{resp: resp}))
	node := httptest.NewServer(mux)
	t.Cleanup(node.Close)
	url := serve(t, &fakeOperator{agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node.URL},
	}}})
	want := strings.TrimPrefix(`
SETTINGS   ESTIMATOR    ESTIMATE   HARVEST   VIOLATIONS    SAMPLES   SHRINKS/H   CORRECTIONS/H   CORRECTIONS          DIFFERS IN
active     calibrated   1.500      65.6%     0.93% (167)   18000     120         4.0             throttle 2           (qos cpuset,interference)
loose      calibrated   1.700      67.9%     1.27% (229)   18000     180         0.0             -                    estimator-calibrated-confirm=1s estimator-target-violation=0.05
fast       fast         1.200      61.0%     0.20% (36)    18000     60          6.0             kill 1, throttle 2   -
`, "\n")
	got, err := run(t, "--coordinator", url, "get", "shadows", "--hostname", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get shadows (-want +got):\n%s", diff)
	}
	got, err = run(t, "--coordinator", url, "get", "shadows", "--agent", "a-1", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	decoded := &slacklinev1.GetShadowsResponse{}
	if err := protojson.Unmarshal([]byte(got), decoded); err != nil {
		t.Fatalf("output is not the response in JSON: %v\n%s", err, got)
	}
	if diff := cmp.Diff(resp, decoded, protocmp.Transform()); diff != "" {
		t.Errorf("decoded output (-want +got):\n%s", diff)
	}

	// An agent without shadows says so.
	empty := httptest.NewServer(func() http.Handler {
		m := http.NewServeMux()
		m.Handle(slacklinev1connect.NewNodeServiceHandler(&shadowsNode{resp: &slacklinev1.GetShadowsResponse{}}))
		return m
	}())
	t.Cleanup(empty.Close)
	url = serve(t, &fakeOperator{agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		{Id: "a-2", Hostname: "node-2", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: empty.URL},
	}}})
	got, err = run(t, "--coordinator", url, "get", "shadows")
	if err != nil || !strings.Contains(got, "No shadow settings") {
		t.Errorf("get shadows of an agent without any: %q, %v", got, err)
	}
}
