package estimator_test

import (
	"testing"
	"time"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// netHistory returns n samples every 100 ms ending at end, sending mbps
// each (the CPU use is irrelevant here).
func netHistory(end time.Time, n int, mbps ...float64) []estimator.Sample {
	h := make([]estimator.Sample, n)
	for i := range h {
		h[i] = estimator.Sample{Time: end.Add(-time.Duration(n-1-i) * 100 * time.Millisecond), CPU: 0.1, NetTx: mbps[i%len(mbps)]}
	}
	return h
}

// TestBandwidthSlack: revocable bandwidth is the capacity minus each
// guaranteed member's need, the larger of its reserved floor and its peak
// egress with the margin.
func TestBandwidthSlack(t *testing.T) {
	cfg := noHysteresis()
	tests := []struct {
		name       string
		total      string
		containers []estimator.Container
		protected  []estimator.Container
		want       func(margin float64) float64
	}{
		{name: "no bandwidth resource: none", total: "cpus:4",
			containers: []estimator.Container{guaranteed("web", "cpus:1", netHistory(t0, 50, 100))},
			want:       func(float64) float64 { return 0 }},
		{name: "capacity minus the peak and its margin", total: "cpus:4;bandwidth:1000",
			containers: []estimator.Container{guaranteed("web", "cpus:1", netHistory(t0, 50, 50, 200, 100))},
			want:       func(m float64) float64 { return 1000 - (1+m)*200 }},
		{name: "a reserved floor above use stays free", total: "cpus:4;bandwidth:1000",
			containers: []estimator.Container{guaranteed("db", "cpus:1;bandwidth:300", netHistory(t0, 50, 100))},
			want:       func(float64) float64 { return 700 }},
		{name: "too few samples: the floor", total: "cpus:4;bandwidth:1000",
			containers: []estimator.Container{
				guaranteed("new", "cpus:1;bandwidth:50", netHistory(t0, 5, 400)),
				guaranteed("old", "cpus:1", netHistory(t0, 50, 100)),
			},
			want: func(m float64) float64 { return 1000 - 50 - (1+m)*100 }},
		{name: "revocable containers' egress is not guaranteed use", total: "cpus:4;bandwidth:1000",
			containers: []estimator.Container{{ID: "bulk", Revocable: true, Allocated: resources.MustParse("cpus:1;bandwidth:500"), History: netHistory(t0, 50, 500)}},
			want:       func(float64) float64 { return 1000 }},
		{name: "protected services count", total: "bandwidth:1000",
			protected: []estimator.Container{{ID: "sshd", History: netHistory(t0, 50, 10)}},
			want:      func(m float64) float64 { return 1000 - (1+m)*10 }},
		{name: "never negative", total: "bandwidth:100",
			containers: []estimator.Container{guaranteed("web", "cpus:1", netHistory(t0, 50, 300))},
			want:       func(float64) float64 { return 0 }},
	}
	// Every estimator built on slackOf does the same with its margin;
	// these two use Config.Margin.
	for _, name := range []string{"usage", "predictive"} {
		margin := cfg.Margin
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				in := estimator.Input{Now: t0, Total: resources.MustParse(tt.total), Containers: tt.containers, Protected: tt.protected}
				if got, want := newEstimator(t, name, cfg).Estimate(in).Bandwidth(), tt.want(margin); !near(got, want) {
					t.Errorf("bandwidth = %v, want %v", got, want)
				}
			})
		}
	}
}

// TestBandwidthHysteresis: small wiggles of the bandwidth estimate are not
// published (each would rescind offers); a real change is.
func TestBandwidthHysteresis(t *testing.T) {
	est := newEstimator(t, "usage", estimator.DefaultConfig())
	estimate := func(at time.Time, mbps float64) float64 {
		in := estimator.Input{Now: at, Total: resources.MustParse("cpus:4;bandwidth:1000"),
			Containers: []estimator.Container{guaranteed("web", "cpus:1", netHistory(at, 50, mbps))}}
		return est.Estimate(in).Bandwidth()
	}
	first := estimate(t0, 100) // raw 890: published 890 - max(10, 44.5)
	if !near(first, 890-44.5) {
		t.Fatalf("first estimate %v, want %v", first, 890-44.5)
	}
	if got := estimate(t0.Add(time.Second), 90); got != first {
		t.Errorf("a 10 Mbit/s wiggle changed the estimate %v -> %v", first, got)
	}
	if got := estimate(t0.Add(2*time.Second), 400); got >= first {
		t.Errorf("guaranteed egress rose to 400 Mbit/s, estimate %v did not shrink from %v", got, first)
	}
}
