package qos

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrUnknownController is wrapped by NewSet's error for a name missing from
// Registry.
var ErrUnknownController = errors.New("unknown qos controller")

// NewSet validates cfg and builds the named controllers (e.g.
// ParseNames(DefaultControllers)) into one Controller that evaluates them
// in the given order and merges their corrections:
//
//   - a container is killed at most once per evaluation (the first
//     controller's reason is kept), and a kill supersedes any throttle of
//     the same container;
//   - of several limits of the same resource for the same target (the
//     subtree or a container), the strictest wins: any Throttle over an
//     Unthrottle, the lower limit between two of a kind, and an Unthrottle
//     to 0 (no limit) last;
//   - of several Confine corrections, the one with the fewest CPUs wins;
//   - memory corrections (Reclaim, Release, Freeze, Thaw) pass through in
//     the order asked for;
//   - the result lists the subtree correction first, then the subtree's
//     CPUs, then per-container limits by container id, then memory
//     corrections, then kills in the
//     order asked for, so the agent can apply cheap throttles before kills.
//
// With both "cpuset" and "interference" in the set, the cpuset controller is
// evaluated first whatever the order of names, and the interference
// controller throttles only once the cpuset controller has nothing left to
// try (revocable work on its last CPUs, or confinement found not to help):
// moving revocable work to other CPUs costs it nothing while throttling
// slows it down, and one mechanism at a time can be judged by its effect.
func NewSet(names []string, cfg Config) (Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no qos controller named: choose among %s", strings.Join(Names(), ", "))
	}
	s := &set{}
	seen := make(map[string]bool)
	for _, name := range names {
		factory, ok := Registry[name]
		if !ok {
			return nil, fmt.Errorf("%w %q: choose among %s", ErrUnknownController, name, strings.Join(Names(), ", "))
		}
		if seen[name] {
			return nil, fmt.Errorf("qos controller %q named twice", name)
		}
		seen[name] = true
		c, err := factory(cfg)
		if err != nil {
			return nil, fmt.Errorf("qos controller %q: %w", name, err)
		}
		s.controllers = append(s.controllers, c)
	}
	var cpuset *CPUSet
	for _, c := range s.controllers {
		if cs, ok := c.(*CPUSet); ok {
			cpuset = cs
		}
	}
	for _, c := range s.controllers {
		if i, ok := c.(*Interference); ok && cpuset != nil {
			i.first = cpuset
		}
	}
	// The cpuset controller first: the interference controller reads what it
	// left to try at this evaluation.
	slices.SortStableFunc(s.controllers, func(a, b Controller) int {
		_, aFirst := a.(*CPUSet)
		_, bFirst := b.(*CPUSet)
		switch {
		case aFirst && !bFirst:
			return -1
		case bFirst && !aFirst:
			return 1
		}
		return 0
	})
	return s, nil
}

// set runs several controllers as one.
type set struct {
	controllers []Controller
}

// KeepFree implements MemoryKeeper: the most any of the set's
// controllers needs kept free (0 when none acts on MemAvailable).
func (s *set) KeepFree(memTotal uint64) uint64 {
	var most uint64
	for _, c := range s.controllers {
		if k, ok := c.(MemoryKeeper); ok {
			most = max(most, k.KeepFree(memTotal))
		}
	}
	return most
}

func (s *set) Evaluate(in Input) []Correction {
	var all []Correction
	for _, c := range s.controllers {
		all = append(all, c.Evaluate(in)...)
	}
	return Merge(all)
}

// Merge merges corrections from several controllers by the rules NewSet
// describes.
func Merge(corrections []Correction) []Correction {
	if len(corrections) <= 1 {
		return corrections
	}
	type target struct {
		resource  Resource
		container string // "" = the subtree
	}
	killed := make(map[string]bool)
	var kills []Correction
	limits := make(map[target]Correction) // -> strictest limit
	var confine *Correction
	var memory []Correction // Reclaim, Release, Freeze, Thaw: one controller's, in its order
	for _, c := range corrections {
		switch c.Kind {
		case Reclaim, Release, Freeze, Thaw:
			memory = append(memory, c)
		case Confine:
			if confine == nil || fewerCPUs(c, *confine) {
				confine = &c
			}
		case Kill:
			if !killed[c.ContainerID] {
				killed[c.ContainerID] = true
				kills = append(kills, c)
			}
		case Throttle, Unthrottle:
			at := target{c.Resource, c.ContainerID}
			if prev, ok := limits[at]; !ok || stricter(c, prev) {
				limits[at] = c
			}
		}
	}
	out := make([]Correction, 0, len(limits)+len(kills))
	targets := make([]target, 0, len(limits))
	for at := range limits {
		if at.container == "" || !killed[at.container] {
			targets = append(targets, at)
		}
	}
	// The subtree ("") sorts first, then containers; CPU before bandwidth.
	slices.SortFunc(targets, func(a, b target) int {
		if c := strings.Compare(a.container, b.container); c != 0 {
			return c
		}
		return int(a.resource - b.resource)
	})
	// The subtree's limits, its CPUs, then the containers' limits.
	for _, at := range targets {
		if at.container == "" {
			out = append(out, limits[at])
		}
	}
	if confine != nil {
		out = append(out, *confine)
	}
	for _, at := range targets {
		if at.container != "" {
			out = append(out, limits[at])
		}
	}
	out = append(out, memory...)
	return append(out, kills...)
}

// fewerCPUs reports whether Confine a leaves revocable work fewer CPUs than
// b (an empty list is every CPU).
func fewerCPUs(a, b Correction) bool {
	switch {
	case len(a.CPUs) == 0:
		return false
	case len(b.CPUs) == 0:
		return true
	}
	return len(a.CPUs) < len(b.CPUs)
}

// stricter reports whether limit a restricts more than limit b (of the
// same resource).
func stricter(a, b Correction) bool {
	if a.Kind != b.Kind {
		return a.Kind == Throttle
	}
	la, lb := a.limit(), b.limit()
	switch {
	case la <= 0:
		return false // no limit is never stricter
	case lb <= 0:
		return true
	}
	return la < lb
}

// limit is the correction's limit in its resource's unit.
func (c Correction) limit() float64 {
	switch c.Resource {
	case Bandwidth:
		return c.BandwidthLimit
	case DiskIO:
		return c.IOLimit
	}
	return c.CPULimit
}
