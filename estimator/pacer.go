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
// RiseInterval, or when it directly follows (nothing else sent between) a
// rise that ended a quiet spell of quietSpellIntervals RiseIntervals
// without any change; otherwise it is held and sent, at its newest value,
// with the first estimate after the interval: the rises of a noisy
// estimate are batched into one message per interval, so fewer revocable
// offers go out only to be rescinded a moment later, while slack that
// appears after a quiet spell is offered at once, in both of the steps it
// usually shows in.
//
// A Pacer is pure (time is the now passed in) and used from one goroutine.
// What it sends is never above the estimate, so it never adds violations;
// its price is rises offered up to RiseInterval later.
type Pacer struct {
	// RiseInterval is the least time between two rises sent (0: every
	// change is sent as it comes).
	RiseInterval time.Duration

	sent     resources.Resources
	lastRise time.Time
	started  bool
	deferred int
	// lastChange is when anything was last sent; secondStep is set when
	// the last thing sent was a rise that ended a quiet spell (its second
	// step may follow at once).
	lastChange time.Time
	secondStep bool
}

// quietSpellIntervals is how many RiseIntervals without any change sent
// make a quiet spell: the rise that ends one may be followed at once by
// one more (#29). Slack that appears within a sample shows in two rises,
// the sample the load stopped in (partly busy) leaving the confirmation
// window one estimate before the idle ones; pacing the second held the
// slack bench's offers back by up to RiseInterval. A noisy estimate
// changes far more often than once per quiet spell, so it is paced as
// before: on the traces (2 s) the changes per minute moved by at most
// 0.7% (queue: 162.6 to 163.8), the mixes not at all.
const quietSpellIntervals = 4

// DefaultRiseInterval is the calibrated estimator's default RiseInterval
// (--estimator-rise-interval), chosen on the recorded traces (never on the
// held-out ones) among 0-2 s: at
// 0.5 s the changes reaching the coordinator fall by a half on the mix of
// seven containers (518 to 273 a minute; shrinks 232 to 161) for a point
// of harvest; at 1 s by two thirds for two to seven points.
const DefaultRiseInterval = 500 * time.Millisecond

// NewPacer returns a pacer whose first estimate is sent at once.
func NewPacer(riseInterval time.Duration) (*Pacer, error) {
	if riseInterval < 0 {
		return nil, fmt.Errorf("%w: rise interval %v must not be negative", ErrInvalidConfig, riseInterval)
	}
	return &Pacer{RiseInterval: riseInterval}, nil
}

// Next takes the newest estimate at now and returns what to send and
// whether to send it (false: the coordinator already has it, or the rise is
// held). Only cpus, mem and bandwidth are paced; the result holds those.
func (p *Pacer) Next(now time.Time, estimate resources.Resources) (resources.Resources, bool) {
	if !p.started {
		p.started, p.sent, p.lastRise, p.lastChange = true, estimate, now, now
		return estimate, true
	}
	mayRise := p.RiseInterval == 0 || now.Sub(p.lastRise) >= p.RiseInterval || p.secondStep
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
	if out.Equal(p.sent) {
		return p.sent, false
	}
	p.secondStep = false
	if roseCPU || roseMem || roseBW {
		p.lastRise = now
		p.secondStep = now.Sub(p.lastChange) >= quietSpellIntervals*p.RiseInterval
	}
	p.lastChange = now
	p.sent = out
	return out, true
}

// Reset forgets what was sent (a new session): the next estimate is sent
// at once, and the rises after it are paced as a fresh pacer's are (the
// quiet spell a rise before the Reset ended does not carry over).
func (p *Pacer) Reset() {
	p.started, p.secondStep, p.lastChange, p.lastRise = false, false, time.Time{}, time.Time{}
}

// Deferred returns how many estimates had a rise held back.
func (p *Pacer) Deferred() int { return p.deferred }
