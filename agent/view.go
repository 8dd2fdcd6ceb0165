package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/history"
	"github.com/slackline/slackline/agent/monitor"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// viewHistory records the monitor's passes into the agent's history (the
// live view's series and who-delayed-whom, GetHistory and GetDelays).
type viewHistory struct {
	store *history.Store
	watch *observer
	// lastDelays is when the victims' delays were last read (eBPF map
	// lookups: every history.DelayStep, not every pass) and samples the
	// buffer each pass reuses. Touched only by the monitor's goroutine.
	lastDelays time.Time
	samples    []history.Sample
	// after, when set, is called at the end of each pass, on the
	// monitor's goroutine: the estimate made there and the QoS loop's
	// wake-up (#29).
	after func()
}

// newViewHistory returns the history of the monitor's series, recorded
// after each of its passes; nil without a monitor.
func newViewHistory(m *monitor.Monitor, watch *observer) *viewHistory {
	if m == nil {
		return nil
	}
	h := &viewHistory{store: history.New(history.Config{Interval: m.Interval()}), watch: watch}
	m.Observe(h.record)
	return h
}

// record is the monitor's observer.
func (h *viewHistory) record(now time.Time, published []monitor.Usage) {
	samples := h.samples[:0]
	for _, u := range published {
		samples = append(samples, history.Sample{
			ContainerID: u.ContainerID, TaskID: u.TaskID, Revocable: u.Revocable, Time: u.Time,
			CPUs: u.CPURate, MemBytes: u.MemUsage, NetTxMbps: u.NetTxMbps, NetRxMbps: u.NetRxMbps,
			RunqP99: u.RunqP99, DelayedByRevocableSecs: u.Stats.GetDelayedByRevocableSecs(),
		})
	}
	h.store.Record(now, samples)
	h.samples = samples
	if h.lastDelays.IsZero() || now.Sub(h.lastDelays) >= history.DelayStep || now.Before(h.lastDelays) {
		h.lastDelays = now
		h.store.RecordDelays(now, h.victims(published))
	}
	if h.after != nil {
		h.after()
	}
}

// victims returns the cumulative delays of the guaranteed containers and
// protected services among usages (none without eBPF).
func (h *viewHistory) victims(usages []monitor.Usage) []history.Victim {
	var out []history.Victim
	delays := h.watch.delayReader()
	for _, u := range usages {
		if u.Revocable {
			continue
		}
		delays := delays(u.ContainerID)
		if delays == nil {
			continue
		}
		v := history.Victim{ContainerID: u.ContainerID, TaskID: u.TaskID, Culprits: make(map[string]float64, len(delays))}
		for _, d := range delays {
			v.Culprits[d.GetCulprit()] = d.GetSecs()
		}
		out = append(out, v)
	}
	return out
}

// MaxHistoryResponsePoints bounds the points of one GetHistory answer
// (about 6 MB in protobuf, 14 MB in JSON: under the coordinator's proxy
// limit). Past it the answer is averaged over a coarser step that fits
// (history.Store.QueryFit) and says which (step_seconds): the live view
// asks for 1 s steps, which a node of more than about 222 containers
// would exceed.
const MaxHistoryResponsePoints = 200_000

// errNoHistory answers GetHistory and GetDelays on an agent without a
// monitor.
var errNoHistory = connect.NewError(connect.CodeFailedPrecondition, errors.New("this agent runs without a monitor: it keeps no history"))

func (s nodeService) GetHistory(_ context.Context, req *connect.Request[slacklinev1.GetHistoryRequest]) (*connect.Response[slacklinev1.GetHistoryResponse], error) {
	h := s.a.history
	if h == nil {
		return nil, errNoHistory
	}
	msg := req.Msg
	step := msg.GetStepSeconds()
	if math.IsNaN(step) || step < 0 || step > h.store.Window().Seconds() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("step_seconds %v must be between 0 and the history window, %v s", step, h.store.Window().Seconds()))
	}
	if msg.GetSince() != nil {
		if err := msg.GetSince().CheckValid(); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("since: %w", err))
		}
	}
	q := history.Query{TaskID: msg.GetTaskId(), Step: time.Duration(step * float64(time.Second))}
	if msg.GetSince() != nil {
		q.Since = msg.GetSince().AsTime()
	}
	series, used := h.store.QueryFit(q, MaxHistoryResponsePoints)
	resp := &slacklinev1.GetHistoryResponse{WindowSeconds: h.store.Window().Seconds(), IntervalSeconds: h.store.Interval().Seconds(),
		StepSeconds: used.Seconds()}
	for _, se := range series {
		n := len(se.Points)
		out := &slacklinev1.HistorySeries{ContainerId: se.ContainerID, TaskId: se.TaskID, Revocable: se.Revocable, Ended: se.Ended,
			Times: make([]float64, n), Cpus: make([]float32, n), MemBytes: make([]float32, n), NetTxMbps: make([]float32, n),
			NetRxMbps: make([]float32, n), RunqueueP99Seconds: make([]float32, n), DelayedByRevocable: make([]float32, n)}
		for i, p := range se.Points {
			out.Times[i] = float64(p.Time.UnixMilli()) / 1e3
			out.Cpus[i], out.MemBytes[i] = float32(p.CPUs), float32(p.MemBytes)
			out.NetTxMbps[i], out.NetRxMbps[i] = float32(p.NetTxMbps), float32(p.NetRxMbps)
			out.RunqueueP99Seconds[i], out.DelayedByRevocable[i] = float32(p.RunqP99Secs), float32(p.DelayedByRevocable)
		}
		resp.Series = append(resp.Series, out)
	}
	return connect.NewResponse(resp), nil
}

func (s nodeService) GetDelays(_ context.Context, req *connect.Request[slacklinev1.GetDelaysRequest]) (*connect.Response[slacklinev1.GetDelaysResponse], error) {
	h := s.a.history
	if h == nil {
		return nil, errNoHistory
	}
	window := req.Msg.GetWindowSeconds()
	if math.IsNaN(window) || window < 0 || window > h.store.Window().Seconds() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("window_seconds %v must be between 0 (the whole history) and %v", window, h.store.Window().Seconds()))
	}
	usages := s.a.cfg.Monitor.Usages()
	now := time.Now()
	if len(usages) > 0 {
		now = usages[0].Time
		for _, u := range usages {
			if u.Time.After(now) {
				now = u.Time
			}
		}
	}
	edges, since := h.store.Delays(now, time.Duration(window*float64(time.Second)), h.victims(usages))
	resp := &slacklinev1.GetDelaysResponse{Until: timestamppb.New(now)}
	if !since.IsZero() {
		resp.Since = timestamppb.New(since)
	}
	for _, e := range edges {
		resp.Delays = append(resp.Delays, &slacklinev1.DelayEdge{VictimContainerId: e.VictimContainerID, VictimTaskId: e.VictimTaskID,
			Culprit: e.Culprit, CulpritTaskId: e.CulpritTaskID, CulpritRevocable: e.CulpritRevocable, Secs: e.Secs})
	}
	return connect.NewResponse(resp), nil
}
