package estimator

import (
	"fmt"

	"github.com/slackline/slackline/resources"
)

// Hysteresis is the rule that keeps noise in an estimate from reaching the
// coordinator (every shrink rescinds offers, so churn is expensive) while
// never publishing more than is safe.
//
// For each resource, with raw the new safe estimate, published the previous
// published one and band = max(Floor, Fraction*raw):
//
//   - raw < published (shrink): publish max(0, raw - band) at once. The
//     published value is never above the safe one, not even for one round.
//   - raw > published + 2*band (a real rise): publish raw - band.
//   - otherwise: keep published.
//
// Publishing a band below raw is what absorbs noise: after a change, raw can
// wander by up to a band either way with no new change. The price is one
// band of slack. Bandwidth's band is fixed: max(BandwidthBandMbps, 5%).
type Hysteresis struct {
	// Off disables hysteresis: every raw estimate is published as is.
	Off bool
	// CPUs is the band floor for cpus, in cores.
	CPUs float64
	// MemMiB is the band floor for mem, in MiB.
	MemMiB float64
	// Fraction (0 <= f < 0.5) of the raw estimate is the band when larger
	// than the floor.
	Fraction float64
}

// DefaultHysteresis is a band of max(0.1 cpu, 5%) and max(64 MiB, 5%).
func DefaultHysteresis() Hysteresis {
	return Hysteresis{CPUs: 0.1, MemMiB: 64, Fraction: 0.05}
}

func (h Hysteresis) validate() error {
	if h.Off {
		return nil
	}
	if !(h.CPUs >= 0) || !(h.MemMiB >= 0) || !(h.Fraction >= 0 && h.Fraction < 0.5) {
		return fmt.Errorf("%w: hysteresis floors must be non-negative and the fraction in [0, 0.5), got %+v", ErrInvalidConfig, h)
	}
	return nil
}

// BandwidthBandMbps is the floor of bandwidth's hysteresis band: egress
// moves by tens of Mbit/s from one second to the next.
const BandwidthBandMbps = 10

// Apply returns the estimate to publish given the previously published one
// and the new raw (safe) estimate. It is a pure function; the caller keeps
// published between calls. Only cpus, mem and bandwidth are considered.
func (h Hysteresis) Apply(published, raw resources.Resources) resources.Resources {
	if h.Off {
		return raw
	}
	return resources.New(
		h.apply(published.CPUs(), raw.CPUs(), h.CPUs, h.Fraction),
		h.apply(published.Mem(), raw.Mem(), h.MemMiB, h.Fraction),
		0,
	).With(resources.Bandwidth, h.apply(published.Bandwidth(), raw.Bandwidth(), BandwidthBandMbps, 0.05))
}

func (h Hysteresis) apply(published, raw, floor, fraction float64) float64 {
	band := max(floor, fraction*raw)
	switch {
	case raw < published:
		return max(0, raw-band)
	case raw > published+2*band:
		return raw - band
	}
	return published
}
