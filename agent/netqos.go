package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// NetworkQoS configures the pacing of revocable egress (agent/network).
type NetworkQoS struct {
	// Interfaces are the interfaces to manage (--network-interfaces);
	// empty: the default-route interface, and only when the node has a
	// bandwidth resource (detected or given): without one there is
	// nothing to pace to, and the agent says so.
	Interfaces []string
	// Netns is the network namespace of the interfaces and of the tasks'
	// sockets (a /run/netns file); empty is the agent's own.
	Netns string
	// Classifier is the eBPF classifier (*netqos.Programs); nil when it
	// could not be loaded, ClassifierErr saying why (bpf's contract).
	Classifier    network.Classifier
	ClassifierErr error
	// RevocableCgroup is the revocable subtree's directory in the v2
	// hierarchy; UnifiedRoot the hierarchy's mount point.
	RevocableCgroup, UnifiedRoot string
	// QdiscMajor marks the agent's qdiscs (network.HandleMajor of its
	// cgroup root).
	QdiscMajor uint16
}

// FeatureNetworkQoS is the GetFeatures entry that says whether network QoS
// runs, and why not.
const FeatureNetworkQoS = "network_qos"

// newNetwork sets up network QoS as cfg asks and returns it (nil when off)
// with cfg.Features plus the network_qos feature: available, or why not,
// under package bpf's contract (no privileges, an old kernel, or could not
// tell). The agent runs without network QoS rather than fail.
func newNetwork(cfg Config, total resources.Resources) (*network.Network, []bpf.FeatureResult) {
	features := slices.Clip(cfg.Features)
	q := cfg.NetworkQoS
	if q == nil {
		return nil, features
	}
	var err error
	switch {
	case q.Classifier == nil && q.ClassifierErr != nil:
		err = q.ClassifierErr
	case q.Classifier == nil:
		err = fmt.Errorf("the eBPF classifier is not loaded: %w", bpf.ErrUnavailable)
	case len(q.Interfaces) == 0 && total.Bandwidth() <= 0:
		err = errors.New("the node has no bandwidth resource (set bandwidth in --resources, or name --network-interfaces)")
	}
	var n *network.Network
	if err == nil {
		n, err = network.New(network.Config{
			Interfaces: q.Interfaces, Netns: q.Netns, Classifier: q.Classifier,
			RevocableCgroup: q.RevocableCgroup, UnifiedRoot: q.UnifiedRoot, QdiscMajor: q.QdiscMajor,
			Capacity: total.Bandwidth(), Logger: cfg.Logger,
		})
	}
	if err != nil {
		cfg.Logger.Warn("running without network QoS: revocable egress is not paced", "reason", err)
		return nil, append(features, bpf.FeatureResult{Name: FeatureNetworkQoS, Err: fmt.Errorf("%s: %w", FeatureNetworkQoS, err)})
	}
	cfg.Logger.Info("network QoS: pacing revocable egress", "interfaces", n.Interfaces(), "capacity_mbps", total.Bandwidth())
	return n, append(features, bpf.FeatureResult{Name: FeatureNetworkQoS})
}

// TCPSignals are the per-cgroup TCP signals of the network QoS programs:
// the observer watches every container it tracks, the monitor reads them.
// *netqos.Programs implements it.
type TCPSignals interface {
	Watch(cgroupID uint64) error
	Unwatch(cgroupID uint64) error
	TCPStats(cgroupID uint64) (netqos.TCPStats, error)
}

// MonitorStatsWithTCP returns the adapter that lets a monitor read e's
// counters and, when tcp is not nil, the TCP signals of the same cgroups.
func MonitorStatsWithTCP(e EBPF, tcp TCPSignals) monitor.EBPF {
	if e == nil {
		return monitor.EBPFFunc(func(uint64) (monitor.EBPFStats, error) {
			return monitor.EBPFStats{}, errors.New("no eBPF monitor")
		})
	}
	return &monitorEBPF{e: e, tcp: tcp}
}

// pacedTasks returns the revocable containers whose egress the network
// subsystem paces, with their cgroup ids.
func pacedTasks(containers []*containerizer.Container, cgroupID func(containerID string) uint64) []network.Task {
	var out []network.Task
	for _, c := range containers {
		if c.Exit != nil || !c.Spec.Revocable {
			continue
		}
		if id := cgroupID(c.ID); id != 0 {
			out = append(out, network.Task{ContainerID: c.ID, CgroupID: id, Bandwidth: c.Spec.Resources.Bandwidth()})
		}
	}
	slices.SortFunc(out, func(a, b network.Task) int { return strings.Compare(a.ContainerID, b.ContainerID) })
	return out
}

// addNetwork adds the network QoS state and the managed interfaces'
// throughput (the node's net_tx_mbps, net_rx_mbps) to a GetUsage answer.
func (a *Agent) addNetwork(resp *slacklinev1.GetUsageResponse) {
	n := a.network
	if n == nil {
		return
	}
	resp.Network = &slacklinev1.NetworkStatus{
		Interfaces: n.Interfaces(), CapacityMbps: a.total.Bandwidth(), RevocableEstimateMbps: n.Estimate(),
		QosLimitMbps: n.QoSLimit(), RevocablePaceMbps: n.Pace(),
	}
	if link := n.Link(); !link.At.IsZero() {
		node := &slacklinev1.ResourceStatistics{}
		if resp.Node != nil {
			node = proto.Clone(resp.Node).(*slacklinev1.ResourceStatistics) // the monitor's is shared
		}
		node.NetTxMbps, node.NetRxMbps = link.Tx, link.Rx
		resp.Node = node
	}
}
