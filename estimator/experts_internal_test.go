package estimator

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/resources"
)

// TestPinball pins the experts' loss: alpha per cpu left unoffered, 1 −
// alpha per cpu offered beyond the real slack (plus tolerance).
func TestPinball(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ u, alpha, want float64 }{
		{0, 0.01, 0},
		{1, 0.01, 0.01},
		{0.5, 0.01, 0.005},
		{-1, 0.01, 0.99},
		{-0.2, 0.1, 0.18},
	} {
		if got := pinball(tc.u, tc.alpha); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("pinball(%v, %v) = %v, want %v", tc.u, tc.alpha, got, tc.want)
		}
	}
}

// TestCalibratedExperts: on a load whose dips last (3-7 s) the short
// expert, which offers a dip after 300 ms, loses less than the long one,
// which waits a second, and is published; on a noisy wave (a 30 s sine,
// ±0.12 cpus of noise per sample: diurnal's ramps in small), where the
// short expert's offers are taken back by the next noisy samples, the long
// one is. On these and on short dips (0.4-0.6 s) the explanation adds up:
// the member's predicted peak is the published expert's, its need is that
// peak + margin + calibration, the calibrated estimate is what the need
// leaves, and the reason names the longer confirmation exactly when the
// long expert is published.
func TestCalibratedExperts(t *testing.T) {
	t.Parallel()
	const step = 100 * time.Millisecond
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		hold      func(rng *rand.Rand) int // samples per phase; nil: the wave
		want      int                      // the expert published, -1: either
		wantPeaks string
	}{
		{"short dips", func(rng *rand.Rand) int { return 4 + rng.IntN(3) }, -1, ""},
		{"lasting dips", func(rng *rand.Rand) int { return 30 + rng.IntN(40) }, 0, "fast's"},
		{"noisy wave", nil, 1, "the last second's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := newCalibrated(DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			c := e.(*calibratedEstimator)
			rng := rand.New(rand.NewPCG(29, 1))
			var history []Sample
			high, left := true, 0
			for i := range 6000 {
				var cpu float64
				switch {
				case tc.hold == nil:
					cpu = 1 + 0.7*math.Sin(2*math.Pi*float64(i%300)/300) + 0.24*(rng.Float64()-0.5)
				default:
					if left == 0 {
						high, left = !high, tc.hold(rng)
					}
					left--
					cpu = 0.2 + 0.05*rng.Float64()
					if high {
						cpu = 1.6 + 0.05*rng.Float64()
					}
				}
				now := start.Add(time.Duration(i+1) * step)
				history = append(history, Sample{Time: now, CPU: cpu})
				if len(history) > 1200 {
					history = history[1:]
				}
				c.Estimate(Input{Now: now, Containers: []Container{{ID: "g", Allocated: resources.MustParse("cpus:2"), History: history}}})
			}
			ex := c.Explain()
			if tc.want >= 0 && c.chosen != tc.want {
				t.Errorf("published expert %d (losses %v, %v), want %d (%s peak)", c.chosen, c.experts[0].loss, c.experts[1].loss, tc.want, tc.wantPeaks)
			}
			if ex.Expert != c.chosen {
				t.Errorf("explained expert %d, want the published %d", ex.Expert, c.chosen)
			}
			m := ex.Members[0]
			pred := c.predicted[0]
			if m.PredictedPeak != pred[c.chosen] {
				t.Errorf("explained peak %v, want the published expert's %v (experts: %v)", m.PredictedPeak, pred[c.chosen], pred)
			}
			if held := strings.Contains(ex.Reason(), "peaks held for 1s"); held != expertSpecs[c.chosen].long {
				t.Errorf("reason %q with expert %d published: it names the longer confirmation exactly when a long expert is", ex.Reason(), c.chosen)
			}
			if got, want := m.Need, m.PredictedPeak+m.Margin+m.Calibration; math.Abs(got-want) > 1e-9 {
				t.Errorf("need %v, want peak + margin + calibration = %v", got, want)
			}
			if !ex.Calibration.Paused {
				if want := max(0, ex.Capacity-m.Need); math.Abs(ex.Calibrated-want) > 1e-9 {
					t.Errorf("calibrated %v, want capacity − need = %v", ex.Calibrated, want)
				}
			}
		})
	}
}

// TestRhythmTrusted: a member's rhythm predictions (a stretch while a
// burst is due) are trusted until rhythmMinOutcomes of them are known, then
// while at least rhythmMinHits of the latest rhythmOutcomes came true (one
// of its onsets at or after OnsetJitter before the prediction began).
func TestRhythmTrusted(t *testing.T) {
	t.Parallel()
	const step = 100 * time.Millisecond
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// hits are the outcomes of successive predictions; onsetAt is
		// where a hit's onset falls relative to the prediction's start.
		hits    []bool
		onsetAt time.Duration
		want    bool
	}{
		{"none known", nil, 0, true},
		{"three misses: too few to judge", []bool{false, false, false}, 0, true},
		{"four misses", []bool{false, false, false, false}, 0, false},
		{"one hit in four", []bool{true, false, false, false}, 0, false},
		{"half of eight", []bool{true, true, true, true, false, false, false, false}, 0, true},
		{"three of the latest eight", []bool{true, true, true, false, false, true, false, false, true, false}, 0, false},
		{"recovered", []bool{false, false, false, false, true, true, true, true}, 0, true},
		{"onset a jitter before", []bool{true, true, true, true}, -250 * time.Millisecond, true},
		{"onset earlier than that", []bool{true, true, true, true}, -300 * time.Millisecond, false},
		{"onset as it ends", []bool{true, true, true, true}, 3 * step, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := newCalibrated(DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			c := e.(*calibratedEstimator)
			m := member{key: memberKey{id: "g"}, state: &memberState{}}
			h := &m.state.bursts
			now := start
			got := c.rhythmTrusted(m, now, 0)
			for _, hit := range tc.hits {
				// A prediction lasts three estimates, then a second of
				// nothing due.
				now = now.Add(time.Second)
				begin := now
				for range 3 {
					c.rhythmTrusted(m, now, 1)
					now = now.Add(step)
				}
				if hit {
					h.onsets = append(h.onsets, onset{at: begin.Add(tc.onsetAt), rise: 1})
				}
				got = c.rhythmTrusted(m, now, 0)
			}
			if got != tc.want {
				t.Errorf("trusted %v after %v, want %v", got, tc.hits, tc.want)
			}
		})
	}
}

// TestExpertsBurstStart: every expert takes fast's need, burst-start
// extrapolation included (a first sample that rose by at least Onset saw
// only part of the burst: last sample + rise), whether or not the member's
// rhythms are trusted; distrusting them drops only the burst due on a
// lattice. After 50 samples at 0.2 cpus and one at 1.2, no burst is due,
// so each expert predicts 1.2 + 1.0 = 2.2. (The third expert took the
// plain peak, 1.2, when the member's rhythms were distrusted.)
func TestExpertsBurstStart(t *testing.T) {
	t.Parallel()
	const step = 100 * time.Millisecond
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		record *rhythmRecord
	}{
		{"rhythms trusted (none known)", nil},
		{"rhythms distrusted (0 of 8 came true)", &rhythmRecord{n: rhythmOutcomes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := newCalibrated(DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			c := e.(*calibratedEstimator)
			var history []Sample
			for i := range 51 {
				cpu := 0.2
				if i == 50 {
					cpu = 1.2
				}
				history = append(history, Sample{Time: start.Add(time.Duration(i+1) * step), CPU: cpu})
			}
			if tc.record != nil {
				c.fast.states[memberKey{id: "g"}] = &memberState{rhythm: *tc.record}
			}
			now := history[len(history)-1].Time
			c.Estimate(Input{Now: now, Containers: []Container{{ID: "g", Allocated: resources.MustParse("cpus:4"), History: history}}})
			m := member{key: memberKey{id: "g"}, window: history, state: c.fast.states[memberKey{id: "g"}]}
			if _, due := c.fast.predictParts(m, now); due != 0 {
				t.Fatalf("a burst is due (%v): the case needs none", due)
			}
			// Nothing due and no prediction running: this records nothing.
			if trusted := c.rhythmTrusted(m, now, 0); trusted != (tc.record == nil) {
				t.Fatalf("rhythms trusted %v, the case wants %v", trusted, tc.record == nil)
			}
			const want = 2.2
			for e, got := range c.predicted[0] {
				if math.Abs(got-want) > 1e-9 {
					t.Errorf("expert %d predicts %v, want %v: fast's need with the burst's start (experts %v)", e, got, want, c.predicted[0])
				}
			}
		})
	}
}

// TestMemberStateDropped: fast and calibrated keep one state per member
// (its bursts, working-set peak and rhythm record), a container's and a
// protected service's of the same id apart, and drop a member's state at
// the first estimate without it, so that a member that comes back starts
// afresh.
func TestMemberStateDropped(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := DefaultConfig()
	cfg.Memory = true
	for _, name := range []string{"fast", "calibrated"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, err := New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			f, ok := e.(*fastEstimator)
			if !ok {
				f = e.(*calibratedEstimator).fast
			}
			history := []Sample{{Time: start, CPU: 0.5, MemBytes: 1 << 20}}
			a := Container{ID: "a", Allocated: resources.MustParse("cpus:1;mem:64"), History: history}
			b := Container{ID: "b", Allocated: resources.MustParse("cpus:1;mem:64"), History: history}
			e.Estimate(Input{Now: start, Containers: []Container{a, b}, Protected: []Container{{ID: "a", History: history}}})
			if len(f.states) != 3 {
				t.Fatalf("%d member states, want 3 (containers a and b, service a)", len(f.states))
			}
			f.states[memberKey{id: "b"}].rhythm.n = 1 // marks b's state
			e.Estimate(Input{Now: start, Containers: []Container{a}})
			if len(f.states) != 1 || f.states[memberKey{id: "a"}] == nil {
				t.Fatalf("member states %v, want container a's only", f.states)
			}
			e.Estimate(Input{Now: start, Containers: []Container{a, b}})
			if st := f.states[memberKey{id: "b"}]; st == nil || st.rhythm.n != 0 {
				t.Errorf("container b back: state %+v, want a fresh one", st)
			}
		})
	}
}

// TestSameMembersComparesEveryField: explanations that differ in any one
// field of MemberExplanation (a field added later included), or in the
// sign of a zero, are not the same, so an estimate never shares the last
// one's members unless they are equal to the bit.
func TestSameMembersComparesEveryField(t *testing.T) {
	t.Parallel()
	base := MemberExplanation{ID: "a", Allocated: 1, PredictedPeak: 0.5, Margin: 0.06, Calibration: 0.1, Need: 0.66}
	if !sameMembers([]MemberExplanation{base}, []MemberExplanation{base}) {
		t.Fatal("equal members are not the same")
	}
	typ := reflect.TypeFor[MemberExplanation]()
	for i := range typ.NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("b")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Float64:
			f.SetFloat(f.Float() + 1)
		default:
			t.Fatalf("field %s of kind %v: extend sameMembers and this test", typ.Field(i).Name, f.Kind())
		}
		if sameMembers([]MemberExplanation{base}, []MemberExplanation{other}) {
			t.Errorf("members differing in %s are the same", typ.Field(i).Name)
		}
	}
	zero, negZero := base, base
	zero.Calibration, negZero.Calibration = 0, math.Copysign(0, -1)
	if sameMembers([]MemberExplanation{zero}, []MemberExplanation{negZero}) {
		t.Error("a calibration of 0 and one of -0 are the same")
	}
	if sameMembers([]MemberExplanation{base}, []MemberExplanation{base, base}) {
		t.Error("lists of different lengths are the same")
	}
}
