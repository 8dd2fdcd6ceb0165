package history

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestBF16RoundTrip(t *testing.T) {
	t.Parallel()
	for _, v := range []float64{0, 1e-6, 0.0123, 0.5, 1, 1.5, 3.75, 97.3, 2.5e9, 64 << 30} {
		got := unbf16(bf16(v))
		if v == 0 && got != 0 || v != 0 && math.Abs(got-v)/v > 1.0/256 {
			t.Errorf("bf16(%v) decodes to %v: more than 1/256 off", v, got)
		}
	}
	for _, v := range []float64{-1, math.NaN(), math.Inf(-1)} {
		if got := unbf16(bf16(v)); got != 0 {
			t.Errorf("bf16(%v) decodes to %v, want 0", v, got)
		}
	}
	if got := unbf16(bf16(math.Inf(1))); math.IsInf(got, 0) || got < 3e38 {
		t.Errorf("bf16(+Inf) decodes to %v, want the largest finite value", got)
	}
}

func TestRecordAndQuery(t *testing.T) {
	t.Parallel()
	s := New(Config{Window: 10 * time.Second, Interval: time.Second})
	if s.Capacity() != 11 {
		t.Fatalf("capacity %d, want 11 (10 s at 1 s, both ends)", s.Capacity())
	}
	for i := range 3 {
		s.Record(at(time.Duration(i)*time.Second), []Sample{
			{ContainerID: "c1", TaskID: "web", Time: at(time.Duration(i) * time.Second), CPUs: float64(i), MemBytes: 1 << 20,
				NetTxMbps: 8, NetRxMbps: 2, RunqP99: time.Millisecond, DelayedByRevocableSecs: float64(i) * 0.25},
		})
	}
	got := s.Query(Query{})
	want := []Series{{ContainerID: "c1", TaskID: "web", Points: []Point{
		{Time: at(0), CPUs: 0, MemBytes: 1 << 20, NetTxMbps: 8, NetRxMbps: 2, RunqP99Secs: unbf16(bf16(0.001))},
		{Time: at(time.Second), CPUs: 1, MemBytes: 1 << 20, NetTxMbps: 8, NetRxMbps: 2, RunqP99Secs: unbf16(bf16(0.001)), DelayedByRevocable: 0.25},
		{Time: at(2 * time.Second), CPUs: 2, MemBytes: 1 << 20, NetTxMbps: 8, NetRxMbps: 2, RunqP99Secs: unbf16(bf16(0.001)), DelayedByRevocable: 0.25},
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Query (-want +got):\n%s", diff)
	}
	since := s.Query(Query{Since: at(time.Second)})
	if len(since[0].Points) != 1 || !since[0].Points[0].Time.Equal(at(2*time.Second)) {
		t.Fatalf("Since 1s kept %v, want the point at 2s only", since[0].Points)
	}
	// A repeated or older sample adds nothing.
	s.Record(at(2*time.Second), []Sample{{ContainerID: "c1", Time: at(2 * time.Second), CPUs: 9}})
	if n := len(s.Query(Query{})[0].Points); n != 3 {
		t.Fatalf("%d points after a repeated sample, want 3", n)
	}
}

func TestWindowAndEndedSeries(t *testing.T) {
	t.Parallel()
	s := New(Config{Window: 10 * time.Second, Interval: time.Second})
	for i := range 30 {
		now := at(time.Duration(i) * time.Second)
		samples := []Sample{{ContainerID: "long", TaskID: "a", Time: now, CPUs: float64(i)}}
		if i < 5 {
			samples = append(samples, Sample{ContainerID: "short", TaskID: "b", Time: now})
		}
		s.Record(now, samples)
		switch series := s.Query(Query{}); {
		case i >= 5 && i <= 14:
			if len(series) != 2 || series[1].ContainerID != "short" || !series[1].Ended {
				t.Fatalf("at %ds: %+v, want short kept as ended until its last point leaves the window", i, series)
			}
		case i >= 15:
			if len(series) != 1 {
				t.Fatalf("at %ds: %d series, want the ended one dropped", i, len(series))
			}
		}
	}
	points := s.Query(Query{})[0].Points
	if len(points) != 11 || !points[0].Time.Equal(at(19*time.Second)) || points[10].CPUs != 29 {
		t.Fatalf("long kept %d points from %v, want 11 from 19s to 29s", len(points), points[0].Time)
	}
	if got := testutil.ToFloat64(s.cut.WithLabelValues("points")); got != 0 {
		t.Fatalf("cut points %v, want 0: the window, not a limit, removed them", got)
	}
}

func TestLimitsAreCounted(t *testing.T) {
	t.Parallel()
	// 100 ms for 15 minutes would need 9001 points: MaxPoints cuts one.
	s := New(Config{Window: DefaultWindow, Interval: 100 * time.Millisecond})
	if s.Capacity() != MaxPoints {
		t.Fatalf("capacity %d, want MaxPoints", s.Capacity())
	}
	for i := range MaxPoints + 5 {
		now := at(time.Duration(i) * 100 * time.Millisecond)
		s.Record(now, []Sample{{ContainerID: "c", Time: now}})
	}
	if got := testutil.ToFloat64(s.cut.WithLabelValues("points")); got != 5 {
		t.Fatalf("cut points %v, want 5", got)
	}
	samples := make([]Sample, MaxSeries+3)
	for i := range samples {
		samples[i] = Sample{ContainerID: string(rune('A'+i%26)) + time.Duration(i).String(), Time: at(time.Hour)}
	}
	s2 := New(Config{Window: time.Minute, Interval: time.Second})
	s2.Record(at(time.Hour), samples)
	if n := len(s2.Query(Query{})); n != MaxSeries {
		t.Fatalf("%d series, want MaxSeries", n)
	}
	if got := testutil.ToFloat64(s2.cut.WithLabelValues("series")); got != 3 {
		t.Fatalf("cut series %v, want 3", got)
	}
}

func TestDownsample(t *testing.T) {
	t.Parallel()
	s := New(Config{Window: time.Minute, Interval: 100 * time.Millisecond})
	for i := range 20 {
		now := at(time.Duration(i) * 100 * time.Millisecond)
		s.Record(now, []Sample{{ContainerID: "c", Time: now, CPUs: float64(i % 10), RunqP99: time.Duration(i) * time.Millisecond}})
	}
	got := s.Query(Query{Step: time.Second})[0].Points
	if len(got) != 2 {
		t.Fatalf("%d points at a 1 s step, want 2", len(got))
	}
	for i, p := range got {
		if p.CPUs != 4.5 || !p.Time.Equal(at(time.Duration(i)*time.Second+900*time.Millisecond)) {
			t.Errorf("step %d: %+v, want the mean 4.5 stamped at its last point", i, p)
		}
	}
	if want := unbf16(bf16(0.019)); got[1].RunqP99Secs != want {
		t.Errorf("second step's p99 %v, want its largest, %v", got[1].RunqP99Secs, want)
	}
}

func TestDelays(t *testing.T) {
	t.Parallel()
	s := New(Config{Window: time.Minute, Interval: time.Second})
	hog := Sample{ContainerID: "hog", TaskID: "hog-task", Revocable: true}
	victim := func(secs float64) []Victim {
		return []Victim{{ContainerID: "web", TaskID: "web-task", Culprits: map[string]float64{"hog": secs, "kernel": 0.5}}}
	}
	for i := range 9 { // snapshots at 0, 10, ..., 80 s; the hog delays web 1 s per 10 s
		now := at(time.Duration(i) * DelayStep)
		hog.Time = now
		s.Record(now, []Sample{hog})
		s.RecordDelays(now, victim(float64(i)))
		// Between steps a call takes no snapshot.
		s.RecordDelays(now.Add(time.Second), victim(float64(i)+0.5))
	}
	now := at(85 * time.Second)
	edges, since := s.Delays(now, 30*time.Second, victim(8.5))
	want := []Edge{{VictimContainerID: "web", VictimTaskID: "web-task", Culprit: "hog", CulpritTaskID: "hog-task", CulpritRevocable: true, Secs: 2.5}}
	if diff := cmp.Diff(want, edges); diff != "" {
		t.Fatalf("Delays over 30 s (-want +got):\n%s", diff)
	}
	if !since.Equal(at(60 * time.Second)) {
		t.Fatalf("since %v, want the snapshot at 60 s", since)
	}
	// Without current figures: up to the newest snapshot; the whole window.
	edges, since = s.Delays(now, 0, nil)
	if len(edges) != 1 || edges[0].Secs != 5 || !since.Equal(at(30*time.Second)) {
		t.Fatalf("Delays over the window: %+v since %v, want hog 5 s (80 s minus 30 s) since 30 s", edges, since)
	}
}

func TestCulpritsAreBounded(t *testing.T) {
	t.Parallel()
	s := New(Config{Window: time.Minute, Interval: time.Second})
	culprits := map[string]float64{}
	for i := range MaxCulprits + 10 {
		culprits[time.Duration(i).String()] = 1
	}
	s.RecordDelays(at(0), []Victim{{ContainerID: "v", Culprits: culprits}})
	grown := map[string]float64{}
	for k, v := range culprits {
		grown[k] = v + 1
	}
	edges, _ := s.Delays(at(time.Second), 0, []Victim{{ContainerID: "v", Culprits: grown}})
	if len(edges) != MaxCulprits {
		t.Fatalf("%d edges, want MaxCulprits", len(edges))
	}
	var other float64
	for _, e := range edges {
		if e.Culprit == OtherCulprit {
			other = e.Secs
		}
	}
	if other != 11 {
		t.Fatalf("other delayed %v s, want the 11 folded culprits' 11 s", other)
	}
	// The snapshot folded 11 culprits (the 42 sorted past the 31st); the
	// query folded them again but is no fold to count.
	if got := testutil.ToFloat64(s.cut.WithLabelValues("culprits")); got != 11 {
		t.Fatalf("culprits cut %v, want the snapshot's 11 folds", got)
	}
	for range 3 {
		s.Delays(at(time.Second), 0, []Victim{{ContainerID: "v", Culprits: grown}})
	}
	if got := testutil.ToFloat64(s.cut.WithLabelValues("culprits")); got != 11 {
		t.Fatalf("culprits cut %v after three more queries, want still 11: queries are no folds", got)
	}
}

// TestDelaysQueryLeavesTheStore: a query naming a culprit no snapshot had
// reports it (from zero) without adding it to the victim's culprits, so
// the next snapshot's indexes are the store's own.
func TestDelaysQueryLeavesTheStore(t *testing.T) {
	t.Parallel()
	s := New(Config{Window: time.Minute, Interval: time.Second})
	s.RecordDelays(at(0), []Victim{{ContainerID: "v", Culprits: map[string]float64{"a": 1}}})
	edges, _ := s.Delays(at(time.Second), 0, []Victim{{ContainerID: "v", Culprits: map[string]float64{"a": 2, "b": 3}}})
	want := []Edge{{VictimContainerID: "v", Culprit: "b", Secs: 3}, {VictimContainerID: "v", Culprit: "a", Secs: 1}}
	if diff := cmp.Diff(want, edges); diff != "" {
		t.Fatalf("Delays (-want +got):\n%s", diff)
	}
	if got := s.delays["v"].culprits; !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after a query the victim's culprits are %v, want the snapshot's [a]", got)
	}
}

// TestQueryFit: a query over more points than allowed takes the finest
// coarser step (a whole multiple of the interval) that fits; one that fits
// keeps its step; the largest step, the window, always fits.
func TestQueryFit(t *testing.T) {
	t.Parallel()
	s := New(Config{Window: 15 * time.Minute, Interval: time.Second})
	samples := make([]Sample, 250) // > 222 containers
	for i := range samples {
		samples[i].ContainerID = string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	for pass := range 901 {
		for i := range samples {
			samples[i].Time = at(time.Duration(pass) * time.Second)
		}
		s.Record(at(time.Duration(pass)*time.Second), samples)
	}
	count := func(series []Series) (n int) {
		for _, se := range series {
			n += len(se.Points)
		}
		return n
	}
	for _, c := range []struct {
		step, want time.Duration
		max        int
	}{
		{time.Second, 2 * time.Second, 200_000},  // 225,250 points at 1 s
		{0, 2 * time.Second, 200_000},            // every point: the interval is the base
		{time.Second, time.Second, 250_000},      // fits
		{time.Second, 3 * time.Second, 100_000},  // 2 s gives 112,750
		{time.Second, 15 * time.Minute, 2 * 250}, // only the window fits
		{10 * time.Second, 10 * time.Second, 200_000},
	} {
		series, step := s.QueryFit(Query{Step: c.step}, c.max)
		if step != c.want || count(series) > c.max || len(series) != 250 {
			t.Errorf("QueryFit(step %v, max %d): step %v, %d points in %d series; want step %v, at most %d points",
				c.step, c.max, step, count(series), len(series), c.want, c.max)
		}
	}
}
