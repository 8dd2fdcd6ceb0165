package agent

import (
	"context"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/bpf"
)

// EBPF is what the agent needs of the eBPF programs: tracking containers'
// cgroups and reading their counters. *bpf.Monitor implements it.
type EBPF interface {
	Track(cgroupID uint64, class bpf.Class) error
	Untrack(cgroupID uint64) error
	Stats(cgroupID uint64) (bpf.CgroupStats, error)
	DelayedBy(victim uint64) (map[uint64]time.Duration, error)
	Events() <-chan bpf.ThresholdEvent
	Run(ctx context.Context) error
}

// ebpfStats adapts the eBPF counters to the monitor's input.
func ebpfStats(e EBPF) monitor.EBPF {
	return monitor.EBPFFunc(func(id uint64) (monitor.EBPFStats, error) {
		s, err := e.Stats(id)
		if err != nil {
			return monitor.EBPFStats{}, err
		}
		return monitor.EBPFStats{
			OnCPU: s.OnCPU, Wakeups: s.Wakeups, RunqBuckets: s.RunqLatency[:], RunqSum: s.RunqTotal,
			DelayedByRevocable: s.DelayedByRevocable, NetRxBytes: s.NetRxBytes, NetRxPackets: s.NetRxPackets,
			NetTxBytes: s.NetTxBytes, NetTxPackets: s.NetTxPackets, ReclaimStall: s.ReclaimStall, OOMKills: s.OOMKills,
		}, nil
	})
}

// MonitorStats returns the adapter that lets a monitor read e's counters.
func MonitorStats(e EBPF) monitor.EBPF { return ebpfStats(e) }

// tracked is a container the agent measures.
type tracked struct {
	cgroupID uint64
	taskID   string
}

// syncTargets points the monitor and the eBPF programs at the current
// containers: new ones are tracked, ended ones untracked.
func (a *Agent) syncTargets() {
	if a.cfg.Monitor == nil && a.cfg.EBPF == nil {
		return
	}
	a.obsMu.Lock()
	defer a.obsMu.Unlock()
	// Snapshot under the lock: an older concurrent call must not re-track
	// a container a newer one already untracked.
	containers := a.cz.Containers()
	live := map[string]bool{}
	var targets []monitor.Target
	for _, c := range containers {
		if c.Exit != nil {
			continue
		}
		live[c.ID] = true
		tr, ok := a.tracked[c.ID]
		if !ok {
			tr = tracked{taskID: c.Spec.TaskID}
			if id, err := bpf.CgroupID(filepath.Join(a.unifiedRoot, c.CgroupPath)); err == nil {
				tr.cgroupID = id
			}
			if a.cfg.EBPF != nil && tr.cgroupID != 0 {
				class := bpf.ClassGuaranteed
				if c.Spec.Revocable {
					class = bpf.ClassRevocable
				}
				if err := a.cfg.EBPF.Track(tr.cgroupID, class); err != nil {
					a.log.Warn("eBPF: track container", "container", c.ID, "err", err)
				}
			}
			a.tracked[c.ID] = tr
		}
		targets = append(targets, monitor.Target{
			ID: c.ID, TaskID: c.Spec.TaskID, Revocable: c.Spec.Revocable, CgroupPath: c.CgroupPath, CgroupID: tr.cgroupID,
			CPULimit: c.Spec.Resources.CPUs(), MemLimit: uint64(c.Spec.Resources.Mem() * (1 << 20)),
		})
	}
	for _, path := range a.cfg.ProtectCgroups {
		id := protectedPrefix + path
		live[id] = true
		tr, ok := a.tracked[id]
		if !ok {
			if cgid, err := bpf.CgroupID(filepath.Join(a.unifiedRoot, path)); err == nil {
				tr.cgroupID = cgid
				if a.cfg.EBPF != nil {
					if err := a.cfg.EBPF.Track(cgid, bpf.ClassProtected); err != nil {
						a.log.Warn("eBPF: track protected cgroup", "cgroup", path, "err", err)
					}
				}
			} else {
				a.log.Warn("protected cgroup not found in the v2 tree; measured through cgroupfs only", "cgroup", path, "err", err)
			}
			a.tracked[id] = tr
		}
		targets = append(targets, monitor.Target{ID: id, CgroupPath: path, CgroupID: tr.cgroupID})
	}
	for id, tr := range a.tracked {
		if live[id] {
			continue
		}
		if a.cfg.EBPF != nil && tr.cgroupID != 0 {
			_ = a.cfg.EBPF.Untrack(tr.cgroupID)
		}
		delete(a.tracked, id)
	}
	if a.cfg.Monitor != nil {
		a.cfg.Monitor.SetTargets(targets)
	}
}

// containerOfCgroup maps an eBPF cgroup id back to a container id.
func (a *Agent) containerOfCgroup(cgroupID uint64) (string, bool) {
	a.obsMu.Lock()
	defer a.obsMu.Unlock()
	for id, tr := range a.tracked {
		if tr.cgroupID == cgroupID {
			return id, true
		}
	}
	return "", false
}

// featuresCollector exports the feature probes as a gauge.
type featuresCollector struct{ results []bpf.FeatureResult }

var featureDesc = prometheus.NewDesc("slackline_agent_ebpf_feature_available",
	"Whether an eBPF feature probe succeeded (1) or not (0), with the reason.", []string{"feature", "status"}, nil)

func (f featuresCollector) Describe(ch chan<- *prometheus.Desc) { ch <- featureDesc }

func (f featuresCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range f.results {
		v := 0.0
		if r.Err == nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(featureDesc, prometheus.GaugeValue, v, r.Name, r.Status().String())
	}
}
