package agent

import (
	"fmt"
	"slices"
	"strings"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/bpf"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
)

// Feature names of the memory and disk I/O QoS mechanisms in GetFeatures.
const (
	// FeatureDiskIO says whether revocable disk I/O can be capped and
	// weighted, on which device, and why not.
	FeatureDiskIO = "disk_io"
	// FeatureMemoryQoS says which memory mechanisms shape revocable work:
	// memory.high (v2), the freezer, protection of guaranteed tasks.
	FeatureMemoryQoS = "memory_qos"
)

// diskShaper is what the disk I/O controller's corrections need of the
// containerizer (the real one has it; test fakes need not).
type diskShaper interface {
	DiskIO() containerizer.DiskIOSupport
	SetRevocableIOLimit(bps uint64) error
	RevocableIOLimit() (uint64, error)
}

// diskMeter is the revocable subtree's I/O byte counter on the capped
// device (the real containerizer has it), from which the diskio
// controller learns the rate revocable I/O reaches uncapped.
type diskMeter interface {
	RevocableIOBytes() (uint64, error)
}

// diskInput fills in whether revocable disk I/O can be capped, the
// applied cap, and the revocable subtree's I/O byte counter.
func (l *qosLoop) diskInput(in *qos.Input) {
	ds, ok := l.cz.(diskShaper)
	if !ok || !ds.DiskIO().Cap {
		return
	}
	if limit, err := ds.RevocableIOLimit(); err == nil {
		in.Node.DiskIO, in.RevocableIOLimit = true, float64(limit)
	}
	if dm, ok := l.cz.(diskMeter); ok {
		if n, err := dm.RevocableIOBytes(); err == nil {
			in.RevocableIOBytes = n
		}
	}
}

// diskRequester lowers the sandbox disk's largest request while revocable
// I/O is capped, and puts the device's own size back (the real
// containerizer has it where queue/max_sectors_kb is writable).
type diskRequester interface {
	SetDiskRequestKiB(kib uint64) error
}

// restoreDiskRequests puts the sandbox disk's own request size back where
// the diskio controller lowered it (nothing where it did not).
func restoreDiskRequests(cz Containerizer) error {
	ds, ok := cz.(diskShaper)
	dr, ok2 := cz.(diskRequester)
	if !ok || !ok2 || !ds.DiskIO().RequestSize {
		return nil
	}
	return dr.SetDiskRequestKiB(0)
}

// applyDisk carries out a Throttle or Unthrottle of DiskIO: the cap, then
// the disk's request size that goes with it (Correction.IORequestKiB),
// where the host offers it. A request size that cannot be set is logged:
// the cap alone still holds.
func (l *qosLoop) applyDisk(c qos.Correction) error {
	ds, ok := l.cz.(diskShaper)
	if !ok {
		return fmt.Errorf("the containerizer cannot cap disk I/O")
	}
	if err := ds.SetRevocableIOLimit(uint64(max(c.IOLimit, 0))); err != nil {
		return err
	}
	if dr, ok := l.cz.(diskRequester); ok && ds.DiskIO().RequestSize {
		if err := dr.SetDiskRequestKiB(c.IORequestKiB); err != nil {
			l.log.Warn("QoS: the disk's request size was not changed with the cap", "correction", c.String(), "err", err)
		}
	}
	return nil
}

// syncLatencyAttach is the eBPF attach point whose presence means that
// guaranteed tasks' fsync latency is measured (bpf/io.c).
const syncLatencyAttach = "tp_btf/ext4_sync_file_exit"

// syncLatencySignal says which signals of guaranteed work's disk I/O delay
// the diskio controller has: the fsync p99 and the block-request p99
// (eBPF), or io.pressure alone, and why not.
func (a *Agent) syncLatencySignal() string {
	var e any = a.cfg.EBPF
	if a.cfg.lateEBPF != nil {
		m, err := a.cfg.lateEBPF.monitor()
		if m == nil {
			return "signal: io.pressure only (no fsync or block latency: " + err.Error() + ")"
		}
		e = m
	}
	at, ok := e.(interface{ Attached() []string })
	switch {
	case e == nil:
		return "signal: io.pressure only (no fsync or block latency: eBPF off)"
	case !ok:
		return "signal: io.pressure, fsync and block request latency (eBPF)"
	}
	attached := at.Attached()
	var have, lack []string
	if slices.Contains(attached, syncLatencyAttach) {
		have = append(have, "fsync p99 of guaranteed tasks (eBPF "+syncLatencyAttach+", ext4 file systems)")
	} else {
		lack = append(lack, "no fsync latency: "+syncLatencyAttach+" not attached")
	}
	if slices.Contains(attached, bpf.BlockStartAttach) && slices.Contains(attached, bpf.BlockDoneAttach) {
		have = append(have, "block request p99 of guaranteed tasks (eBPF "+bpf.BlockStartAttach+" to "+bpf.BlockDoneAttach+", by submitting cgroup)")
	} else {
		lack = append(lack, "no block latency: "+bpf.BlockStartAttach+" or "+bpf.BlockDoneAttach+" not attached ("+bpf.BlockKernelNeed+")")
	}
	out := "signal: " + strings.Join(append(have, "io.pressure"), ", ")
	if len(lack) > 0 {
		out += " (" + strings.Join(lack, "; ") + ")"
	}
	return out
}

// qosFeatures reports the memory and disk I/O mechanisms the host offered
// (GetFeatures): available, or not supported with the reason; signal is
// syncLatencySignal's.
func qosFeatures(cz Containerizer, signal string) []*slacklinev1.Feature {
	var out []*slacklinev1.Feature
	if ds, ok := cz.(diskShaper); ok {
		s := ds.DiskIO()
		f := &slacklinev1.Feature{Name: FeatureDiskIO, Status: slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED, Detail: s.Mechanisms}
		if signal != "" {
			f.Detail += "; " + signal
		}
		// A shared journal is a stall no mechanism above reaches (#28):
		// said whatever they are.
		switch {
		case s.SharedJournal:
			f.Detail += "; WARNING: " + s.JournalWhy
		case s.JournalWhy != "":
			f.Detail += "; " + s.JournalWhy
		}
		if s.Cap {
			f.Status = slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE
		}
		out = append(out, f)
	}
	if ms, ok := cz.(memoryShaper); ok {
		var have, lack []string
		if _, err := ms.RevocableMemoryHigh(); err == nil {
			have = append(have, "memory.high on the revocable subtree and tasks, memory.min/low on guaranteed tasks")
		} else {
			lack = append(lack, "no memory.high/min/low ("+err.Error()+"): v1 soft limits order reclaim (guaranteed = mem, revocable = 0)")
		}
		if _, err := ms.RevocableFrozen(); err == nil {
			have = append(have, "cgroup.freeze")
		} else {
			lack = append(lack, "no freezer ("+err.Error()+")")
		}
		f := &slacklinev1.Feature{Name: FeatureMemoryQoS, Status: slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE,
			Detail: strings.Join(append(have, lack...), "; ")}
		if len(have) == 0 {
			f.Status = slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED
		}
		out = append(out, f)
	}
	return out
}
