package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// tracePoll is how often the tracer asks the agent for its estimate and
// the calibration's state (GetEstimate): twice per estimate at the
// default 100 ms, so that every estimate is seen.
const tracePoll = 50 * time.Millisecond

// maxTraceRows bounds the rows the tracer keeps in memory (about 80
// minutes at tracePoll); rows beyond it are counted in dropped and still
// written to the CSV file.
const maxTraceRows = 100000

// traceRow is the agent's estimate as GetEstimate showed it at one poll.
type traceRow struct {
	at                                 time.Time
	trial                              int
	phase                              string
	estimatedAt                        time.Time
	published, uncalibrated, calibrate float64
	level, margin                      float64
	paused                             bool
	resolved                           int64
	violations                         float64
	// peak and need are summed over the guaranteed containers: fast's
	// predicted peak and what is held back in all (peak + margin +
	// calibration).
	peak, need float64
	// expert is the calibration's published expert (doc.go, "Experts"
	// in the estimator package), so that a slow trial shows which base
	// prediction held its slack back.
	expert int32
}

// tracer polls the agent's estimate while the bench runs, so that each
// trial's wait can be split by what held the offer back.
type tracer struct {
	node slacklinev1connect.NodeServiceClient
	out  *csv.Writer // nil: no file

	mu      sync.Mutex
	rows    []traceRow
	dropped int
	trial   int
	phase   string
}

func newTracer(node slacklinev1connect.NodeServiceClient, w io.Writer) *tracer {
	t := &tracer{node: node, phase: "start"}
	if w != nil {
		t.out = csv.NewWriter(w)
		_ = t.out.Write([]string{"time_s", "trial", "phase", "estimate_time_s", "published_cpus", "uncalibrated_cpus", "calibrated_cpus",
			"level", "paused", "calibration_margin_cpus", "resolved", "violations", "predicted_peak_cpus", "need_cpus", "published_expert"})
	}
	return t
}

// mark records the trial and phase the next polls belong to.
func (t *tracer) mark(trial int, phase string) {
	t.mu.Lock()
	t.trial, t.phase = trial, phase
	t.mu.Unlock()
}

// run polls until ctx ends.
func (t *tracer) run(ctx context.Context, start time.Time) {
	tick := time.NewTicker(tracePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if t.out != nil {
				t.out.Flush()
			}
			return
		case <-tick.C:
		}
		e, err := estimate(ctx, t.node)
		if err != nil {
			continue
		}
		_, rev, _ := resources.FromProto(e.GetRevocable())
		c := e.GetCalibration()
		t.mu.Lock()
		r := traceRow{at: time.Now(), trial: t.trial, phase: t.phase, estimatedAt: e.GetTimestamp().AsTime(),
			published: rev.CPUs(), uncalibrated: e.GetUncalibratedCpus(), calibrate: e.GetCalibratedCpus(),
			level: c.GetLevel(), margin: c.GetMarginCpus(), paused: c.GetPaused(), resolved: c.GetResolved(), violations: c.GetViolations(),
			expert: c.GetPublishedExpert()}
		for _, m := range e.GetContainers() {
			r.peak += m.GetPredictedPeakCpus()
			r.need += m.GetNeedCpus()
		}
		if len(t.rows) < maxTraceRows {
			t.rows = append(t.rows, r)
		} else {
			t.dropped++
		}
		t.mu.Unlock()
		if t.out != nil {
			f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
			_ = t.out.Write([]string{f(r.at.Sub(start).Seconds()), strconv.Itoa(r.trial), r.phase, f(r.estimatedAt.Sub(start).Seconds()),
				f(r.published), f(r.uncalibrated), f(r.calibrate), f(r.level), strconv.FormatBool(r.paused), f(r.margin),
				strconv.FormatInt(r.resolved, 10), f(r.violations), f(r.peak), f(r.need), strconv.Itoa(int(r.expert))})
		}
	}
}

// The causes a trial's wait is split into, in the order they are checked
// at each poll: the first that holds the offer back is charged.
var causes = []string{"prediction", "paused", "calibration", "pacing", "pipeline"}

// cause names what held an offer of minCPUs back at r: fast's prediction
// (the confirmation, a burst being predicted), the calibration paused, the
// calibration's margin, the pacer or hysteresis holding a rise, or nothing
// in the agent (the estimate is published; the coordinator and framework
// have not delivered it yet).
func (r traceRow) cause(minCPUs float64) string {
	switch {
	case r.published >= minCPUs:
		return "pipeline"
	case r.uncalibrated < minCPUs:
		return "prediction"
	case r.paused:
		return "paused"
	case r.calibrate < minCPUs:
		return "calibration"
	default:
		return "pacing"
	}
}

// trialAccount is where one trial's wait went, and the calibration's
// state at its start (the usage drop) and end (the offer).
type trialAccount struct {
	spent                     map[string]time.Duration
	levelAtIdle, levelAtOffer float64
	marginAtIdle              float64
	// violationsAdded is how many violations were scored since the
	// previous trial's offer (the burst of this trial included).
	violationsAdded, violations float64
	resolved                    int64
}

// account splits (idleAt, offerAt] by cause, charging each poll interval
// to the cause seen at its start, and reads the calibration's state at
// both ends; prevViolations is the count at the previous trial's offer.
func (t *tracer) account(idleAt, offerAt time.Time, minCPUs, prevViolations float64) trialAccount {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := trialAccount{spent: map[string]time.Duration{}}
	var last *traceRow
	for i := range t.rows {
		r := &t.rows[i]
		if r.at.After(offerAt) {
			break
		}
		if !r.at.After(idleAt) {
			a.levelAtIdle, a.marginAtIdle = r.level, r.margin
		} else if last != nil {
			a.spent[last.cause(minCPUs)] += r.at.Sub(later(last.at, idleAt))
		}
		last = r
	}
	if last != nil {
		a.spent[last.cause(minCPUs)] += offerAt.Sub(later(last.at, idleAt))
		a.levelAtOffer, a.violations, a.resolved = last.level, last.violations, last.resolved
		a.violationsAdded = last.violations - prevViolations
	}
	return a
}

func (a trialAccount) String() string {
	s := "["
	for i, c := range causes {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s %.2fs", c, a.spent[c].Seconds())
	}
	return s + fmt.Sprintf("] level %.4f -> %.4f, calibration margin at idle %.2f, violations +%.0f (%.0f of %d scored)",
		a.levelAtIdle, a.levelAtOffer, a.marginAtIdle, a.violationsAdded, a.violations, a.resolved)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// violations returns the calibration's violations and scored estimates at
// the last poll.
func (t *tracer) violations() (float64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.rows) == 0 {
		return 0, 0
	}
	r := t.rows[len(t.rows)-1]
	return r.violations, r.resolved
}
