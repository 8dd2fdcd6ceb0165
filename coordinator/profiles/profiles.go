package profiles

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Sentinel errors; see the package documentation.
var (
	// ErrInvalid is wrapped by errors about malformed profiles and rollouts.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound is wrapped by errors about profiles that do not exist.
	ErrNotFound = errors.New("not found")
	// ErrFailedPrecondition is wrapped by errors about changes the
	// profile's state forbids (a second rollout while one is under way).
	ErrFailedPrecondition = errors.New("failed precondition")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func preconditionf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFailedPrecondition}, args...)...)
}

// Bounds of what the coordinator holds (see the package documentation).
const (
	// MaxProfiles bounds the profiles a coordinator holds.
	MaxProfiles = 64
	// MaxSettingsBytes bounds one version's settings text.
	MaxSettingsBytes = 16 << 10
	// MaxSelectorTerms bounds a profile's selector.
	MaxSelectorTerms = 16
	// MaxHistory bounds the changes kept with a profile (its audit trail):
	// the oldest are dropped beyond it.
	MaxHistory = 32
	// MaxWaves bounds a rollout's waves.
	MaxWaves = 10
	// maxNameLength bounds profile names.
	maxNameLength = 63
)

// Version is one version of a profile's settings: a YAML or JSON mapping
// of agent flag names to values (the agent's --config format), restricted
// to the flags an agent applies without restarting.
type Version struct {
	// Number counts a profile's versions from 1; 0 is no version (the
	// agents' own flags).
	Number uint64
	// Settings is the mapping's text, as the operator gave it.
	Settings string
	// By is the principal that made the version; At when.
	By string
	At time.Time
}

// Change is one entry of a profile's audit trail.
type Change struct {
	At time.Time
	// By is the principal that made the change, or "coordinator" for a
	// rollout's own decisions (a wave, a rollback).
	By string
	// What says what changed, for a reader.
	What string
}

// Profile is a named set of estimator and QoS settings and the agents it
// is for.
type Profile struct {
	Name string
	// Selector is the agent attributes a matching agent has (all of them,
	// with these values); empty matches every agent.
	Selector map[string]string
	// Stable is the version matching agents run outside a rollout.
	Stable Version
	// Rollout is the latest rollout, under way or ended (nil: none).
	Rollout *Rollout
	// LastVersion is the highest version number given so far.
	LastVersion uint64
	// History is the audit trail, oldest first, at most MaxHistory.
	History []Change
}

// Matches tells whether an agent with these attributes is selected.
func (p *Profile) Matches(attributes map[string]string) bool {
	for k, v := range p.Selector {
		if got, ok := attributes[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Clone returns a deep copy of p.
func (p *Profile) Clone() *Profile {
	c := *p
	c.Selector = maps.Clone(p.Selector)
	c.History = slices.Clone(p.History)
	if p.Rollout != nil {
		r := p.Rollout.clone()
		c.Rollout = &r
	}
	return &c
}

func (p *Profile) audit(at time.Time, by, format string, args ...any) {
	p.History = append(p.History, Change{At: at, By: by, What: fmt.Sprintf(format, args...)})
	if over := len(p.History) - MaxHistory; over > 0 {
		p.History = slices.Delete(p.History, 0, over)
	}
}

// Validate checks a profile's name and selector.
func ValidateName(name string) error {
	if name == "" {
		return invalidf("name: required")
	}
	if len(name) > maxNameLength {
		return invalidf("name %.16q...: longer than %d bytes", name, maxNameLength)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return invalidf("name %q: only lower-case letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

func validateSelector(sel map[string]string) error {
	if len(sel) > MaxSelectorTerms {
		return invalidf("selector: %d terms, at most %d", len(sel), MaxSelectorTerms)
	}
	for k := range sel {
		if k == "" {
			return invalidf("selector: an empty attribute name")
		}
	}
	return nil
}

// Apply makes settings the profile's stable version at once for every
// matching agent (creating the profile when p is nil), with the selector
// given; a rollout under way is aborted (its agents go to the new
// version). check validates the settings (the agent's own validation).
func Apply(p *Profile, name string, selector map[string]string, settings, by string, now time.Time, check func(string) error) (*Profile, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := validateSelector(selector); err != nil {
		return nil, err
	}
	if err := validateSettings(settings, check); err != nil {
		return nil, err
	}
	if p == nil {
		p = &Profile{Name: name}
	} else {
		p = p.Clone()
	}
	p.Selector = maps.Clone(selector)
	p.LastVersion++
	p.Stable = Version{Number: p.LastVersion, Settings: settings, By: by, At: now}
	if p.Rollout != nil && p.Rollout.State == RolloutInProgress {
		p.Rollout.State, p.Rollout.Reason, p.Rollout.EndedAt = RolloutAborted, fmt.Sprintf("version %d applied by %s", p.LastVersion, by), now
		p.audit(now, by, "rollout of version %d aborted", p.Rollout.Candidate.Number)
	}
	p.audit(now, by, "applied version %d to every matching agent (selector %s)", p.LastVersion, FormatSelector(selector))
	return p, nil
}

func validateSettings(settings string, check func(string) error) error {
	if len(settings) > MaxSettingsBytes {
		return invalidf("settings: %d bytes, at most %d", len(settings), MaxSettingsBytes)
	}
	if check == nil {
		return nil
	}
	if err := check(settings); err != nil {
		return invalidf("settings: %v", err)
	}
	return nil
}

// FormatSelector writes a selector as k=v pairs in name order ("*" for
// every agent).
func FormatSelector(sel map[string]string) string {
	if len(sel) == 0 {
		return "*"
	}
	parts := make([]string, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

// Select returns, among profiles, the one an agent with these attributes
// runs: of those whose selector it matches, the one with the most selector
// terms (the most specific), ties broken by name. Nil when none matches.
func Select(profiles []*Profile, attributes map[string]string) *Profile {
	var best *Profile
	for _, p := range profiles {
		if !p.Matches(attributes) {
			continue
		}
		if best == nil || len(p.Selector) > len(best.Selector) ||
			len(p.Selector) == len(best.Selector) && p.Name < best.Name {
			best = p
		}
	}
	return best
}

// Assignment is what one agent should run.
type Assignment struct {
	// Profile is the profile's name ("" none: the agent's own flags).
	Profile string
	Version Version
}

// Assign returns what the agent on host should run of profile p (nil: no
// profile): the rollout's candidate when a rollout under way chose it,
// else the stable version.
func Assign(p *Profile, host string) Assignment {
	if p == nil {
		return Assignment{}
	}
	if r := p.Rollout; r != nil && r.State == RolloutInProgress && slices.Contains(r.Hosts, host) {
		return Assignment{Profile: p.Name, Version: r.Candidate}
	}
	return Assignment{Profile: p.Name, Version: p.Stable}
}

// rank orders hosts for a profile's rollouts: a stable pseudo-random
// order, so that the first waves do not always hit the same racks, and the
// same host keeps its place between waves.
func rank(profile, host string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(profile))
	h.Write([]byte{0})
	h.Write([]byte(host))
	return h.Sum64()
}

// share is how many of n agents a wave of fraction covers: at least one.
func share(fraction float64, n int) int {
	if n == 0 {
		return 0
	}
	k := int(math.Ceil(fraction*float64(n) - 1e-9))
	return min(max(k, 1), n)
}

// AbortRollout stops p's rollout under way, by an operator: the agents it
// moved to the candidate go back to the stable version (Assign gives the
// candidate only while the rollout is in progress). ErrNotFound when p is
// nil (name names it), ErrFailedPrecondition when no rollout is under way.
func AbortRollout(p *Profile, name, by string, now time.Time) (*Profile, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: profile %q: no such profile", ErrNotFound, name)
	}
	if p.Rollout == nil || p.Rollout.State != RolloutInProgress {
		return nil, preconditionf("profile %q: no rollout under way", name)
	}
	p = p.Clone()
	p.Rollout.State, p.Rollout.Reason, p.Rollout.EndedAt = RolloutAborted, "aborted by "+by, now
	p.audit(now, by, "rollout of version %d aborted; its agents went back to version %d", p.Rollout.Candidate.Number, p.Stable.Number)
	return p, nil
}
