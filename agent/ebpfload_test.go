package agent

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/slackline/slackline/bpf"
)

// fakeMonitor records what lateEBPF forwards to the loaded monitor.
type fakeMonitor struct {
	tracked map[uint64]bpf.Class
	events  chan bpf.ThresholdEvent
	closed  bool
}

func newFakeMonitor() *fakeMonitor {
	return &fakeMonitor{tracked: map[uint64]bpf.Class{}, events: make(chan bpf.ThresholdEvent, 1)}
}

func (f *fakeMonitor) Track(id uint64, c bpf.Class) error { f.tracked[id] = c; return nil }
func (f *fakeMonitor) Untrack(id uint64) error {
	if _, ok := f.tracked[id]; !ok {
		return bpf.ErrNotTracked
	}
	delete(f.tracked, id)
	return nil
}
func (f *fakeMonitor) Stats(id uint64) (bpf.CgroupStats, error) {
	if _, ok := f.tracked[id]; !ok {
		return bpf.CgroupStats{}, bpf.ErrNotTracked
	}
	return bpf.CgroupStats{OnCPU: time.Duration(id)}, nil
}
func (f *fakeMonitor) DelayedBy(id uint64) (map[uint64]time.Duration, error) {
	return map[uint64]time.Duration{id: time.Second}, nil
}
func (f *fakeMonitor) Events() <-chan bpf.ThresholdEvent { return f.events }
func (f *fakeMonitor) Run(ctx context.Context) error {
	<-ctx.Done()
	close(f.events)
	return nil
}
func (f *fakeMonitor) Close() error { f.closed = true; return nil }

func statuses(rs []bpf.FeatureResult) map[string]bpf.FeatureStatus {
	out := map[string]bpf.FeatureStatus{}
	for _, r := range rs {
		out[r.Name] = r.Status()
	}
	return out
}

// TestLateEBPFLoaded: what is tracked while the monitor loads is tracked on
// it once loaded; until then the counters are unavailable as loading, and
// the features say loading, then the probes' results.
func TestLateEBPFLoaded(t *testing.T) {
	t.Parallel()
	l := newLateEBPF()
	for _, f := range l.features() {
		if f.Status() != bpf.FeatureLoading {
			t.Errorf("before the load, feature %s is %v, want loading", f.Name, f.Status())
		}
	}
	if got := len(l.features()); got != len(bpf.Features)+1 {
		t.Errorf("%d features while loading, want the %d probes and %s", got, len(bpf.Features), FeatureEBPFMonitor)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Track(1, bpf.ClassGuaranteed))
	must(l.Track(2, bpf.ClassRevocable))
	must(l.Track(3, bpf.ClassRevocable))
	must(l.Track(3, bpf.ClassProtected))
	must(l.Untrack(2))
	if _, err := l.Stats(1); !errors.Is(err, bpf.ErrLoading) {
		t.Errorf("Stats while loading: %v, want ErrLoading", err)
	}
	if _, err := l.DelayedBy(1); !errors.Is(err, bpf.ErrLoading) {
		t.Errorf("DelayedBy while loading: %v, want ErrLoading", err)
	}
	if l.Events() != nil {
		t.Error("Events while loading is not nil")
	}

	m := newFakeMonitor()
	probes := []bpf.FeatureResult{{Name: "btf"}, {Name: "sched_info", Err: bpf.ErrPermission}}
	loaded := make(chan error, 1)
	l.start(func() { loaded <- l.done(m, nil, probes) })
	must(<-loaded)
	if want := map[uint64]bpf.Class{1: bpf.ClassGuaranteed, 3: bpf.ClassProtected}; !maps.Equal(m.tracked, want) {
		t.Errorf("tracked on the loaded monitor: %v, want %v", m.tracked, want)
	}
	if st, err := l.Stats(3); err != nil || st.OnCPU != 3 {
		t.Errorf("Stats once loaded: %v, %v", st, err)
	}
	must(l.Track(4, bpf.ClassRevocable))
	must(l.Untrack(1))
	if want := map[uint64]bpf.Class{3: bpf.ClassProtected, 4: bpf.ClassRevocable}; !maps.Equal(m.tracked, want) {
		t.Errorf("after load: tracked %v, want %v", m.tracked, want)
	}
	want := map[string]bpf.FeatureStatus{"btf": bpf.FeatureAvailable, "sched_info": bpf.FeatureNoPermission, FeatureEBPFMonitor: bpf.FeatureAvailable}
	if got := statuses(l.features()); !maps.Equal(got, want) {
		t.Errorf("features once loaded: %v, want %v", got, want)
	}

	// Once loaded, the events are the monitor's own channel (#29: no
	// goroutine relays them), and Run runs the monitor until cancelled.
	select {
	case <-l.EventsReady():
	default:
		t.Fatal("EventsReady not closed once loaded")
	}
	if l.Events() != (<-chan bpf.ThresholdEvent)(m.events) {
		t.Error("Events is not the loaded monitor's channel")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	m.events <- bpf.ThresholdEvent{Cgroup: 3}
	if ev := <-l.Events(); ev.Cgroup != 3 {
		t.Errorf("event of cgroup %d, want 3", ev.Cgroup)
	}
	cancel()
	must(<-done)
	must(l.close())
	if !m.closed {
		t.Error("close did not close the loaded monitor")
	}
}

// TestLateEBPFFailed: when the monitor could not be loaded its counters
// stay unavailable with the load's error, ebpf_monitor says why, and Run
// returns at once.
func TestLateEBPFFailed(t *testing.T) {
	t.Parallel()
	l := newLateEBPF()
	if err := l.Track(1, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	why := bpf.Classify(errors.Join(errors.New("load eBPF: nothing could be attached"), bpf.ErrPermission))
	l.start(func() {})
	if err := l.done(nil, why, []bpf.FeatureResult{{Name: "btf"}}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{l.Track(2, bpf.ClassGuaranteed), l.Untrack(1)} {
		if !errors.Is(err, bpf.ErrPermission) {
			t.Errorf("Track or Untrack after a failed load: %v, want the load's error", err)
		}
	}
	if _, err := l.Stats(1); !errors.Is(err, bpf.ErrPermission) {
		t.Errorf("Stats after a failed load: %v, want the load's error", err)
	}
	want := map[string]bpf.FeatureStatus{"btf": bpf.FeatureAvailable, FeatureEBPFMonitor: bpf.FeatureNoPermission}
	if got := statuses(l.features()); !maps.Equal(got, want) {
		t.Errorf("features: %v, want %v", got, want)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Errorf("Run without a monitor: %v", err)
	}
	if err := l.close(); err != nil {
		t.Error(err)
	}
}

// TestLateEBPFRunCancelledWhileLoading: Run returns when cancelled before
// the monitor is loaded.
func TestLateEBPFRunCancelledWhileLoading(t *testing.T) {
	t.Parallel()
	l := newLateEBPF()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Run(ctx); err != nil {
		t.Errorf("Run cancelled while loading: %v", err)
	}
	if err := l.close(); err != nil { // never started: nothing to wait for
		t.Error(err)
	}
}

// TestFeaturesOrder: the eBPF monitor's features (loading at first) come
// before the others, and GetFeatures maps loading onto its own status.
func TestFeaturesOrder(t *testing.T) {
	t.Parallel()
	a := &Agent{cfg: Config{lateEBPF: newLateEBPF(), Features: []bpf.FeatureResult{{Name: FeatureNetworkQoS}}}}
	got := a.features()
	names := make([]string, len(got))
	for i, f := range got {
		names[i] = f.Name
	}
	if names[len(names)-1] != FeatureNetworkQoS || names[len(names)-2] != FeatureEBPFMonitor || !slices.Contains(names, "btf") {
		t.Errorf("features %v", names)
	}
	if s := featureStatusProto(bpf.FeatureLoading).String(); s != "FEATURE_STATUS_LOADING" {
		t.Errorf("loading maps onto %s", s)
	}
}

// TestStartupTimeline: each phase is recorded with its own duration, in
// the order phases ended.
func TestStartupTimeline(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tl := newStartupTimeline(func() time.Time { return now })
	began := tl.start
	now = now.Add(20 * time.Millisecond)
	began = tl.phase("containerizer", began)
	background := began
	now = now.Add(5 * time.Millisecond)
	if began = tl.phase("monitor", began); !began.Equal(now) {
		t.Errorf("phase returned %v, want now (%v)", began, now)
	}
	now = now.Add(1500 * time.Millisecond)
	tl.phase("ebpf_monitor", background)
	if got, want := tl.String(), "containerizer=20ms monitor=5ms ebpf_monitor=1.505s"; got != want {
		t.Errorf("timeline %q, want %q", got, want)
	}
	if got := tl.sinceStart(); got != 1525*time.Millisecond {
		t.Errorf("since start %v", got)
	}
	if !tl.first() || tl.first() {
		t.Error("first is true once only")
	}
	var none *startupTimeline
	if none.first() {
		t.Error("a nil timeline logs nothing")
	}
}
