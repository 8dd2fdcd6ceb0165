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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// estimateNode is an agent's NodeService answering GetEstimate.
type estimateNode struct {
	slacklinev1connect.UnimplementedNodeServiceHandler
	resp *slacklinev1.GetEstimateResponse
}

func (n *estimateNode) GetEstimate(context.Context, *connect.Request[slacklinev1.GetEstimateRequest]) (*connect.Response[slacklinev1.GetEstimateResponse], error) {
	return connect.NewResponse(n.resp), nil
}

var testEstimate = &slacklinev1.GetEstimateResponse{
	Revocable: resources.MustParse("cpus:0.5").Proto("", resources.Revocable),
	Estimator: "calibrated", Timestamp: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
	Containers: []*slacklinev1.EstimateContainer{
		{Id: "c-1", AllocatedCpus: 2, PredictedPeakCpus: 1.2, MarginCpus: 0.12, CalibrationCpus: 0.08, NeedCpus: 1.4},
		{Id: "c-2", AllocatedCpus: 1, PredictedPeakCpus: 1, NeedCpus: 1, WarmingUp: true},
	},
	LimitingContainer: "c-1",
	Reason:            "c-1 holds back 1.40 of its 2.00 cpus: predicted peak 1.20 + margin 0.12 + calibration +0.08",
	Calibration: &slacklinev1.EstimateCalibration{
		TargetViolation: 0.01, Level: 0.012, MarginCpus: 0.08, Resolved: 1000, Violations: 9, ViolationBound: 0.012, MaxFeedbackDelay: 2,
	},
	UncalibratedCpus: 0.68, CalibratedCpus: 0.6,
	Memory: nodeBoundMemory,
}

// nodeBoundMemory is the colocation bench's node (#28): 1536 MiB allocated
// whole to a server needing 430 MiB, 276 MiB kept free for reclaim, 60 MiB
// of other use.
var nodeBoundMemory = &slacklinev1.EstimateMemory{
	LimitedBy:   slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_NODE,
	EstimateMib: 769.92, AllocatedMib: 1536, NeedMib: 430.08, AllocationsBoundMib: 1105.92,
	TotalBoundMib: proto.Float64(1105.92), NodeBoundMib: proto.Float64(769.92),
	NodeTotalBytes: 1536 << 20, NodeAvailableBytes: 1092 << 20, KeepFreeBytes: 276 << 20, OtherBytes: 60 << 20, WorkingSetBytes: 384 << 20,
}

// TestMemoryText: the memory line names the bound that set the estimate
// with its terms, then the others; the node's terms (kept free, other use)
// whenever the node's memory is known.
func TestMemoryText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    *slacklinev1.EstimateMemory
		want string
	}{{
		name: "the node",
		m:    nodeBoundMemory,
		want: "770 MiB, limited by the node: 1536 MiB - 276 kept free - 60 other use - 430 need; other bounds: allocations 1106 MiB, agent's mem 1106 MiB",
	}, {
		name: "the allocations, on a large node",
		m: &slacklinev1.EstimateMemory{
			LimitedBy:   slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_ALLOCATIONS,
			EstimateMib: 893.28, AllocatedMib: 1024, NeedMib: 130.72, AllocationsBoundMib: 893.28,
			TotalBoundMib: proto.Float64(15360 - 130.72), NodeBoundMib: proto.Float64(16384 - 1966 - 900 - 130.72),
			NodeTotalBytes: 16384 << 20, KeepFreeBytes: 1966 << 20, OtherBytes: 900 << 20,
		},
		want: "893 MiB, limited by the guaranteed allocations: 1024 MiB allocated - 131 need; other bounds: agent's mem 15229 MiB, node 13387 MiB (16384 MiB - 1966 kept free - 900 other use - 131 need)",
	}, {
		name: "the agent's mem, the node's memory unknown",
		m: &slacklinev1.EstimateMemory{
			LimitedBy:   slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_TOTAL,
			EstimateMib: 381.28, AllocatedMib: 1024, NeedMib: 130.72, AllocationsBoundMib: 893.28, TotalBoundMib: proto.Float64(381.28),
		},
		want: "381 MiB, limited by the agent's mem: 512 MiB - 131 need; other bounds: allocations 893 MiB",
	}, {
		name: "nothing: a node holding more than it can spare",
		m: &slacklinev1.EstimateMemory{
			LimitedBy:    slacklinev1.EstimateMemoryBound_ESTIMATE_MEMORY_BOUND_NODE,
			AllocatedMib: 1536, NeedMib: 430.08, AllocationsBoundMib: 1105.92, NodeBoundMib: proto.Float64(-122.08),
			NodeTotalBytes: 1536 << 20, KeepFreeBytes: 276 << 20, OtherBytes: 952 << 20,
		},
		want: "0 MiB, limited by the node: 1536 MiB - 276 kept free - 952 other use - 430 need; other bounds: allocations 1106 MiB",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := memoryText(tc.m); got != tc.want {
				t.Errorf("memoryText:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestGetEstimate(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(&estimateNode{resp: testEstimate}))
	node := httptest.NewServer(mux)
	t.Cleanup(node.Close)
	url := serve(t, &fakeOperator{agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node.URL},
	}}})
	want := strings.TrimPrefix(`
ESTIMATE:      cpus:0.5 (estimator calibrated, at 2026-01-02T03:04:05.000Z)
MEMORY:        770 MiB, limited by the node: 1536 MiB - 276 kept free - 60 other use - 430 need; other bounds: allocations 1106 MiB, agent's mem 1106 MiB
CPUS:          0.680 uncalibrated, 0.600 calibrated, published after hysteresis and pacing
LIMITED BY:    c-1 holds back 1.40 of its 2.00 cpus: predicted peak 1.20 + margin 0.12 + calibration +0.08
CALIBRATION:   0.90% of 1000 estimates exceeded the real slack (target 1.00%, bound 1.20%); level 0.0120, adds +0.080 cpus

CONTAINER   ALLOCATED   PREDICTED PEAK   MARGIN   CALIBRATION   HELD BACK   SLACK   NOTE
c-1         2.000       1.200            0.120    0.080         1.400       0.600   limiting
c-2         1.000       1.000            0.000    0.000         1.000       0.000   warming up
`, "\n")
	got, err := run(t, "--coordinator", url, "get", "estimate", "--hostname", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get estimate (-want +got):\n%s", diff)
	}
	got, err = run(t, "--coordinator", url, "get", "estimate", "--agent", "a-1", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	decoded := &slacklinev1.GetEstimateResponse{}
	if err := protojson.Unmarshal([]byte(got), decoded); err != nil {
		t.Fatalf("output is not the response in JSON: %v\n%s", err, got)
	}
	if diff := cmp.Diff(testEstimate, decoded, protocmp.Transform()); diff != "" {
		t.Errorf("decoded output (-want +got):\n%s", diff)
	}
	// Without --agent or --hostname: the only agent.
	if _, err := run(t, "--coordinator", url, "get", "estimate", "-o", "json"); err != nil {
		t.Errorf("get estimate of the only agent: %v", err)
	}
}
