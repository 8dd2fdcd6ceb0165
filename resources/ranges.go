package resources

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxPort is the largest port number accepted in a range.
const MaxPort = 65535

// Range is an inclusive range [Begin, End].
type Range struct {
	Begin, End uint64
}

// Ranges is a list of ranges. Ranges held by a Resources value are sorted,
// disjoint and coalesced.
type Ranges []Range

// Count returns how many numbers the ranges cover.
func (rs Ranges) Count() uint64 {
	var n uint64
	for _, r := range rs {
		n += r.End - r.Begin + 1
	}
	return n
}

// String returns the text form "[a-b,c-d]".
func (rs Ranges) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(r.Begin, 10))
		b.WriteByte('-')
		b.WriteString(strconv.FormatUint(r.End, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// ParseRanges parses "[a-b,c-d]" (a single number "a" means "a-a"). Inverted
// or overlapping ranges and ports above MaxPort are errors.
func ParseRanges(text string) (Ranges, error) {
	inner, ok := strings.CutPrefix(strings.TrimSpace(text), "[")
	if ok {
		inner, ok = strings.CutSuffix(inner, "]")
	}
	if !ok {
		return nil, fmt.Errorf("%w: ports %q must look like [31000-32000,33000-33010]", ErrInvalid, text)
	}
	var rs Ranges
	for part := range strings.SplitSeq(inner, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		begin, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		end, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: port range %q is not begin-end", ErrInvalid, part)
		}
		rs = append(rs, Range{begin, end})
	}
	if err := rs.validate(); err != nil {
		return nil, err
	}
	return rs.normalize(), nil
}

// validate checks bounds, order and overlaps of raw (unsorted) ranges.
func (rs Ranges) validate() error {
	for _, r := range rs {
		if r.Begin > r.End {
			return fmt.Errorf("%w: port range [%d-%d] is inverted", ErrInvalid, r.Begin, r.End)
		}
		if r.End > MaxPort {
			return fmt.Errorf("%w: port range [%d-%d] exceeds %d", ErrInvalid, r.Begin, r.End, MaxPort)
		}
	}
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b Range) int { return compareUint(a.Begin, b.Begin) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Begin <= sorted[i-1].End {
			return fmt.Errorf("%w: port ranges [%d-%d] and [%d-%d] overlap", ErrInvalid,
				sorted[i-1].Begin, sorted[i-1].End, sorted[i].Begin, sorted[i].End)
		}
	}
	return nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// normalize returns sorted, coalesced ranges in a new slice (nil when empty).
func (rs Ranges) normalize() Ranges {
	if len(rs) == 0 {
		return nil
	}
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b Range) int { return compareUint(a.Begin, b.Begin) })
	merged := out[:1]
	for _, r := range out[1:] {
		last := &merged[len(merged)-1]
		if r.Begin <= last.End+1 {
			last.End = max(last.End, r.End)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

func (rs Ranges) union(o Ranges) Ranges {
	if len(rs) == 0 {
		return o
	}
	if len(o) == 0 {
		return rs
	}
	all := make(Ranges, 0, len(rs)+len(o))
	all = append(append(all, rs...), o...)
	return all.normalize()
}

// difference returns rs minus o; both normalized.
func (rs Ranges) difference(o Ranges) Ranges {
	var out Ranges
	for _, r := range rs {
		begin, covered := r.Begin, false
		for _, x := range o {
			if x.End < begin {
				continue
			}
			if x.Begin > r.End {
				break
			}
			if x.Begin > begin {
				out = append(out, Range{begin, x.Begin - 1})
			}
			if x.End >= r.End {
				covered = true
				break
			}
			begin = x.End + 1
		}
		if !covered {
			out = append(out, Range{begin, r.End})
		}
	}
	return out
}

// intersect returns the numbers in both rs and o; both normalized.
func (rs Ranges) intersect(o Ranges) Ranges {
	var out Ranges
	i, j := 0, 0
	for i < len(rs) && j < len(o) {
		lo, hi := max(rs[i].Begin, o[j].Begin), min(rs[i].End, o[j].End)
		if lo <= hi {
			out = append(out, Range{lo, hi})
		}
		if rs[i].End < o[j].End {
			i++
		} else {
			j++
		}
	}
	return out
}

// contains reports whether every number of o is in rs; both normalized.
func (rs Ranges) contains(o Ranges) bool {
	i := 0
	for _, r := range o {
		for i < len(rs) && rs[i].End < r.Begin {
			i++
		}
		if i == len(rs) || rs[i].Begin > r.Begin || rs[i].End < r.End {
			return false
		}
	}
	return true
}

// overlaps reports whether rs and o share a number; both normalized.
func (rs Ranges) overlaps(o Ranges) bool {
	return len(rs.intersect(o)) > 0
}
