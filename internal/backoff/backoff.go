package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a jittered exponential backoff. The zero value is not usable:
// set Min and Max (Max below Min counts as Min). A Backoff is owned by one
// retry loop and is not safe for concurrent use.
type Backoff struct {
	// Min is the delay before the first retry, Max the longest delay.
	Min, Max time.Duration
	// Rand, when set, is the random source of the jitter (tests pass a
	// seeded one); nil uses math/rand/v2's global source.
	Rand *rand.Rand

	failures int
}

// Next returns the delay before the next attempt and counts a failure: the
// failure count n gives a delay drawn uniformly from [d/2, d] where
// d = min(Min·2ⁿ, Max).
func (b *Backoff) Next() time.Duration {
	d := b.ceiling()
	if b.failures < 63 && b.Min > 0 && b.Min <= d>>b.failures {
		d = b.Min << b.failures // no overflow: at most d
	}
	b.failures++
	return b.Jitter(d)
}

// Slow returns a delay of about Max, drawn from [Max/2, Max], and counts a
// failure. Retry loops use it for refusals that a quick retry will not cure
// (a machine in maintenance).
func (b *Backoff) Slow() time.Duration {
	b.failures++
	return b.Jitter(b.ceiling())
}

// Reset makes the next delay start from Min again: call it once an attempt
// proved healthy.
func (b *Backoff) Reset() { b.failures = 0 }

// Failures returns how many delays were handed out since the last Reset.
func (b *Backoff) Failures() int { return b.failures }

// Jitter returns a duration drawn uniformly from [d/2, d] (d itself when d
// is not positive).
func (b *Backoff) Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	half := d / 2
	span := int64(d - half + 1)
	if b.Rand != nil {
		return half + time.Duration(b.Rand.Int64N(span))
	}
	return half + time.Duration(rand.Int64N(span))
}

// Wait sleeps for Next(); it returns false, early, when ctx ends first.
func (b *Backoff) Wait(ctx context.Context) bool {
	return Sleep(ctx, b.Next())
}

// Sleep waits for d; it returns false, early, when ctx ends first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (b *Backoff) ceiling() time.Duration {
	return max(b.Max, b.Min)
}
