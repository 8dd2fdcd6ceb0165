package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
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

// allReader reads every tracked cgroup's counters at once
// (bpf.Monitor.ReadAll).
type allReader interface {
	ReadAll(into map[uint64]bpf.CgroupStats) error
}

// changedReader reads every tracked cgroup's counters at once, keeping
// the entries that did not move and saying which did
// (bpf.Monitor.ReadChanged).
type changedReader interface {
	ReadChanged(into map[uint64]bpf.CgroupStats) ([]uint64, error)
}

// changedTCPReader reads every watched cgroup's TCP signals at once,
// keeping the entries that did not move and saying which did
// (netqos.Programs.ReadChangedTCP).
type changedTCPReader interface {
	ReadChangedTCP(into map[uint64]netqos.TCPStats) ([]uint64, error)
}

// allTCPReader reads every watched cgroup's TCP signals at once
// (netqos.Programs.ReadAllTCP).
type allTCPReader interface {
	ReadAllTCP(into map[uint64]netqos.TCPStats) error
}

// monitorEBPF adapts the eBPF counters (and the TCP signals, when tcp is
// set) to the monitor's input. It is a monitor.EBPFPass: each pass reads
// every cgroup's counters with ReadAll (a few system calls) and answers
// Stats from them; where ReadAll is missing or fails, Stats looks each
// cgroup up. Only the monitor's sampling goroutine calls it.
type monitorEBPF struct {
	e   EBPF
	tcp TCPSignals // nil: no TCP signals

	all       map[uint64]bpf.CgroupStats // read by BeginPass when batched
	batched   bool
	allTCP    map[uint64]netqos.TCPStats
	tcpBatchd bool
	// What BeginPass knows moved since the previous pass (#29), when it
	// read with ReadChanged and ReadChangedTCP in this pass and the one
	// before (changes): the cgroups whose counters or TCP signals they
	// stored anew.
	changes, readChanged, tcpChanged bool
	moved                            map[uint64]bool
	// The last Stats answer's counters: the histograms it returns are
	// slices of these, reused by the next call (the monitor copies what
	// it keeps), so that a pass allocates none (#29).
	last    bpf.CgroupStats
	lastTCP netqos.TCPStats
}

// BeginPass reads every cgroup's counters for the pass's Stats calls.
// It does not fail: a failed batch read leaves Stats to look each cgroup
// up, and report per cgroup what it cannot read.
func (a *monitorEBPF) BeginPass() error {
	a.batched, a.tcpBatchd, a.changes = false, false, false
	if a.all == nil {
		a.all, a.moved = map[uint64]bpf.CgroupStats{}, map[uint64]bool{}
	}
	if r, ok := a.e.(changedReader); ok {
		moved, err := r.ReadChanged(a.all)
		a.batched = err == nil
		// A pass after one that did not read so knows nothing of what
		// moved (ReadChanged assembled every entry anew then).
		a.changes = a.batched && a.readChanged
		a.readChanged = a.batched
		clear(a.moved)
		for _, id := range moved {
			a.moved[id] = true
		}
	} else if r, ok := a.e.(allReader); ok {
		a.batched = r.ReadAll(a.all) == nil
	}
	if a.allTCP == nil {
		a.allTCP = map[uint64]netqos.TCPStats{}
	}
	if r, ok := a.tcp.(changedTCPReader); ok {
		moved, err := r.ReadChangedTCP(a.allTCP)
		a.tcpBatchd = err == nil
		a.changes = a.changes && a.tcpBatchd && a.tcpChanged
		a.tcpChanged = a.tcpBatchd
		for _, id := range moved {
			a.moved[id] = true
		}
	} else if r, ok := a.tcp.(allTCPReader); ok {
		a.tcpBatchd = r.ReadAllTCP(a.allTCP) == nil
		a.changes = false // no knowledge of what moved
	} else if a.tcp != nil {
		a.changes = false // TCP signals read cgroup by cgroup
	}
	return nil
}

// Unchanged implements monitor.EBPFChanges: the cgroup's counters and TCP
// signals are those the previous pass read (BeginPass read them with
// ReadChanged and ReadChangedTCP in both passes, which left its entries
// as they were).
func (a *monitorEBPF) Unchanged(id uint64) bool {
	if !a.changes || a.moved[id] {
		return false
	}
	_, ok := a.all[id]
	return ok
}

// Stats returns a cgroup's counters in the monitor's terms.
func (a *monitorEBPF) Stats(id uint64) (monitor.EBPFStats, error) {
	s := &a.last
	if a.batched {
		var ok bool
		if *s, ok = a.all[id]; !ok {
			return monitor.EBPFStats{}, fmt.Errorf("stats of cgroup %d: %w", id, bpf.ErrNotTracked)
		}
	} else {
		var err error
		if *s, err = a.e.Stats(id); err != nil {
			return monitor.EBPFStats{}, err
		}
	}
	out := monitor.EBPFStats{
		OnCPU: s.OnCPU, Wakeups: s.Wakeups, RunqBuckets: s.RunqLatency[:], RunqSum: s.RunqTotal,
		DelayedByRevocable: s.DelayedByRevocable, NetRxBytes: s.NetRxBytes, NetRxPackets: s.NetRxPackets,
		NetTxBytes: s.NetTxBytes, NetTxPackets: s.NetTxPackets, ReclaimStall: s.ReclaimStall, OOMKills: s.OOMKills,
		SyncBuckets: s.SyncLatency[:], SyncCount: s.SyncCount, SyncWait: s.SyncWait, Running: s.Running, Sched: s.Sched,
		BlockBuckets: s.BlockLatency[:], BlockCount: s.BlockCount,
	}
	if a.tcp == nil {
		return out, nil
	}
	t := &a.lastTCP
	var ok bool
	if a.tcpBatchd {
		*t, ok = a.allTCP[id]
	} else {
		var err error
		*t, err = a.tcp.TCPStats(id)
		ok = err == nil
	}
	if ok {
		out.TCPRTTBuckets, out.TCPRTTCount, out.TCPRetransmits = t.RTT[:], t.RTTCount, t.Retransmits
	}
	return out, nil
}

// MonitorStats returns the adapter that lets a monitor read e's counters.
func MonitorStats(e EBPF) monitor.EBPF { return &monitorEBPF{e: e} }

// tracked is a container the agent measures.
type tracked struct {
	cgroupID  uint64
	taskID    string
	revocable bool
}

// observer points the monitor and the eBPF programs at the containers the
// agent runs and at the protected cgroups, tells the network subsystem
// which revocable tasks to pace, and maps eBPF cgroup ids back to
// containers. Its mutex guards tracked and serializes sync, so that an
// older call never re-tracks a container a newer one untracked nor paces a
// stale set of tasks (the netlink calls that takes last microseconds); it
// is never held by anything else.
type observer struct {
	log         *slog.Logger
	cz          Containerizer
	ebpf        EBPF             // nil without eBPF
	monitor     *monitor.Monitor // nil without a monitor
	network     *network.Network // nil without network QoS
	tcp         TCPSignals       // nil without the TCP signals
	unifiedRoot string
	protect     []string

	mu       sync.Mutex
	tracked  map[string]tracked
	services map[uint64]string // cgroup id -> "agent", "supervisors"; found once
}

// sync tracks new containers and untracks ended ones.
func (o *observer) sync() {
	if o.monitor == nil && o.ebpf == nil && o.network == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	live := map[string]bool{}
	var targets []monitor.Target
	for _, c := range o.cz.Containers() {
		if c.Exit != nil {
			continue
		}
		live[c.ID] = true
		class := bpf.ClassGuaranteed
		if c.Spec.Revocable {
			class = bpf.ClassRevocable
		}
		tr := o.track(c.ID, c.CgroupPath, class)
		tr.taskID, tr.revocable = c.Spec.TaskID, c.Spec.Revocable
		o.tracked[c.ID] = tr
		targets = append(targets, monitor.Target{
			ID: c.ID, TaskID: c.Spec.TaskID, Revocable: c.Spec.Revocable, CgroupPath: c.CgroupPath, CgroupID: tr.cgroupID,
			CPULimit: c.Spec.Resources.CPUs(), MemLimit: uint64(c.Spec.Resources.Mem() * (1 << 20)),
		})
	}
	for _, path := range o.protect {
		id := protectedPrefix + path
		live[id] = true
		tr := o.track(id, path, bpf.ClassProtected)
		targets = append(targets, monitor.Target{ID: id, CgroupPath: path, CgroupID: tr.cgroupID})
	}
	for id, tr := range o.tracked {
		if live[id] {
			continue
		}
		if o.ebpf != nil && tr.cgroupID != 0 {
			_ = o.ebpf.Untrack(tr.cgroupID)
		}
		if o.tcp != nil && tr.cgroupID != 0 {
			_ = o.tcp.Unwatch(tr.cgroupID)
		}
		delete(o.tracked, id)
	}
	if o.monitor != nil {
		o.monitor.SetTargets(targets)
	}
	if o.network != nil {
		tasks := pacedTasks(o.cz.Containers(), func(id string) uint64 { return o.tracked[id].cgroupID })
		if err := o.network.SetTasks(tasks); err != nil {
			o.log.Warn("network QoS: pace revocable tasks", "err", err)
		}
	}
}

// track returns the tracking of a cgroup, starting it on first sight.
// Caller holds o.mu.
func (o *observer) track(id, cgroupPath string, class bpf.Class) tracked {
	if tr, ok := o.tracked[id]; ok {
		return tr
	}
	var tr tracked
	cgid, err := bpf.CgroupID(filepath.Join(o.unifiedRoot, cgroupPath))
	switch {
	case err != nil && class == bpf.ClassProtected:
		o.log.Warn("protected cgroup not found in the v2 tree; measured through cgroupfs only", "cgroup", cgroupPath, "err", err)
	case err == nil:
		tr.cgroupID = cgid
		if o.ebpf != nil {
			if err := o.ebpf.Track(cgid, class); err != nil {
				o.log.Warn("eBPF: track cgroup", "id", id, "cgroup", cgroupPath, "err", err)
			}
		}
		if o.tcp != nil {
			if err := o.tcp.Watch(cgid); err != nil {
				o.log.Warn("eBPF: watch the TCP signals of a cgroup", "id", id, "cgroup", cgroupPath, "err", err)
			}
		}
	}
	o.tracked[id] = tr
	return tr
}

// container maps an eBPF cgroup id back to a container id.
func (o *observer) container(cgroupID uint64) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, tr := range o.tracked {
		if tr.cgroupID == cgroupID {
			return id, true
		}
	}
	return "", false
}

// revocable reports whether a cgroup is a tracked revocable container's.
func (o *observer) revocable(cgroupID uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, tr := range o.tracked {
		if tr.cgroupID == cgroupID {
			return tr.revocable
		}
	}
	return false
}

// culprit names what held a CPU while a task of a tracked cgroup waited
// for it (eBPF who-delayed-whom): the container id of a tracked cgroup,
// "agent" for the agent's own cgroup, "supervisors" for the task
// supervisors', "kernel", "idle" and "unknown" for what bpf names so, and
// "host" for any other cgroup.
func (o *observer) culprit(cgroupID uint64) string {
	if name, ok := bpf.CulpritName(cgroupID); ok {
		return name
	}
	if id, ok := o.container(cgroupID); ok {
		return id
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.services == nil {
		o.services = o.serviceCgroups()
	}
	if name, ok := o.services[cgroupID]; ok {
		return name
	}
	return "host"
}

// serviceCgroups finds the cgroup ids of the agent's own cgroup and of the
// supervisors' (<root>/supervisors, beside the containers' subtrees).
// Caller holds o.mu.
func (o *observer) serviceCgroups() map[uint64]string {
	out := map[uint64]string{}
	if self, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for line := range strings.SplitSeq(string(self), "\n") {
			if path, ok := strings.CutPrefix(line, "0::"); ok {
				if id, err := bpf.CgroupID(filepath.Join(o.unifiedRoot, path)); err == nil {
					out[id] = "agent"
				}
			}
		}
	}
	// Any container names the cgroup root, beside which the supervisors live.
	if cs := o.cz.Containers(); len(cs) > 0 {
		root := filepath.Dir(filepath.Dir(cs[0].CgroupPath))
		if id, err := bpf.CgroupID(filepath.Join(o.unifiedRoot, root, "supervisors")); err == nil {
			out[id] = "supervisors"
		}
	}
	return out
}

// delays returns, for a guaranteed container or protected service, how long
// each culprit held a CPU while its tasks waited, cumulative; nil without
// eBPF.
func (o *observer) delays(containerID string) []*slacklinev1.Delay {
	cgid := o.cgroupID(containerID)
	if o.ebpf == nil || cgid == 0 {
		return nil
	}
	cumulative, err := o.ebpf.DelayedBy(cgid)
	if err != nil {
		return nil
	}
	return o.named(cumulative)
}

// delayReader returns delays for a caller that asks about several
// containers in a row: where the eBPF programs can (AllDelays), the map
// of delays is walked once, at the first container with a cgroup, rather
// than once per container (a system call per entry, and one more that
// finds its end: #29).
func (o *observer) delayReader() func(containerID string) []*slacklinev1.Delay {
	b, ok := o.ebpf.(allDelayer)
	if !ok {
		return o.delays
	}
	var all map[uint64]map[uint64]time.Duration
	var err error
	read := false
	return func(containerID string) []*slacklinev1.Delay {
		cgid := o.cgroupID(containerID)
		if cgid == 0 {
			return nil
		}
		if !read {
			all, err = b.AllDelays()
			read = true
		}
		switch {
		case errors.Is(err, errNoAllDelays):
			return o.delays(containerID)
		case err != nil:
			return nil
		}
		return o.named(all[cgid]) // a victim never delayed has no entry: none
	}
}

// named sums cumulative delays by culprit name, sorted by name.
func (o *observer) named(cumulative map[uint64]time.Duration) []*slacklinev1.Delay {
	byName := map[string]time.Duration{}
	for culprit, d := range cumulative {
		byName[o.culprit(culprit)] += d
	}
	out := make([]*slacklinev1.Delay, 0, len(byName))
	for name, d := range byName {
		out = append(out, &slacklinev1.Delay{Culprit: name, Secs: d.Seconds()})
	}
	slices.SortFunc(out, func(a, b *slacklinev1.Delay) int { return strings.Compare(a.GetCulprit(), b.GetCulprit()) })
	return out
}

// cgroupID returns the cgroup id of a tracked container (0 if unknown).
func (o *observer) cgroupID(containerID string) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tracked[containerID].cgroupID
}

// featuresCollector exports the feature probes as a gauge.
type featuresCollector struct{ results func() []bpf.FeatureResult }

var featureDesc = prometheus.NewDesc("slackline_agent_ebpf_feature_available",
	"Whether an eBPF feature probe succeeded (1) or not (0), with the reason.", []string{"feature", "status"}, nil)

func (f featuresCollector) Describe(ch chan<- *prometheus.Desc) { ch <- featureDesc }

func (f featuresCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range f.results() {
		v := 0.0
		if r.Err == nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(featureDesc, prometheus.GaugeValue, v, r.Name, r.Status().String())
	}
}
