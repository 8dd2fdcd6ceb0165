package shadow_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/agent/shadow"
	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// input is a one-container input at now with cpu samples at the given
// milliseconds (2 cpus allocated).
func input(now int, samples map[int]float64, order ...int) estimator.Input {
	c := estimator.Container{ID: "g", Allocated: resources.New(2, 0, 0)}
	for _, ms := range order {
		c.History = append(c.History, estimator.Sample{Time: at(ms), CPU: samples[ms]})
	}
	return estimator.Input{Now: at(now), Containers: []estimator.Container{c}}
}

// TestScorer: each sample is scored against the estimate made strictly
// before it, whenever it arrives; samples before the first estimate are
// not scored; a revocable container's use is no guaranteed use.
func TestScorer(t *testing.T) {
	t.Parallel()
	use := map[int]float64{100: 1, 200: 1, 300: 1.5, 400: 0.5}
	var s shadow.Scorer
	s.Observe(input(100, use, 100), 0.9)           // sample 100 precedes every estimate
	s.Observe(input(200, use, 100), 0.8)           // sample 200 not there yet
	s.Observe(input(300, use, 100, 200, 300), 0.7) // 200 against the estimate made at 100, 300 at 200
	in := input(400, use, 100, 200, 300, 400)
	in.Containers = append(in.Containers, estimator.Container{ID: "r", Revocable: true, Allocated: resources.New(4, 0, 0),
		History: []estimator.Sample{{Time: at(400), CPU: 3}}})
	s.Observe(in, 0.7)
	// Samples 200 (ideal 1, offered 0.9), 300 (ideal 0.5, offered 0.8:
	// over by 0.3, a violation), 400 (ideal 1.5, offered 0.7).
	got := s.Report()
	want := shadow.Report{
		Latest: 0.7, Estimates: 4, Shrinks: 2, FirstEstimate: at(100), LastEstimate: at(400),
		Samples: 3, Violations: 1, MeanIdeal: 1, MeanOffered: (0.9 + 0.8 + 0.7) / 3,
		Harvest: (0.9 + 0.8 + 0.7) / 3, SafeHarvest: (0.9 + 0.5 + 0.7) / 3, ViolationRate: 1.0 / 3, MaxExcess: 0.8 - 0.5,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a == b || (a-b < 1e-12 && b-a < 1e-12) })); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

// TestScorerWaitsForEveryMember: a sample time is scored only once every
// member has reached it, with every member's use at that time.
func TestScorerWaitsForEveryMember(t *testing.T) {
	t.Parallel()
	a := estimator.Container{ID: "a", Allocated: resources.New(1, 0, 0)}
	b := estimator.Container{ID: "b", Allocated: resources.New(1, 0, 0)}
	var s shadow.Scorer
	s.Observe(estimator.Input{Now: at(100), Containers: []estimator.Container{a, b}}, 1)
	a.History = []estimator.Sample{{Time: at(200), CPU: 0.5}}
	s.Observe(estimator.Input{Now: at(200), Containers: []estimator.Container{a, b}}, 1) // b has nothing: it is no member yet
	if r := s.Report(); r.Samples != 1 || r.MeanIdeal != 0.5 {
		t.Fatalf("after a's sample: %d samples, mean ideal %v; want 1, 0.5 (a alone)", r.Samples, r.MeanIdeal)
	}
	a.History = append(a.History, estimator.Sample{Time: at(300), CPU: 0.5})
	b.History = []estimator.Sample{{Time: at(200), CPU: 0.2}}
	s.Observe(estimator.Input{Now: at(300), Containers: []estimator.Container{a, b}}, 1) // 300: b not there yet
	if r := s.Report(); r.Samples != 1 {
		t.Fatalf("a at 300, b at 200: %d samples scored, want still 1", r.Samples)
	}
	b.History = append(b.History, estimator.Sample{Time: at(300), CPU: 0.2})
	s.Observe(estimator.Input{Now: at(400), Containers: []estimator.Container{a, b}}, 1)
	if r := s.Report(); r.Samples != 2 || r.MeanIdeal != (0.5+1.3)/2 {
		t.Fatalf("both at 300: %d samples, mean ideal %v; want 2, %v", r.Samples, r.MeanIdeal, (0.5+1.3)/2)
	}
}

// TestScorerBounded: at most MaxEstimates estimates are kept; a sample
// older than all of them is counted unscored, not scored against a later
// estimate.
func TestScorerBounded(t *testing.T) {
	t.Parallel()
	var s shadow.Scorer
	for i := range shadow.MaxEstimates + 5 {
		s.Observe(input(100*(i+1), nil), 1)
	}
	use := map[int]float64{150: 0, 5250: 0}
	s.Observe(input(100*(shadow.MaxEstimates+6), use, 150, 5250), 1)
	if r := s.Report(); r.Samples != 1 || r.Unscored != 1 {
		t.Errorf("%d scored, %d unscored; want 1 and 1", r.Samples, r.Unscored)
	}
}

// TestShadowQoS: a shadow's controllers see every input and their
// corrections are counted per kind and per hour of logical time, and
// returned to nobody.
func TestShadowQoS(t *testing.T) {
	t.Parallel()
	var seen int
	ctl := qos.ControllerFunc(func(in qos.Input) []qos.Correction {
		seen++
		if in.Now.Sub(t0)%time.Minute == 0 {
			return []qos.Correction{{Kind: qos.Throttle, CPULimit: 1}, {Kind: qos.Kill, ContainerID: "r"}}
		}
		return nil
	})
	s := shadow.New(shadow.Config{Name: "candidate", QoS: ctl, QoSNames: []string{"interference"},
		Settings: []shadow.Setting{{Flag: "qos-runqueue-p99", Value: "2ms"}, {Flag: "qos-kill-after", Value: "10s"}}})
	for ms := 0; ms <= 30*60*1000; ms += 250 {
		s.Evaluate(qos.Input{Now: at(ms)})
	}
	r := s.Report()
	if seen != r.Evaluations || r.Evaluations != 7201 {
		t.Errorf("controller saw %d inputs, %d evaluations counted, want 7201", seen, r.Evaluations)
	}
	if diff := cmp.Diff(map[string]int{"throttle": 31, "kill": 31}, r.Corrections); diff != "" {
		t.Errorf("corrections (-want +got):\n%s", diff)
	}
	if got := r.CorrectionsPerHour(); got != 62/0.5 {
		t.Errorf("%v corrections per hour, want 124", got)
	}
	if r.Settings[0].Flag != "qos-kill-after" || r.Name != "candidate" || r.Estimates != 0 || s.HasEstimator() {
		t.Errorf("report %+v", r)
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"loose": true, "target-2pct": true, "a": true, "": false, "active": false, "Loose": false,
		"2pct": false, "a_b": false, "a=b": false, "abcdefghijabcdefghijabcdefghijabc": false,
	} {
		if err := shadow.CheckName(name); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
