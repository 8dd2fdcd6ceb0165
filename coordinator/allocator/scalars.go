package allocator

import (
	"math"

	"github.com/slackline/slackline/resources"
)

// scalars is the fixed-point (thousandths) scalar part of a
// resources.Resources: every resources.Scalar (cpus, mem, disk, bandwidth).
// The allocator keeps every per-role and per-framework sum in this form: it
// is a plain array, so adding and comparing never allocates, and integer
// arithmetic never drifts.
type scalars [resources.NumScalars]int64

// milliScale is the fixed-point factor used by package resources.
const milliScale = 1000

// scalarsOf returns the scalar part of r in thousandths. The round trip
// through float64 is exact: Get returns milli/1000, and multiplying back and
// rounding recovers milli for every value package resources accepts.
func scalarsOf(r resources.Resources) scalars {
	var s scalars
	for i := range s {
		s[i] = int64(math.Round(r.Get(resources.Scalar(i)) * milliScale))
	}
	return s
}

// resources returns s as a resources.Resources without ports.
func (s scalars) resources() resources.Resources {
	var r resources.Resources
	for i, v := range s {
		r = r.With(resources.Scalar(i), float64(v)/milliScale)
	}
	return r
}

// add returns s + o.
func (s scalars) add(o scalars) scalars {
	for i := range s {
		s[i] += o[i]
	}
	return s
}

// sub returns s - o, never below zero in any scalar.
func (s scalars) sub(o scalars) scalars {
	for i := range s {
		s[i] = max(s[i]-o[i], 0)
	}
	return s
}

// dominantShare returns the largest fraction s holds of total among the
// scalars total has, like resources.Resources.DominantShare.
func (s scalars) dominantShare(total scalars) float64 {
	share := 0.0
	for i, t := range total {
		if t > 0 {
			share = max(share, float64(s[i])/float64(t))
		}
	}
	return share
}

// isZero reports whether every scalar is zero.
func (s scalars) isZero() bool { return s == scalars{} }
