package netqos

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"

	"github.com/slackline/slackline/bpf"
)

// Features lists the probes Probe runs, in order, with what network QoS
// loses without each. They follow bpf.Features' contract.
var Features = []bpf.Feature{
	{Name: "tc_bpf_classifier", Needed: "network QoS: pacing revocable egress (cls_bpf on the agent's HTB qdisc)", Probe: func() error {
		return features.HaveProgramType(ebpf.SchedCLS)
	}},
	{Name: "skb_ancestor_cgroup_id", Needed: "network QoS: pacing revocable tasks without a class of their own", Probe: func() error {
		return features.HaveProgramHelper(ebpf.SchedCLS, asm.FnSkbAncestorCgroupId)
	}},
	{Name: "sock_ops_rtt", Needed: "per-container TCP round-trip times", Probe: func() error {
		return features.HaveProgramHelper(ebpf.SockOps, asm.FnSkcToTcpSock)
	}},
	{Name: "tcp_retransmit_tracepoint", Needed: "per-container TCP retransmissions", Probe: probeRetransmitTracepoint},
}

// Probe runs every probe of Features once and returns their results in
// order, classified like bpf.Probe's.
func Probe() []bpf.FeatureResult {
	results := make([]bpf.FeatureResult, 0, len(Features))
	for _, f := range Features {
		err := f.Probe()
		if err != nil {
			err = fmt.Errorf("%s: %w", f.Name, bpf.Classify(err))
		}
		results = append(results, bpf.FeatureResult{Name: f.Name, Err: err})
	}
	return results
}

func probeRetransmitTracepoint() error {
	spec, err := bpf.KernelBTF().Kernel()
	if err != nil {
		if errors.Is(err, btf.ErrNotSupported) {
			return fmt.Errorf("%w: no kernel BTF: %w", ebpf.ErrNotSupported, err)
		}
		return err
	}
	var fn *btf.Typedef
	if err := spec.TypeByName("btf_trace_tcp_retransmit_skb", &fn); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return fmt.Errorf("%w: tracepoint tcp_retransmit_skb not in kernel BTF", ebpf.ErrNotSupported)
		}
		return err
	}
	return nil
}
