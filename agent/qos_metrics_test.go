package agent

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

// TestQoSCorrectionsExportedAtZero: every (kind, controller) series of
// slackline_qos_corrections_total exists before any correction, so that
// the dashboard's panels and the kill alert have data from the start.
func TestQoSCorrectionsExportedAtZero(t *testing.T) {
	t.Parallel()
	l := newQoSLoop(Config{Logger: slog.New(slog.DiscardHandler), QoSControllerNames: []string{"interference", "load"}},
		resources.Resources{}, nil, nil, nil)
	kinds := 0
	for k := qos.Kind(1); !strings.HasPrefix(k.String(), "kind("); k++ {
		kinds++
	}
	if kinds < 4 {
		t.Fatalf("%d kinds of correction, want at least throttle, unthrottle, kill and confine", kinds)
	}
	if n := testutil.CollectAndCount(l.correctionsTotal); n != 2*kinds {
		t.Errorf("%d series, want %d (%d kinds for each of 2 controllers)", n, 2*kinds, kinds)
	}
	if v := testutil.ToFloat64(l.correctionsTotal.WithLabelValues("kill", "load")); v != 0 {
		t.Errorf("kill/load = %v, want 0", v)
	}
}
