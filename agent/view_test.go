package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
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
