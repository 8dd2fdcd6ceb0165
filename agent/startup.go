package agent

import (
	"strings"
	"sync"
	"time"
)

// startupTimeline records how long each phase of the agent's start took,
// for the log line at its first registration (and the eBPF monitor's,
// which loads in the background). Phases may overlap; each is recorded
// with its own duration and when it ended, from the start.
type startupTimeline struct {
	start time.Time
	now   func() time.Time

	mu     sync.Mutex
	phases []startupPhase
	logged bool
}

type startupPhase struct {
	name      string
	took, end time.Duration
}

func newStartupTimeline(now func() time.Time) *startupTimeline {
	return &startupTimeline{start: now(), now: now}
}

// phase records that the phase that began at began ended now, and returns
// now (the next phase's beginning).
func (t *startupTimeline) phase(name string, began time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phases = append(t.phases, startupPhase{name: name, took: now.Sub(began), end: now.Sub(t.start)})
	return now
}

// sinceStart returns the time elapsed since the start.
func (t *startupTimeline) sinceStart() time.Duration { return t.now().Sub(t.start) }

// String lists the phases in the order they ended: "name=took" separated
// by spaces, durations rounded to the millisecond.
func (t *startupTimeline) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for i, p := range t.phases {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.name + "=" + p.took.Round(time.Millisecond).String())
	}
	return b.String()
}

// first reports whether this is the first call (the first registration).
func (t *startupTimeline) first() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.logged
	t.logged = true
	return !was
}
