package estimator

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/slackline/slackline/resources"
)

// FastConfig configures the fast estimator; the other estimators ignore it.
type FastConfig struct {
	// Confirm is how long slack must last before it is offered: a
	// guaranteed container is taken to need the peak of its CPU over the
	// last Confirm, so a rise counts at once (the estimate shrinks in the
	// next estimate) and a fall only once it has held for Confirm.
	Confirm time.Duration
	// Margin (0 <= m < 1) is the fraction of each guaranteed CPU
	// allocation never offered: the explicit safety margin on top of the
	// predicted need. It stands for Config.Margin in fast, so it is also
	// the margin on peak egress bandwidth.
	Margin float64
	// ReclaimTime is how long the agent needs to take CPU back from
	// revocable tasks once guaranteed work wants it (the next estimate,
	// then the QoS controller's correction). A rise that recurs (see
	// Onset) and is due within ReclaimTime is held back before it
	// happens.
	ReclaimTime time.Duration
	// Onset is the smallest jump of a container's CPU, in cores, that
	// counts as the start of a burst. A jump of at least Onset from one
	// sample to the next is taken to rise as much again (the first sample
	// saw only part of the burst). A jump of at least Onset above the peak
	// of the second before is an onset, and bursts whose onsets recur on a
	// lattice (three within OnsetJitter of it) are expected again. 0 turns
	// both predictions off.
	Onset float64
	// OnsetJitter is how far from a fixed interval a recurring onset may
	// fall, each way.
	OnsetJitter time.Duration
	// Band is the hysteresis band of the published estimate, in cores: a
	// shrink publishes a band below the new estimate, so that noise does
	// not shrink it again, and a rise is published only beyond two bands.
	Band float64
}

// DefaultFastConfig returns the fast estimator's defaults, chosen on the
// recorded traces (doc.go), never on the held-out ones (testdata/heldout).
func DefaultFastConfig() FastConfig {
	return FastConfig{
		Confirm: time.Second, Margin: 0.06, ReclaimTime: 250 * time.Millisecond,
		Onset: 0.25, OnsetJitter: 250 * time.Millisecond, Band: 0.05,
	}
}

func (c FastConfig) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
		}
	}
	check(c.Confirm > 0, "confirmation period %v must be positive", c.Confirm)
	check(c.Margin >= 0 && c.Margin < 1, "safety margin %v must be in [0, 1)", c.Margin)
	check(c.ReclaimTime >= 0, "reclaim time %v must not be negative", c.ReclaimTime)
	check(c.Onset >= 0, "onset %v must not be negative", c.Onset)
	check(c.OnsetJitter >= 0, "onset jitter %v must not be negative", c.OnsetJitter)
	check(c.Band >= 0, "band %v must not be negative", c.Band)
	return errors.Join(errs...)
}

// fastEstimator is the default estimator "fast". Each guaranteed container
// and protected service is taken to need the peak of its CPU over the last
// Confirm, more while a burst is starting (its first sample saw only part
// of it) or when one of its recurring bursts is due within ReclaimTime,
// plus Margin of its allocation; the estimate is slackOf of those needs,
// published with a band of hysteresis. Its state is the last published
// estimate and each member's bursts over the last burstMemory (dropped
// when the member leaves); both are functions of the samples seen.
type fastEstimator struct {
	cfg       Config
	published resources.Resources
	// states is what is kept of each member between calls (its bursts,
	// its working-set peak with cfg.Memory, the calibrated estimator's
	// rhythm record), dropped when the member leaves: one lookup per
	// member and call (track).
	states map[memberKey]*memberState
	calls  uint64 // track's calls, which mark the members' state
	// members is the buffer of each call's members (membersInto),
	// cleared once the call is done.
	members []member
	memory  MemoryAccount // the last estimate's
}

// memberState is what fast (and calibrated) keep of one member between
// calls. It was four maps keyed by a string built per member and call
// (bursts, working-set peaks, rhythm records, this call's windows): four
// lookups and an allocation per member per estimate, a tenth of an idle
// agent's estimate (#29).
type memberState struct {
	call    uint64 // the last call (fastEstimator.calls) that had the member
	bursts  burstHistory
	memPeak memPeakTracker // with cfg.Memory
	rhythm  rhythmRecord   // calibrated's
	window  []Sample       // the member's window in that call
}

func newFast(cfg Config) (Estimator, error) {
	if err := errors.Join(cfg.validate(), cfg.Fast.validate()); err != nil {
		return nil, err
	}
	cfg.Margin = cfg.Fast.Margin
	cfg.Hysteresis = Hysteresis{Off: cfg.Hysteresis.Off, CPUs: cfg.Fast.Band, MemMiB: cfg.Hysteresis.MemMiB}
	return &fastEstimator{cfg: cfg, states: map[memberKey]*memberState{}}, nil
}

// Estimate implements Estimator.
func (f *fastEstimator) Estimate(in Input) resources.Resources {
	members := membersInto(f.members[:0], in, f.cfg.Window)
	f.track(members)
	f.published = f.cfg.Hysteresis.Apply(f.published, f.raw(in, members, f.predictCPU))
	clear(members)
	f.members = members[:0]
	return f.published
}

// track gives each of this call's members its state (member.state, and
// member.memPeak with cfg.Memory), marked with the call and holding the
// member's window, and drops the state of members gone since the last
// call.
func (f *fastEstimator) track(members []member) {
	f.calls++
	marked := 0
	for i := range members {
		m := &members[i]
		st := f.states[m.key]
		if st == nil {
			st = &memberState{}
			f.states[m.key] = st
		}
		if st.call != f.calls {
			st.call = f.calls
			marked++
		}
		st.window = m.window
		m.state = st
		if f.cfg.Memory {
			m.memPeak = &st.memPeak
		}
	}
	if len(f.states) > marked {
		for key, st := range f.states {
			if st.call != f.calls {
				delete(f.states, key)
			}
		}
	}
}

// present returns the state of the member key names when the latest
// call had it (nil otherwise).
func (f *fastEstimator) present(key memberKey) *memberState {
	if st := f.states[key]; st != nil && st.call == f.calls {
		return st
	}
	return nil
}

// raw learns the members' new onsets and returns the estimate before
// hysteresis, predicting each member's CPU with predict (f.predictCPU, or
// a wrapper that records it). The members are tracked (track).
func (f *fastEstimator) raw(in Input, members []member, predict cpuPredictor) resources.Resources {
	if f.cfg.Fast.Onset > 0 {
		for _, m := range members {
			m.state.bursts.ingest(m.container.History, in.Now, f.cfg.Fast.Onset)
		}
	}
	var raw resources.Resources
	raw, f.memory = slackOf(in, f.cfg, members, predict)
	return raw
}

// ExplainMemory implements MemoryExplainer.
func (f *fastEstimator) ExplainMemory() MemoryAccount { return f.memory }

// peaks returns m's CPU peak over the last Confirm (need) and over the
// Confirm before that (before).
func (f *fastEstimator) peaks(m member, now time.Time) (need, before float64) {
	// now − t < d is t after now − d: one comparison per sample, no
	// subtraction (#29).
	confirm := f.cfg.Fast.Confirm
	last, prev := now.Add(-confirm), now.Add(-2*confirm)
	for i := len(m.window) - 1; i >= 0 && m.window[i].Time.After(prev); i-- {
		if m.window[i].Time.After(last) {
			need = max(need, m.window[i].CPU)
		} else {
			before = max(before, m.window[i].CPU)
		}
	}
	return need, before
}

// fellFrom reports whether a member whose peak over the last Confirm is
// need, and over the Confirm before it before, fell by at least Onset and
// has stayed down for the whole of the last Confirm: the slack it leaves
// is lasting, not noise aging out of the window (#29's pacer sends the
// rise it makes at once). Never without Onset.
func (f *fastEstimator) fellFrom(need, before float64) bool {
	return f.cfg.Fast.Onset != 0 && before-need >= f.cfg.Fast.Onset
}

func (f *fastEstimator) predictCPU(m member, now time.Time) float64 {
	need, due := f.predictParts(m, now)
	return need + due
}

// predictParts returns predictCPU's prediction in two parts: the need from
// m's own recent samples (the peak over Confirm, more while a burst is
// starting) and what a recurring burst due within ReclaimTime adds (0 when
// none is, or just after a fall). The calibrated estimator's experts that
// do not follow rhythms take the first alone.
func (f *fastEstimator) predictParts(m member, now time.Time) (need, due float64) {
	// need is the peak over the last Confirm, before the peak over the
	// Confirm before that.
	need, before := f.peaks(m, now)
	return f.predictFrom(m, now, need, before)
}

// predictFrom is predictParts from m's peaks (peaks: the calibrated
// estimator walks them once per member and estimate).
func (f *fastEstimator) predictFrom(m member, now time.Time, need, before float64) (float64, float64) {
	cfg := f.cfg.Fast
	if cfg.Onset == 0 {
		return need, 0
	}
	if n := len(m.window); n >= 2 {
		// A burst starting: its first sample saw only part of it.
		if rise := m.window[n-1].CPU - m.window[n-2].CPU; rise >= cfg.Onset {
			need = max(need, m.window[n-1].CPU+rise)
		}
	}
	// A recurring burst is held back out of quiet only. Just after a fall
	// the confirmation already waits, and the slack that appears is offered
	// once it has held for Confirm, rhythm or not: a load that restarts as
	// soon as its slack is offered would otherwise teach the lattice its own
	// rhythm and keep its slack back.
	if before-need >= cfg.Onset {
		return need, 0
	}
	return need, m.state.bursts.due(now, cfg)
}

// onsetLookback is how far back the level a burst rises above is taken,
// how long after its onset its peak is taken, and the least time between
// two onsets.
const onsetLookback = time.Second

// burstMemory is how long onsets are remembered: a rhythm needs three
// onsets, so periods up to a third of it are followed.
const burstMemory = 5 * time.Minute

// minBurstPeriod is the shortest period of recurring bursts, and
// latticeSteps how many periods a rhythm is followed back and forth.
const (
	minBurstPeriod = 2 * time.Second
	latticeSteps   = 3
)

// onset is the start of a burst: when, and how far the CPU rose over the
// onsetLookback from it above the peak of the onsetLookback before it.
type onset struct {
	at          time.Time
	level, rise float64
}

// burstHistory is the onsets of one member's bursts over the last
// burstMemory, oldest first, with what it takes to find the next: the
// samples of the last onsetLookback and the newest sample taken in.
type burstHistory struct {
	onsets []onset
	recent []Sample
	newest time.Time
}

// ingest takes in the samples newer than any seen, up to now: a sample at
// least threshold above the peak of the onsetLookback before it is an
// onset (one per onsetLookback at most), and the samples of the
// onsetLookback after an onset set its rise.
func (h *burstHistory) ingest(history []Sample, now time.Time, threshold float64) {
	// History is oldest first: skip what was seen without reading it.
	first := searchAfter(history, h.newest)
	for _, s := range history[first:] {
		if s.Time.After(now) || !goodSample(s) {
			continue
		}
		h.newest = s.Time
		keep := h.recent[:0]
		level := 0.0
		for _, r := range h.recent {
			if s.Time.Sub(r.Time) <= onsetLookback {
				keep = append(keep, r)
				level = max(level, r.CPU)
			}
		}
		h.recent = append(keep, s)
		n := len(h.onsets)
		switch {
		case n > 0 && s.Time.Sub(h.onsets[n-1].at) < onsetLookback:
			last := &h.onsets[n-1]
			last.rise = max(last.rise, s.CPU-last.level)
		case s.CPU-level >= threshold:
			h.onsets = append(h.onsets, onset{at: s.Time, level: level, rise: s.CPU - level})
		}
	}
	drop := 0
	for drop < len(h.onsets) && now.Sub(h.onsets[drop].at) > burstMemory {
		drop++
	}
	h.onsets = h.onsets[drop:]
}

// due returns the largest rise of the bursts expected to start within
// ReclaimTime of now (OnsetJitter either side), 0 if none. Onsets at a and
// b make a period p = b − a (at least minBurstPeriod) that is trusted when
// one more onset lies on the same lattice, at a − p, a − 2p or a − 3p
// (each within OnsetJitter): a burst is then expected at b + p, b + 2p and
// b + 3p, so that a burst hidden under other load does not break the
// rhythm.
func (h *burstHistory) due(now time.Time, cfg FastConfig) float64 {
	if h == nil {
		return 0
	}
	// near reports whether an onset lies within OnsetJitter of t (open
	// interval): the first onset after t − OnsetJitter, found by binary
	// search (onsets are in time order), is before t + OnsetJitter. It was
	// a walk over every onset, run for every candidate pair and step: most
	// of an estimate's time on a bursty member (#29).
	near := func(t time.Time) bool {
		lo, hi := t.Add(-cfg.OnsetJitter), t.Add(cfg.OnsetJitter)
		i := sort.Search(len(h.onsets), func(i int) bool { return h.onsets[i].at.After(lo) })
		return i < len(h.onsets) && h.onsets[i].at.Before(hi)
	}
	from, to := now.Add(-cfg.OnsetJitter), now.Add(cfg.ReclaimTime+cfg.OnsetJitter)
	rise := 0.0
	for bi := len(h.onsets) - 1; bi > 0; bi-- {
		b := h.onsets[bi]
		if b.rise <= rise {
			continue
		}
		older := h.onsets[:bi]
	lattice:
		for k := time.Duration(1); k <= latticeSteps; k++ {
			// b + k(b − a) is due when from ≤ b + kp ≤ to, p = b − a ≥
			// minBurstPeriod: a lies in [b − ⌊(to−b)/k⌋, b − max(⌈(from−b)/k⌉,
			// minBurstPeriod)], found by binary search (onsets are in time
			// order) rather than by trying every pair.
			earliest := b.at.Add(-floorDiv(to.Sub(b.at), k))
			latest := b.at.Add(-max(ceilDiv(from.Sub(b.at), k), minBurstPeriod))
			first := sort.Search(len(older), func(i int) bool { return !older[i].at.Before(earliest) })
			for _, a := range older[first:] {
				if a.at.After(latest) {
					break
				}
				period := b.at.Sub(a.at)
				for j := time.Duration(1); j <= latticeSteps; j++ {
					if near(a.at.Add(-j * period)) {
						rise = b.rise
						break lattice
					}
				}
			}
		}
	}
	return rise
}

// floorDiv and ceilDiv divide d by a positive k, rounding down and up.
func floorDiv(d, k time.Duration) time.Duration {
	q := d / k
	if d%k != 0 && d < 0 {
		q--
	}
	return q
}

func ceilDiv(d, k time.Duration) time.Duration {
	q := d / k
	if d%k != 0 && d > 0 {
		q++
	}
	return q
}
