package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slackline/slackline/bpf"
)

// FeatureEBPFMonitor is the GetFeatures entry that says whether the eBPF
// monitor (package bpf's programs) runs: loading, available, or why not.
const FeatureEBPFMonitor = "ebpf_monitor"

// lateEBPF is the eBPF monitor loaded in the background, so that the agent
// registers without waiting for the kernel to verify the programs (a few
// seconds on a loaded host, most of the agent's start). Until the monitor
// is loaded it records the cgroups tracked, which it tracks on the monitor
// once there, and its counters are unavailable (bpf.ErrLoading); when the
// load failed they stay unavailable, with its error. It implements EBPF.
type lateEBPF struct {
	ready   chan struct{} // closed by done
	started atomic.Bool   // start was called

	mu      sync.Mutex
	mon     loadedEBPF           // set by done; nil when loading failed
	err     error                // why the monitor is not loaded
	results []bpf.FeatureResult  // the probes' results and ebpf_monitor, set by done
	tracked map[uint64]bpf.Class // tracked before the monitor was loaded
}

// loadedEBPF is the loaded monitor (*bpf.Monitor).
type loadedEBPF interface {
	EBPF
	Close() error
}

func newLateEBPF() *lateEBPF {
	return &lateEBPF{ready: make(chan struct{}),
		tracked: map[uint64]bpf.Class{}, err: fmt.Errorf("eBPF monitor: %w", bpf.ErrLoading)}
}

// loadingFeatures are the features that lateEBPF reports once loaded, all
// loading.
func loadingFeatures() []bpf.FeatureResult {
	var out []bpf.FeatureResult
	for _, f := range bpf.Features {
		out = append(out, bpf.FeatureResult{Name: f.Name, Err: fmt.Errorf("%s: %w", f.Name, bpf.ErrLoading)})
	}
	return append(out, bpf.FeatureResult{Name: FeatureEBPFMonitor, Err: fmt.Errorf("%s: %w", FeatureEBPFMonitor, bpf.ErrLoading)})
}

// done publishes the loaded monitor (nil and why when it could not be
// loaded) and the probes' results, and tracks on it what was tracked
// meanwhile, returning the errors of those Track calls. It is called once.
func (l *lateEBPF) done(m loadedEBPF, err error, probes []bpf.FeatureResult) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer close(l.ready)
	monitor := bpf.FeatureResult{Name: FeatureEBPFMonitor}
	var errs []error
	if m == nil {
		l.err = err
		monitor.Err = fmt.Errorf("%s: %w", FeatureEBPFMonitor, err)
	} else {
		for id, class := range l.tracked {
			errs = append(errs, m.Track(id, class))
		}
	}
	l.mon, l.tracked = m, nil
	l.results = append(append([]bpf.FeatureResult(nil), probes...), monitor)
	return errors.Join(errs...)
}

// features returns the probes' results and ebpf_monitor once loaded, else
// loadingFeatures.
func (l *lateEBPF) features() []bpf.FeatureResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.results == nil {
		return loadingFeatures()
	}
	return l.results
}

// monitor returns the monitor, or nil and why not.
func (l *lateEBPF) monitor() (loadedEBPF, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mon, l.err
}

func (l *lateEBPF) Track(cgroupID uint64, class bpf.Class) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mon != nil {
		return l.mon.Track(cgroupID, class)
	}
	if l.tracked != nil {
		l.tracked[cgroupID] = class
		return nil
	}
	return l.err
}

func (l *lateEBPF) Untrack(cgroupID uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mon != nil {
		return l.mon.Untrack(cgroupID)
	}
	if l.tracked != nil {
		delete(l.tracked, cgroupID)
		return nil
	}
	return l.err
}

func (l *lateEBPF) Stats(cgroupID uint64) (bpf.CgroupStats, error) {
	m, err := l.monitor()
	if m == nil {
		return bpf.CgroupStats{}, err
	}
	return m.Stats(cgroupID)
}

// ReadAll is bpf.Monitor.ReadAll once the monitor is loaded.
func (l *lateEBPF) ReadAll(into map[uint64]bpf.CgroupStats) error {
	m, err := l.monitor()
	if m == nil {
		return err
	}
	if r, ok := m.(allReader); ok {
		return r.ReadAll(into)
	}
	return errNoReadAll
}

// ReadChanged is bpf.Monitor.ReadChanged once the monitor is loaded.
func (l *lateEBPF) ReadChanged(into map[uint64]bpf.CgroupStats) ([]uint64, error) {
	m, err := l.monitor()
	if m == nil {
		return nil, err
	}
	if r, ok := m.(changedReader); ok {
		return r.ReadChanged(into)
	}
	return nil, errNoReadAll
}

// errNoReadAll says that the eBPF programs read counters cgroup by cgroup
// only.
var errNoReadAll = errors.New("eBPF programs without ReadAll")

func (l *lateEBPF) DelayedBy(victim uint64) (map[uint64]time.Duration, error) {
	m, err := l.monitor()
	if m == nil {
		return nil, err
	}
	return m.DelayedBy(victim)
}

// AllDelays is bpf.Monitor.AllDelays once the monitor is loaded;
// errNoAllDelays when the loaded programs cannot (callers then ask
// DelayedBy victim by victim).
func (l *lateEBPF) AllDelays() (map[uint64]map[uint64]time.Duration, error) {
	m, err := l.monitor()
	if m == nil {
		return nil, err
	}
	if b, ok := m.(allDelayer); ok {
		return b.AllDelays()
	}
	return nil, errNoAllDelays
}

// errNoAllDelays says that the eBPF programs read delays victim by victim
// only.
var errNoAllDelays = errors.New("eBPF programs without AllDelays")

// Events returns the loaded monitor's threshold events: its own channel,
// which the QoS loop reads directly (no goroutine relays them, #29); nil
// (no events) while loading and when the load failed. Ask again once
// EventsReady is closed.
func (l *lateEBPF) Events() <-chan bpf.ThresholdEvent {
	if m, _ := l.monitor(); m != nil {
		return m.Events()
	}
	return nil
}

// EventsReady is closed once the load ended: Events then returns what it
// will always return.
func (l *lateEBPF) EventsReady() <-chan struct{} { return l.ready }

// Run waits for the monitor, then runs it until ctx is cancelled. Without
// a monitor it returns nil at once.
func (l *lateEBPF) Run(ctx context.Context) error {
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil
	}
	m, _ := l.monitor()
	if m == nil {
		return nil
	}
	return m.Run(ctx)
}

// start runs load, which calls done, in the background.
func (l *lateEBPF) start(load func()) {
	l.started.Store(true)
	go load()
}

// close closes the monitor once loaded (it waits for the load to end, if
// started).
func (l *lateEBPF) close() error {
	if !l.started.Load() {
		return nil
	}
	<-l.ready
	if m, _ := l.monitor(); m != nil {
		return m.Close()
	}
	return nil
}
