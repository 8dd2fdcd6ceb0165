package bpf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// FeatureResult is the outcome of one feature probe. Err follows the probe
// contract: nil when the feature is available; wrapping
// ebpf.ErrNotSupported when the kernel lacks it; wrapping ErrPermission when
// the process may not use it; any other error when the probe could not tell.
type FeatureResult struct {
	Name string
	Err  error
}

// FeatureStatus classifies a probe result: what an operator can do about a
// missing feature depends on which of these it is.
type FeatureStatus int

// Feature statuses, from FeatureResult.Status.
const (
	// FeatureUnknown: the probe could not tell.
	FeatureUnknown FeatureStatus = iota
	// FeatureAvailable: the kernel has the feature and the process may use it.
	FeatureAvailable
	// FeatureNotSupported: the kernel lacks the feature (ebpf.ErrNotSupported).
	FeatureNotSupported
	// FeatureNoPermission: the process may not use the feature (ErrPermission).
	FeatureNoPermission
	// FeatureLoading: the probe has not finished yet (ErrLoading).
	FeatureLoading
)

// String returns the status in snake case ("available", "not_supported",
// "no_permission", "loading", "unknown"), as in metric labels and logs.
func (s FeatureStatus) String() string {
	switch s {
	case FeatureAvailable:
		return "available"
	case FeatureNotSupported:
		return "not_supported"
	case FeatureNoPermission:
		return "no_permission"
	case FeatureLoading:
		return "loading"
	}
	return "unknown"
}

// Status classifies the result by the probe contract of its Err.
func (r FeatureResult) Status() FeatureStatus {
	switch {
	case r.Err == nil:
		return FeatureAvailable
	case errors.Is(r.Err, ErrLoading):
		return FeatureLoading
	case errors.Is(r.Err, ErrPermission):
		return FeatureNoPermission
	case errors.Is(r.Err, ebpf.ErrNotSupported):
		return FeatureNotSupported
	}
	return FeatureUnknown
}

// Feature is a named probe.
type Feature struct {
	Name string
	// What the monitor loses without it.
	Needed string
	Probe  func() error
}

// Features lists the probes Probe runs, in order.
var Features = []Feature{
	{"bpf_syscall", "all eBPF signals", probeBPFSyscall},
	{"btf", "all eBPF signals (CO-RE and tp_btf need kernel BTF)", probeBTF},
	{"tp_btf", "scheduler and memory signals", probeTPBTF},
	{"sched_info", "cheap run-queue latency: without it, wakeup hooks (costlier) time the waits", probeSchedInfo},
	{"task_storage", "run-queue latency without sched_info, and reclaim stall", func() error { return features.HaveMapType(ebpf.TaskStorage) }},
	{"ringbuf", "threshold events", func() error { return features.HaveMapType(ebpf.RingBuf) }},
	{"cgroup_skb", "network bytes and packets", func() error { return features.HaveProgramType(ebpf.CGroupSKB) }},
	{"vmscan_tracepoints", "reclaim stall time", func() error {
		return haveTracepoints("mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end",
			"mm_vmscan_memcg_reclaim_begin", "mm_vmscan_memcg_reclaim_end")
	}},
	{"mark_victim_tracepoint", "OOM kills", probeMarkVictim},
	{"bpf_stats", "per-program run time (overhead metrics)", probeBPFStats},
}

// Probe runs every probe of Features once and returns their results in
// order. It never panics; run unprivileged it reports ErrPermission where
// privileges are the obstacle.
func Probe() []FeatureResult {
	results := make([]FeatureResult, 0, len(Features))
	for _, f := range Features {
		err := f.Probe()
		if err != nil {
			err = fmt.Errorf("%s: %w", f.Name, classify(err))
		}
		results = append(results, FeatureResult{Name: f.Name, Err: err})
	}
	return results
}

func probeBPFSyscall() error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return err
	}
	return m.Close()
}

func probeBTF() error {
	_, err := kernelSpec()
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: no kernel BTF (/sys/kernel/btf/vmlinux): %w", ebpf.ErrNotSupported, err)
	}
	return err
}

// probeTPBTF loads (without attaching) a no-op tp_btf/sched_switch program:
// the kernel checks BTF, the program type and the attach target.
func probeTPBTF() error {
	// A collection of one, so that the attach target is found in the
	// shared kernel BTF (NewProgram decodes it afresh).
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"probe": {
			Type:       ebpf.Tracing,
			AttachType: ebpf.AttachTraceRawTp,
			AttachTo:   "sched_switch",
			License:    "GPL",
			Instructions: asm.Instructions{
				asm.LoadImm(asm.R0, 0, asm.DWord),
				asm.Return(),
			},
		},
	}}, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogDisabled: true}, Cache: KernelBTF()})
	if err != nil {
		return err
	}
	coll.Close()
	return nil
}

// haveTracepoints reports whether kernel BTF describes the tracepoints, the
// condition for attaching tp_btf programs to them.
func haveTracepoints(names ...string) error {
	spec, err := kernelSpec()
	if err != nil {
		return err
	}
	for _, name := range names {
		var fn *btf.Typedef
		if err := spec.TypeByName("btf_trace_"+name, &fn); err != nil {
			if errors.Is(err, btf.ErrNotFound) {
				return fmt.Errorf("%w: tracepoint %s not in kernel BTF", ebpf.ErrNotSupported, name)
			}
			return err
		}
	}
	return nil
}

// probeSchedInfo checks that the scheduler programs can read each task's
// run-queue wait from the kernel: task_struct.sched_info.last_queued
// (CONFIG_SCHED_INFO) and the run queue's clock it is stamped with, reached
// through sched_entity.cfs_rq->rq (CONFIG_FAIR_GROUP_SCHED), are in kernel
// BTF, and the kernel keeps sched_info up to date (older kernels do so only
// with schedstats or delay accounting on; then /proc shows a zero count of
// arrivals on a CPU for a thread that has run).
func probeSchedInfo() error {
	spec, err := kernelSpec()
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: no kernel BTF: %w", ebpf.ErrNotSupported, err)
	}
	if err != nil {
		return err
	}
	for _, f := range [][]string{
		{"task_struct", "sched_info", "last_queued"},
		{"sched_entity", "cfs_rq"},
		{"cfs_rq", "rq", "clock"},
	} {
		if err := haveField(spec, f[0], f[1:]...); err != nil {
			return err
		}
	}
	data, err := os.ReadFile("/proc/thread-self/schedstat")
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: no /proc/thread-self/schedstat (CONFIG_SCHED_INFO off)", ebpf.ErrNotSupported)
	}
	if err != nil {
		return err
	}
	fields := strings.Fields(string(data))
	if len(fields) != 3 {
		return fmt.Errorf("/proc/thread-self/schedstat: unexpected %q", data)
	}
	arrivals, err := strconv.ParseUint(fields[2], 10, 64)
	if err != nil {
		return fmt.Errorf("/proc/thread-self/schedstat: %w", err)
	}
	if arrivals == 0 {
		return fmt.Errorf("%w: the kernel does not keep sched_info (schedstats and delay accounting off)", ebpf.ErrNotSupported)
	}
	return nil
}

// haveField reports whether kernel BTF has the struct typ with the chain of
// members path (each but the last a struct or a pointer to one), the
// condition for CO-RE reads of typ->path.
func haveField(spec *btf.Spec, typ string, path ...string) error {
	var s *btf.Struct
	if err := spec.TypeByName(typ, &s); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return fmt.Errorf("%w: struct %s not in kernel BTF", ebpf.ErrNotSupported, typ)
		}
		return err
	}
	name := typ
	for i, field := range path {
		var member *btf.Member
		for j := range s.Members {
			if s.Members[j].Name == field {
				member = &s.Members[j]
				break
			}
		}
		if member == nil {
			return fmt.Errorf("%w: %s has no member %s in kernel BTF", ebpf.ErrNotSupported, name, field)
		}
		name += "." + field
		if i == len(path)-1 {
			break
		}
		t := btf.UnderlyingType(member.Type)
		if p, ok := t.(*btf.Pointer); ok {
			t = btf.UnderlyingType(p.Target)
		}
		next, ok := t.(*btf.Struct)
		if !ok {
			return fmt.Errorf("%s is %T in kernel BTF, not a struct", name, t)
		}
		s = next
	}
	return nil
}

// probeMarkVictim also checks the argument form the program expects (the
// task, Linux 6.8+; older kernels pass a pid).
func probeMarkVictim() error {
	spec, err := kernelSpec()
	if err != nil {
		return err
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_mark_victim", &td); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return fmt.Errorf("%w: tracepoint mark_victim not in kernel BTF", ebpf.ErrNotSupported)
		}
		return err
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return fmt.Errorf("btf_trace_mark_victim is %T, not a function pointer", td.Type)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(proto.Params) < 2 {
		return fmt.Errorf("btf_trace_mark_victim: unexpected prototype %v", ptr.Target)
	}
	if p, ok := proto.Params[1].Type.(*btf.Pointer); ok {
		if s, ok := p.Target.(*btf.Struct); ok && s.Name == "task_struct" {
			return nil
		}
	}
	return fmt.Errorf("%w: mark_victim passes a pid, not the task (kernel before 6.8)", ebpf.ErrNotSupported)
}

func probeBPFStats() error {
	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return err
	}
	return closer.Close()
}
