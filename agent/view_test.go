package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/history"
	"github.com/slackline/slackline/agent/monitor"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestGetHistoryFromMonitorPasses: every monitor pass lands in the history
// GetHistory serves, at the monitor's resolution, with CPU and memory as
// the monitor measured them; since returns only what is newer; a container
// that ended stays, marked ended; bad arguments name their field.
func TestGetHistoryFromMonitorPasses(t *testing.T) {
	m, write := fakeMonitorNode(t, 10)
	a := &Agent{cfg: Config{Monitor: m}}
	a.history = newViewHistory(m, &observer{})
	node := nodeService{a}
	m.SetTargets([]monitor.Target{{ID: "c1", TaskID: "web", CgroupPath: "r/c1"}, {ID: "c2", TaskID: "batch", Revocable: true, CgroupPath: "r/c2"}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for pass := range 5 {
		// c1 uses half a core, c2 a quarter; memory grows by 1 MiB a pass.
		write("cgroup/r/c1/cpu.stat", fmt.Sprintf("usage_usec %d\n", pass*50_000))
		write("cgroup/r/c2/cpu.stat", fmt.Sprintf("usage_usec %d\n", pass*25_000))
		write("cgroup/r/c1/memory.current", fmt.Sprint((pass+1)<<20))
		write("cgroup/r/c2/memory.current", fmt.Sprint(4<<20))
		if pass == 4 {
			m.SetTargets([]monitor.Target{{ID: "c1", TaskID: "web", CgroupPath: "r/c1"}})
		}
		if err := m.Sample(t0.Add(time.Duration(pass) * 100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := node.GetHistory(context.Background(), connect.NewRequest(&slacklinev1.GetHistoryRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	series := resp.Msg.GetSeries()
	if len(series) != 2 || series[0].GetTaskId() != "batch" || series[1].GetTaskId() != "web" {
		t.Fatalf("series %v, want batch's and web's", series)
	}
	batch, web := series[0], series[1]
	if !batch.GetEnded() || !batch.GetRevocable() || len(batch.GetTimes()) != 4 {
		t.Fatalf("batch: ended %v, revocable %v, %d points; want ended, revocable, 4 points", batch.GetEnded(), batch.GetRevocable(), len(batch.GetTimes()))
	}
	if web.GetEnded() || len(web.GetTimes()) != 5 {
		t.Fatalf("web: ended %v, %d points; want live, 5 points", web.GetEnded(), len(web.GetTimes()))
	}
	for i, ts := range web.GetTimes() {
		if want := float64(t0.Add(time.Duration(i)*100*time.Millisecond).UnixMilli()) / 1e3; ts != want {
			t.Errorf("web time %d: %v, want %v", i, ts, want)
		}
		if want := float32((i + 1) << 20); web.GetMemBytes()[i] != want {
			t.Errorf("web memory %d: %v, want %v", i, web.GetMemBytes()[i], want)
		}
		if want := float32(0.5); i > 0 && web.GetCpus()[i] != want {
			t.Errorf("web CPU %d: %v, want %v", i, web.GetCpus()[i], want)
		}
	}
	if resp.Msg.GetIntervalSeconds() != m.Interval().Seconds() || resp.Msg.GetWindowSeconds() != 900 {
		t.Errorf("interval %v, window %v; want the monitor's and 900 s", resp.Msg.GetIntervalSeconds(), resp.Msg.GetWindowSeconds())
	}

	newer, err := node.GetHistory(context.Background(), connect.NewRequest(&slacklinev1.GetHistoryRequest{
		Since: timestamppb.New(t0.Add(300 * time.Millisecond)), TaskId: "web"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := newer.Msg.GetSeries(); len(s) != 1 || len(s[0].GetTimes()) != 1 {
		t.Fatalf("since 300 ms for web: %v, want web's last point only", s)
	}

	for _, req := range []*slacklinev1.GetHistoryRequest{{StepSeconds: -1}, {StepSeconds: 10_000}} {
		_, err := node.GetHistory(context.Background(), connect.NewRequest(req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("GetHistory(%v): %v, want invalid_argument naming step_seconds", req, err)
		}
	}
	_, err = node.GetDelays(context.Background(), connect.NewRequest(&slacklinev1.GetDelaysRequest{WindowSeconds: 901}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("GetDelays over 901 s: %v, want invalid_argument", err)
	}
	delays, err := node.GetDelays(context.Background(), connect.NewRequest(&slacklinev1.GetDelaysRequest{}))
	if err != nil || len(delays.Msg.GetDelays()) != 0 {
		t.Errorf("GetDelays without eBPF: %v, %v; want no delays", delays, err)
	}
	if _, err := (nodeService{&Agent{}}).GetHistory(context.Background(), connect.NewRequest(&slacklinev1.GetHistoryRequest{})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("GetHistory without a monitor: %v, want failed_precondition", err)
	}
}

// TestGetHistoryFitsItsAnswer: more points than one answer holds are
// averaged over a coarser step that fits, which the answer names; a step
// that fits is kept. 300 containers at the live view's 1 s steps (270,300
// points) exceed MaxHistoryResponsePoints.
func TestGetHistoryFitsItsAnswer(t *testing.T) {
	t.Parallel()
	store := history.New(history.Config{Interval: time.Second})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	samples := make([]history.Sample, 300)
	for i := range samples {
		samples[i].ContainerID = fmt.Sprint("c", i)
		samples[i].CPUs = 0.5
	}
	for pass := range 901 { // the whole 15-minute window at 1 s
		now := t0.Add(time.Duration(pass) * time.Second)
		for i := range samples {
			samples[i].Time = now
		}
		store.Record(now, samples)
	}
	node := nodeService{&Agent{history: &viewHistory{store: store}}}
	count := func(resp *slacklinev1.GetHistoryResponse) (n int) {
		for _, s := range resp.GetSeries() {
			n += len(s.GetTimes())
		}
		return n
	}
	resp, err := node.GetHistory(context.Background(), connect.NewRequest(&slacklinev1.GetHistoryRequest{StepSeconds: 1}))
	if err != nil {
		t.Fatalf("GetHistory of 300 containers at 1 s steps: %v", err)
	}
	if got := resp.Msg.GetStepSeconds(); got != 2 {
		t.Errorf("step_seconds %v, want 2, the finest that fits", got)
	}
	if n := count(resp.Msg); n > MaxHistoryResponsePoints || n < MaxHistoryResponsePoints/2 {
		t.Errorf("%d points, want at most %d and no coarser than needed", n, MaxHistoryResponsePoints)
	}
	if len(resp.Msg.GetSeries()) != 300 || resp.Msg.GetSeries()[0].GetCpus()[0] != 0.5 {
		t.Errorf("%d series, first cpus %v: want all 300, averaged", len(resp.Msg.GetSeries()), resp.Msg.GetSeries()[0].GetCpus()[:1])
	}
	// A step that fits is the answer's.
	resp, err = node.GetHistory(context.Background(), connect.NewRequest(&slacklinev1.GetHistoryRequest{StepSeconds: 5}))
	if err != nil || resp.Msg.GetStepSeconds() != 5 || count(resp.Msg) > 300*182 {
		t.Fatalf("GetHistory at 5 s: step %v, %d points, %v", resp.Msg.GetStepSeconds(), count(resp.Msg), err)
	}
}

// delayCounter is an EBPF that answers DelayedBy and AllDelays from one
// table (victim -> culprit -> delay) and counts the calls of each.
type delayCounter struct {
	perCgroupEBPF
	table                map[uint64]map[uint64]time.Duration
	delayedBy, allDelays int
	noAll                bool // AllDelays answers errNoAllDelays
}

func (d *delayCounter) DelayedBy(victim uint64) (map[uint64]time.Duration, error) {
	d.delayedBy++
	out := map[uint64]time.Duration{}
	for culprit, v := range d.table[victim] {
		out[culprit] = v
	}
	return out, nil
}

func (d *delayCounter) AllDelays() (map[uint64]map[uint64]time.Duration, error) {
	d.allDelays++
	if d.noAll {
		return nil, errNoAllDelays
	}
	return d.table, nil
}

// TestVictimsReadDelaysOnce (#29): the history's victims are read from one
// walk of the delays map (AllDelays), not one per guaranteed container,
// and are what DelayedBy gives victim by victim: the culprits by name, an
// undelayed victim with none, a revocable container and an untracked one
// left out; without AllDelays, DelayedBy per victim.
func TestVictimsReadDelaysOnce(t *testing.T) {
	t.Parallel()
	usages := []monitor.Usage{{ContainerID: "g1", TaskID: "t1"}, {ContainerID: "g2", TaskID: "t2"}, {ContainerID: "r1", TaskID: "t3", Revocable: true},
		{ContainerID: "g3", TaskID: "t4"}, {ContainerID: "gone", TaskID: "t5"}}
	want := []history.Victim{
		{ContainerID: "g1", TaskID: "t1", Culprits: map[string]float64{"r1": 2}},
		{ContainerID: "g2", TaskID: "t2", Culprits: map[string]float64{}},
		{ContainerID: "g3", TaskID: "t4", Culprits: map[string]float64{"r1": 0.5, "g1": 1}},
	}
	for _, noAll := range []bool{false, true} {
		t.Run(fmt.Sprintf("noAll=%v", noAll), func(t *testing.T) {
			t.Parallel()
			fake := &delayCounter{noAll: noAll, table: map[uint64]map[uint64]time.Duration{
				11: {13: 2 * time.Second},
				14: {13: 500 * time.Millisecond, 11: time.Second},
			}}
			o := &observer{ebpf: fake, tracked: map[string]tracked{
				"g1": {cgroupID: 11}, "g2": {cgroupID: 12}, "r1": {cgroupID: 13, revocable: true}, "g3": {cgroupID: 14},
			}}
			got := (&viewHistory{watch: o}).victims(usages)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
			wantAll, wantBy := 1, 0
			if noAll {
				wantBy = 3
			}
			if fake.allDelays != wantAll || fake.delayedBy != wantBy {
				t.Errorf("%d AllDelays and %d DelayedBy calls, want %d and %d", fake.allDelays, fake.delayedBy, wantAll, wantBy)
			}
		})
	}
}
