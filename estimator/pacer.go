package estimator

import (
	"fmt"
	"time"

	"github.com/slackline/slackline/resources"
)

// Pacer decides which estimates are published (the calibrated estimator
// publishes through one; the agent sends every change it publishes). A
// shrink is sent at once, always: what was offered must never stay above
// what is safe. A rise is sent at once when no rise was sent in the last
// RiseInterval, or when the estimator says it is lasting (Rise) and the
// estimate just before it sent a rise too, or when it says it is large;
// otherwise it is held and sent, at its newest value, with the first
// estimate after the interval. Lasting and large are the estimator's word:
// the calibrated estimator calls lasting a rise of at least two
// Fast.Onsets left by a confirmed fall (a member's usage fell by an Onset
// and stayed down for the whole confirmation), and large a lasting rise of
// at least largeFallOnsets (a core at the defaults). Slack that a load
// leaves when it stops usually shows in two rises, the sample the load
// stopped in (partly busy) leaving the confirmation window one estimate
// before the idle ones: the second is offered at once whatever changed
// just before (#29; it used to be so only after two quiet seconds, and the
// slack bench's slow trials were those where something had changed). When
// a small rise was sent shortly before (the load losing a little CPU in
// its last few hundred milliseconds), the first step is held, and with it
// a lasting second step: a large one is sent anyway (#29, the slack
// bench's slow trials on a quiet machine; TestCalibratedBenchPatternSagBefore).
// Lasting rises that are not large keep waiting there: sending them too
// makes the calibration pay for them on the bursty trace (its harvest
// fell from 51.7% to 50.5%, below fast's).
// The rises of a noisy estimate are batched into one message per interval,
// so fewer revocable offers go out only to be rescinded a moment later.
//
// A Pacer is pure (time is the now passed in) and used from one goroutine.
// What it sends is never above the estimate, so it never adds violations;
// its price is noisy rises offered up to RiseInterval later.
type Pacer struct {
	// RiseInterval is the least time between two rises sent that are not
	// lasting (0: every change is sent as it comes).
	RiseInterval time.Duration

	sent     resources.Resources
	lastRise time.Time
	started  bool
	deferred int
	// rose is set when the last estimate passed to Next sent a rise.
	rose bool
}

// DefaultRiseInterval is the calibrated estimator's default RiseInterval
// (--estimator-rise-interval), chosen on the recorded traces (never on the
// held-out ones) among 0-2 s: at
// 0.5 s the changes reaching the coordinator fall by a half on the mix of
// seven containers (518 to 273 a minute; shrinks 232 to 161) for a point
// of harvest; at 1 s by two thirds for two to seven points.
const DefaultRiseInterval = 500 * time.Millisecond

// Rise is what the estimator says of an estimate's rise (Pacer.Next).
type Rise int

const (
	// RiseNoisy is paced: sent at once only when no rise was sent in the
	// last RiseInterval.
	RiseNoisy Rise = iota
	// RiseLasting is sent at once, besides, when the estimate before it
	// sent a rise (the second step of slack a load left).
	RiseLasting
	// RiseLarge is sent at once, always.
	RiseLarge
)

// NewPacer returns a pacer whose first estimate is sent at once.
func NewPacer(riseInterval time.Duration) (*Pacer, error) {
	if riseInterval < 0 {
		return nil, fmt.Errorf("%w: rise interval %v must not be negative", ErrInvalidConfig, riseInterval)
	}
	return &Pacer{RiseInterval: riseInterval}, nil
}

// Next takes the newest estimate at now and what the estimator says of its
// rise, and returns what to send and whether to
// send it (false: the coordinator already has it, or the rise is held).
// Only cpus, mem and bandwidth are paced; the result holds those.
func (p *Pacer) Next(now time.Time, estimate resources.Resources, rise Rise) (resources.Resources, bool) {
	if !p.started {
		p.started, p.sent, p.lastRise = true, estimate, now
		return estimate, true
	}
	mayRise := p.RiseInterval == 0 || now.Sub(p.lastRise) >= p.RiseInterval ||
		rise == RiseLasting && p.rose || rise == RiseLarge
	pick := func(sent, next float64) (float64, bool) {
		if next <= sent || mayRise {
			return next, next > sent
		}
		return sent, false // a rise held until the interval has passed
	}
	cpus, roseCPU := pick(p.sent.CPUs(), estimate.CPUs())
	mem, roseMem := pick(p.sent.Mem(), estimate.Mem())
	bw, roseBW := pick(p.sent.Bandwidth(), estimate.Bandwidth())
	out := resources.New(cpus, mem, 0).With(resources.Bandwidth, bw)
	if out.CPUs() < estimate.CPUs() || out.Mem() < estimate.Mem() || out.Bandwidth() < estimate.Bandwidth() {
		p.deferred++
	}
	p.rose = false
	if out.Equal(p.sent) {
		return p.sent, false
	}
	if roseCPU || roseMem || roseBW {
		p.lastRise, p.rose = now, true
	}
	p.sent = out
	return out, true
}

// Reset forgets what was sent (a new session): the next estimate is sent
// at once, and the rises after it are paced as a fresh pacer's are.
func (p *Pacer) Reset() {
	p.started, p.lastRise, p.rose = false, time.Time{}, false
}

// Deferred returns how many estimates had a rise held back.
func (p *Pacer) Deferred() int { return p.deferred }
