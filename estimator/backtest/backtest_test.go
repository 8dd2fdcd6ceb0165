package backtest_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/resources"
)

func TestTraceRoundTrip(t *testing.T) {
	want := backtest.Trace{
		Name: "demo", Command: "stress-ng --cpu 1", Interval: 100 * time.Millisecond,
		Allocation: resources.MustParse("cpus:1.5;mem:512"),
		Points: []backtest.Point{
			{Offset: 100 * time.Millisecond, CPU: 0.25, MemBytes: 1 << 20},
			{Offset: 200 * time.Millisecond, CPU: 1.5, MemBytes: 3 << 20},
		},
	}
	var buf bytes.Buffer
	if err := backtest.WriteTrace(&buf, want); err != nil {
		t.Fatal(err)
	}
	got, err := backtest.ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resources.Resources) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestReadTraceErrors(t *testing.T) {
	header := "# slackline trace v1\n# interval: 100ms\noffset_s,cpu_cores,mem_bytes\n"
	for name, text := range map[string]string{
		"no magic":           "offset_s,cpu_cores,mem_bytes\n0.1,1,0\n",
		"no interval":        "# slackline trace v1\noffset_s,cpu_cores,mem_bytes\n0.1,1,0\n",
		"no points":          header,
		"negative cpu":       header + "0.1,-1,0\n",
		"nan cpu":            header + "0.1,NaN,0\n",
		"offset goes back":   header + "0.2,1,0\n0.1,1,0\n",
		"missing field":      header + "0.1,1\n",
		"bad allocation":     "# slackline trace v1\n# interval: 1s\n# allocation: cpus:-1\noffset_s,cpu_cores,mem_bytes\n1,1,0\n",
		"wrong column names": "# slackline trace v1\n# interval: 1s\ntime,cpu\n1,1\n",
	} {
		if _, err := backtest.ReadTrace(strings.NewReader(text)); !errors.Is(err, backtest.ErrInvalidTrace) {
			t.Errorf("%s: err = %v, want ErrInvalidTrace", name, err)
		}
	}
}

// TestReplayScoring checks every metric on a case worked by hand: allocation
// 2 cpus, an estimator offering 1 cpu from the first estimate (after sample
// 10) on, and guaranteed usage of 0.5 then 1.5 cores.
func TestReplayScoring(t *testing.T) {
	tr := backtest.Trace{Name: "hand", Interval: 100 * time.Millisecond, Allocation: resources.MustParse("cpus:2")}
	for i := range 20 {
		cpu := 0.0
		switch {
		case i >= 15:
			cpu = 1.5
		case i >= 10:
			cpu = 0.5
		}
		tr.Points = append(tr.Points, backtest.Point{Offset: time.Duration(i+1) * 100 * time.Millisecond, CPU: cpu})
	}
	calls := 0
	one := estimator.Func(func(in estimator.Input) resources.Resources {
		calls++
		h := in.Containers[0].History
		if last := h[len(h)-1].Time; !last.Equal(in.Now) {
			t.Errorf("estimate at %v sees a sample at %v", in.Now, last)
		}
		return resources.New(1, 0, 0)
	})
	opt := backtest.DefaultOptions()
	opt.EstimateInterval = time.Second
	got, err := backtest.Replay("one", one, backtest.Scenario{Name: "hand", Traces: []backtest.Trace{tr}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	want := backtest.Result{
		Estimator: "one", Scenario: "hand", Samples: 10,
		MeanIdeal: 1, MeanOffered: 1, Harvest: 1, SafeHarvest: 0.75,
		ViolationRate: 0.5, MeanExcess: 0.5, MaxExcess: 0.5, ExcessCoreSeconds: 0.25,
	}
	approx := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("Replay (-want +got):\n%s", diff)
	}
	if calls != 2 {
		t.Errorf("estimator called %d times over 2 s at 1 s intervals, want 2", calls)
	}
}

func TestReplayErrors(t *testing.T) {
	tr := backtest.Trace{Name: "a", Interval: 300 * time.Millisecond, Points: []backtest.Point{{Offset: 300 * time.Millisecond}}}
	other := tr
	other.Interval = time.Second
	noop := estimator.Func(func(estimator.Input) resources.Resources { return resources.Resources{} })
	for name, sc := range map[string]backtest.Scenario{
		"empty":                 {Name: "empty"},
		"interval not multiple": {Name: "x", Traces: []backtest.Trace{tr}},
		"mixed intervals":       {Name: "y", Traces: []backtest.Trace{other, tr}},
		"too short":             {Name: "z", Traces: []backtest.Trace{other}},
	} {
		if _, err := backtest.Replay("noop", noop, sc, backtest.DefaultOptions()); !errors.Is(err, backtest.ErrScenario) {
			t.Errorf("%s: err = %v, want ErrScenario", name, err)
		}
	}
}
