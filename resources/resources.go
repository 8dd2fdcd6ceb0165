package resources

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid resources")

// Scalar identifies a scalar resource.
type Scalar int

// The scalar resources. NumScalars is their count.
const (
	CPUs Scalar = iota
	Mem
	Disk
	// Bandwidth is the node's egress network bandwidth in Mbit/s. A
	// guaranteed task's bandwidth is a floor the agent keeps free for it; a
	// revocable task's is the pace its egress is held to.
	Bandwidth
	NumScalars
)

// Resource names as they appear in text and protobuf form.
const (
	NameCPUs      = "cpus"
	NameMem       = "mem"
	NameDisk      = "disk"
	NameBandwidth = "bandwidth"
	NamePorts     = "ports"
)

var scalarNames = [NumScalars]string{NameCPUs, NameMem, NameDisk, NameBandwidth}

// Name returns the resource name of s ("cpus", "mem", "disk", "bandwidth").
func (s Scalar) Name() string { return scalarNames[s] }

// scale is the fixed-point factor: three decimals.
const scale = 1000

// MaxScalar is the largest scalar value accepted.
const MaxScalar = 1e12

// Resources is a bundle of scalar quantities and port ranges. The zero value
// is empty and ready to use.
type Resources struct {
	milli [NumScalars]int64
	ports Ranges
}

// New returns resources with the given cpus, mem (MiB) and disk (MiB).
// Values are rounded to three decimals; negative values count as zero.
func New(cpus, mem, disk float64) Resources {
	var r Resources
	r.milli[CPUs] = toMilli(cpus)
	r.milli[Mem] = toMilli(mem)
	r.milli[Disk] = toMilli(disk)
	return r
}

func toMilli(v float64) int64 {
	if !(v > 0) { // also catches NaN
		return 0
	}
	if v > MaxScalar {
		v = MaxScalar
	}
	return int64(math.Round(v * scale))
}

// Get returns the value of scalar s.
func (r Resources) Get(s Scalar) float64 { return float64(r.milli[s]) / scale }

// CPUs returns the cpus scalar.
func (r Resources) CPUs() float64 { return r.Get(CPUs) }

// Mem returns the mem scalar in MiB.
func (r Resources) Mem() float64 { return r.Get(Mem) }

// Disk returns the disk scalar in MiB.
func (r Resources) Disk() float64 { return r.Get(Disk) }

// Bandwidth returns the bandwidth scalar in Mbit/s.
func (r Resources) Bandwidth() float64 { return r.Get(Bandwidth) }

// Ports returns the port ranges. The caller must not modify the slice.
func (r Resources) Ports() Ranges { return r.ports }

// With returns a copy of r with scalar s set to v (rounded, at least 0).
func (r Resources) With(s Scalar, v float64) Resources {
	r.milli[s] = toMilli(v)
	return r
}

// WithPorts returns a copy of r whose ports are ranges (normalized).
func (r Resources) WithPorts(ranges Ranges) Resources {
	r.ports = ranges.normalize()
	return r
}

// IsEmpty reports whether r holds nothing.
func (r Resources) IsEmpty() bool {
	for _, v := range r.milli {
		if v != 0 {
			return false
		}
	}
	return len(r.ports) == 0
}

// Equal reports whether r and o hold the same resources.
func (r Resources) Equal(o Resources) bool {
	return r.milli == o.milli && slices.Equal(r.ports, o.ports)
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	for i := range r.milli {
		r.milli[i] += o.milli[i]
	}
	if len(o.ports) > 0 {
		r.ports = r.ports.union(o.ports)
	}
	return r
}

// Sub returns r - o. Scalars never go below zero and ports of o that r does
// not hold are ignored, so Sub is safe on resources that do not contain o.
func (r Resources) Sub(o Resources) Resources {
	for i := range r.milli {
		r.milli[i] -= o.milli[i]
		if r.milli[i] < 0 {
			r.milli[i] = 0
		}
	}
	if len(o.ports) > 0 && len(r.ports) > 0 {
		r.ports = r.ports.difference(o.ports)
	}
	return r
}

// Contains reports whether r holds at least o: every scalar of o is at most
// r's and every port of o is among r's.
func (r Resources) Contains(o Resources) bool {
	for i := range r.milli {
		if o.milli[i] > r.milli[i] {
			return false
		}
	}
	return r.ports.contains(o.ports)
}

// Min returns the element-wise minimum of r and o (the intersection of ports).
func (r Resources) Min(o Resources) Resources {
	for i := range r.milli {
		r.milli[i] = min(r.milli[i], o.milli[i])
	}
	r.ports = r.ports.intersect(o.ports)
	return r
}

// ScalarsOnly returns r without its ports.
func (r Resources) ScalarsOnly() Resources {
	r.ports = nil
	return r
}

// DominantShare returns the largest fraction r holds of total among the
// scalars that total has (ports do not count, as in Mesos).
func (r Resources) DominantShare(total Resources) float64 {
	share := 0.0
	for i, t := range total.milli {
		if t > 0 {
			share = max(share, float64(r.milli[i])/float64(t))
		}
	}
	return share
}

// AnyScalarAtLeast reports whether some scalar of r is at least the same
// scalar of threshold, among the scalars threshold sets (non-zero). It is how
// "minimum allocatable resources" are checked.
func (r Resources) AnyScalarAtLeast(threshold Resources) bool {
	for i, t := range threshold.milli {
		if t > 0 && r.milli[i] >= t {
			return true
		}
	}
	return false
}

// String returns the text form, e.g. "cpus:4;mem:8192;ports:[31000-32000]".
// Zero scalars are left out; empty resources print as "".
func (r Resources) String() string {
	var b strings.Builder
	for i, v := range r.milli {
		if v == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(scalarNames[i])
		b.WriteByte(':')
		b.WriteString(strconv.FormatFloat(float64(v)/scale, 'f', -1, 64))
	}
	if len(r.ports) > 0 {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(NamePorts)
		b.WriteByte(':')
		b.WriteString(r.ports.String())
	}
	return b.String()
}

// Parse parses the text form "name:value;name:value", where value is a
// number for cpus, mem, disk and bandwidth and "[a-b,c-d]" for ports. Names may repeat
// (their values add up); unknown names, negative, NaN or infinite numbers and
// inverted or overlapping ranges are errors wrapping ErrInvalid.
func Parse(text string) (Resources, error) {
	var r Resources
	for item := range strings.SplitSeq(text, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, ":")
		if !ok {
			return Resources{}, fmt.Errorf("%w: %q is not name:value", ErrInvalid, item)
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if name == NamePorts {
			ranges, err := ParseRanges(value)
			if err != nil {
				return Resources{}, err
			}
			if err := r.addPorts(ranges); err != nil {
				return Resources{}, err
			}
			continue
		}
		s, err := scalarByName(name)
		if err != nil {
			return Resources{}, err
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return Resources{}, fmt.Errorf("%w: %s value %q is not a number", ErrInvalid, name, value)
		}
		if err := r.addScalar(s, v); err != nil {
			return Resources{}, err
		}
	}
	return r, nil
}

// MustParse is Parse that panics on error, for constants in tests and examples.
func MustParse(text string) Resources {
	r, err := Parse(text)
	if err != nil {
		panic(err)
	}
	return r
}

func scalarByName(name string) (Scalar, error) {
	for i, n := range scalarNames {
		if n == name {
			return Scalar(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown resource %q (known: cpus, mem, disk, bandwidth, ports)", ErrInvalid, name)
}

func (r *Resources) addScalar(s Scalar, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%w: %s value %v is not finite", ErrInvalid, s.Name(), v)
	case v < 0:
		return fmt.Errorf("%w: %s value %v is negative", ErrInvalid, s.Name(), v)
	case v > MaxScalar:
		return fmt.Errorf("%w: %s value %v exceeds the maximum %v", ErrInvalid, s.Name(), v, float64(MaxScalar))
	}
	r.milli[s] += toMilli(v)
	if r.milli[s] > MaxScalar*scale {
		return fmt.Errorf("%w: %s total exceeds the maximum %v", ErrInvalid, s.Name(), float64(MaxScalar))
	}
	return nil
}

func (r *Resources) addPorts(ranges Ranges) error {
	if err := ranges.validate(); err != nil {
		return err
	}
	if r.ports.overlaps(ranges) {
		return fmt.Errorf("%w: ports %s overlap %s", ErrInvalid, ranges, r.ports)
	}
	r.ports = r.ports.union(ranges)
	return nil
}
