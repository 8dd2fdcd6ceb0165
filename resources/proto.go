package resources

import (
	"fmt"
	"math"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// FromProto converts a protobuf resource list, split into its regular and
// revocable parts. Entries with the same name add up; invalid entries
// (unknown names, negative, NaN or infinite scalars, a scalar resource with
// ranges or ports without, inverted, out-of-range or overlapping ranges)
// give an error wrapping ErrInvalid that names the resource and the value.
func FromProto(list []*slacklinev1.Resource) (regular, revocable Resources, err error) {
	for i, res := range list {
		if res == nil {
			return Resources{}, Resources{}, fmt.Errorf("%w: resource #%d is empty", ErrInvalid, i)
		}
		target := &regular
		if res.GetRevocable() {
			target = &revocable
		}
		name := res.GetName()
		if name == NamePorts {
			if res.GetScalar() != 0 {
				return Resources{}, Resources{}, fmt.Errorf("%w: ports take ranges, not the scalar %v", ErrInvalid, res.GetScalar())
			}
			ranges := make(Ranges, 0, len(res.GetRanges()))
			for _, r := range res.GetRanges() {
				ranges = append(ranges, Range{r.GetBegin(), r.GetEnd()})
			}
			if err := target.addPorts(ranges); err != nil {
				return Resources{}, Resources{}, err
			}
			continue
		}
		s, err := scalarByName(name)
		if err != nil {
			return Resources{}, Resources{}, err
		}
		if len(res.GetRanges()) > 0 {
			return Resources{}, Resources{}, fmt.Errorf("%w: %s is a scalar and takes no ranges", ErrInvalid, name)
		}
		if err := target.addScalar(s, res.GetScalar()); err != nil {
			return Resources{}, Resources{}, err
		}
	}
	return regular, revocable, nil
}

// Revocability says whether resources are regular (allocated for as long as
// the task runs) or revocable (an agent's unused slack, which the agent may
// take back under contention). It is the revocable flag of the API's
// Resource.
type Revocability bool

// The two kinds of resources.
const (
	Regular   Revocability = false
	Revocable Revocability = true
)

// Proto converts r to a protobuf resource list, each entry carrying role and
// revocability. Zero scalars are left out.
func (r Resources) Proto(role string, revocability Revocability) []*slacklinev1.Resource {
	revocable := bool(revocability)
	out := make([]*slacklinev1.Resource, 0, NumScalars+1)
	for i, v := range r.milli {
		if v == 0 {
			continue
		}
		out = append(out, &slacklinev1.Resource{
			Name:      scalarNames[i],
			Scalar:    float64(v) / scale,
			Role:      role,
			Revocable: revocable,
		})
	}
	if len(r.ports) > 0 {
		ranges := make([]*slacklinev1.Range, len(r.ports))
		for i, p := range r.ports {
			ranges[i] = &slacklinev1.Range{Begin: p.Begin, End: p.End}
		}
		out = append(out, &slacklinev1.Resource{Name: NamePorts, Ranges: ranges, Role: role, Revocable: revocable})
	}
	return out
}

// IsFinite reports whether v is a usable number (not NaN, not infinite).
func IsFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
