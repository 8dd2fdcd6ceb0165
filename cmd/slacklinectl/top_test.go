package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// usageNode serves canned usage and feature probes.
type usageNode struct {
	fakeNode
}

func (u *usageNode) GetUsage(context.Context, *connect.Request[slacklinev1.GetUsageRequest]) (*connect.Response[slacklinev1.GetUsageResponse], error) {
	return connect.NewResponse(&slacklinev1.GetUsageResponse{
		Node: &slacklinev1.ResourceStatistics{CpusRate: 1.5, MemAvailableBytes: 3 << 30, CpuPressure: &slacklinev1.Pressure{SomeAvg10: 12.5}, NetTxMbps: 612},
		Usage: []*slacklinev1.ContainerUsage{{TaskId: "web-1", Statistics: &slacklinev1.ResourceStatistics{
			CpusRate: 0.25, MemRssBytes: 64 << 20, MemWorkingSetBytes: 80 << 20, IoPressure: &slacklinev1.Pressure{SomeAvg10: 7.5}, NetRxBytes: 2048, NetTxBytes: 1 << 20, NetTxMbps: 250.25,
			Tcp:      &slacklinev1.TcpStatistics{RttP99Seconds: 0.0009, Retransmits: 3},
			Runqueue: &slacklinev1.RunQueueLatency{P99Seconds: 0.0042}, CpusThrottledTimeSecs: 1.5,
		}}},
		Network: &slacklinev1.NetworkStatus{Interfaces: []string{"eth0"}, CapacityMbps: 1000, RevocableEstimateMbps: 700, RevocablePaceMbps: 350, QosLimitMbps: 350},
		Memory:  nodeBoundMemory,
	}), nil
}

func (u *usageNode) GetFeatures(context.Context, *connect.Request[slacklinev1.GetFeaturesRequest]) (*connect.Response[slacklinev1.GetFeaturesResponse], error) {
	return connect.NewResponse(&slacklinev1.GetFeaturesResponse{Features: []*slacklinev1.Feature{
		{Name: "tp_btf", Status: slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE},
		{Name: "ringbuf", Status: slacklinev1.FeatureStatus_FEATURE_STATUS_NO_PERMISSION, Detail: "operation not permitted"},
	}}), nil
}

func TestTopAndFeatures(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(&usageNode{}))
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	url := serve(t, &fakeOperator{agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: server.URL},
	}}})
	got, err := run(t, "--coordinator", url, "top", "--agent", "a-1")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(`
TASK               CPU    MEM          WORKING SET   NET RX   NET TX   TX MBIT/S    RTT P99   RETRANS   RUNQ P99   CPU PSI   MEM PSI   IO PSI   THROTTLED
(node)             1.50   3.0Gi free   -             0B       0B       612.0        -         -         -          12.5%     0.0%      0.0%     0.0s
web-1              0.25   64.0Mi       80.0Mi        2.0Ki    1.0Mi    250.2        900µs     3         4.2ms      0.0%      0.0%      7.5%     1.5s
(revocable pace)   -      -            -             -        -        350 of 700   -         -         -          -         -         -        -

revocable mem: 770 MiB, limited by the node: 1536 MiB - 276 kept free - 60 other use - 430 need; other bounds: allocations 1106 MiB, agent's mem 1106 MiB
`, "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("top (-want +got):\n%s", diff)
	}
	got, err = run(t, "--coordinator", url, "get", "features", "--hostname", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "ringbuf   NO_PERMISSION   operation not permitted") {
		t.Errorf("get features:\n%s", got)
	}
	if _, err := run(t, "top"); err == nil {
		t.Error("top without --agent or --hostname succeeded")
	}
}
