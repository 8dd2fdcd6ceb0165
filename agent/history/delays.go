package history

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Victim is what held a CPU while one container's tasks waited for it,
// cumulative, as the eBPF who-delayed-whom accounting reports it.
type Victim struct {
	// ContainerID identifies the victim (a container, or a protected
	// service's id); TaskID is its task, if any.
	ContainerID, TaskID string
	// Culprits maps a culprit (a container id, or "agent", "host",
	// "kernel", ...) to the seconds it delayed the victim, cumulative.
	Culprits map[string]float64
}

// delaySeries is one victim's snapshots of its cumulative delays, every
// DelayStep, in a fixed-size ring.
type delaySeries struct {
	taskID   string
	culprits []string // at most MaxCulprits, then OtherCulprit
	snaps    []delaySnap
	start, n int
}

type delaySnap struct {
	time time.Time
	secs []float64 // by index in culprits
}

// Edge is how long a culprit delayed a victim over a window.
type Edge struct {
	VictimContainerID, VictimTaskID string
	Culprit                         string
	// CulpritTaskID and CulpritRevocable describe a culprit that is a
	// container the store has a series of.
	CulpritTaskID    string
	CulpritRevocable bool
	Secs             float64
}

// snapshots is how many delay snapshots cover the window.
func (s *Store) snapshots() int { return int(s.window/DelayStep) + 2 }

// RecordDelays keeps a snapshot of the victims' cumulative delays taken at
// now, when DelayStep has passed since a victim's last one (the caller may
// call it on every monitor pass). Victims whose last snapshot left the
// window are dropped.
func (s *Store) RecordDelays(now time.Time, victims []Victim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delays == nil {
		s.delays = map[string]*delaySeries{}
	}
	for _, v := range victims {
		d, ok := s.delays[v.ContainerID]
		if !ok {
			if len(s.delays) >= MaxSeries {
				s.cut.WithLabelValues("series").Inc()
				continue
			}
			d = &delaySeries{snaps: make([]delaySnap, s.snapshots())}
			s.delays[v.ContainerID] = d
		}
		d.taskID = v.TaskID
		if d.n > 0 && now.Sub(d.newest().time) < DelayStep {
			continue
		}
		s.snapshot(d, now, v.Culprits)
	}
	for id, d := range s.delays {
		if d.n == 0 || now.Sub(d.newest().time) > s.window {
			delete(s.delays, id)
		}
	}
}

func (d *delaySeries) newest() *delaySnap { return &d.snaps[(d.start+d.n-1)%len(d.snaps)] }

// indexIn returns culprit's index in names, appending it (or, past
// MaxCulprits, OtherCulprit) when it is not there; folded reports that it
// went under OtherCulprit.
func indexIn(names *[]string, culprit string) (i int, folded bool) {
	if i := slices.Index(*names, culprit); i >= 0 {
		return i, false
	}
	if len(*names) >= MaxCulprits-1 {
		if i := slices.Index(*names, OtherCulprit); i >= 0 {
			return i, true
		}
		culprit, folded = OtherCulprit, true
	}
	*names = append(*names, culprit)
	return len(*names) - 1, folded
}

// vector maps cumulative delays by culprit onto d's culprit indexes and
// returns the culprits of the result's indexes. record is a snapshot's
// call: new culprits join d's, and each culprit folded into OtherCulprit
// is counted (slackline_agent_history_cut_total{limit="culprits"}, once
// per snapshot that folds it). A query's (record false) leaves d and the
// count alone: its new culprits are indexes after d's. Called with s.mu
// held.
func (s *Store) vector(d *delaySeries, culprits map[string]float64, record bool) ([]float64, []string) {
	keys := make([]string, 0, len(culprits))
	for c := range culprits {
		keys = append(keys, c)
	}
	slices.Sort(keys) // fold the same culprits into other every time
	names := d.culprits
	if !record {
		names = slices.Clip(names) // appends copy: d's stay as they are
	}
	out := make([]float64, len(names), len(names)+len(keys))
	for _, c := range keys {
		i, folded := indexIn(&names, c)
		if folded && record {
			s.cut.WithLabelValues("culprits").Inc()
		}
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i] += culprits[c]
	}
	if record {
		d.culprits = names
	}
	return out, names
}

func (s *Store) snapshot(d *delaySeries, now time.Time, culprits map[string]float64) {
	secs, _ := s.vector(d, culprits, true)
	snap := delaySnap{time: now, secs: secs}
	if d.n == len(d.snaps) {
		d.start = (d.start + 1) % len(d.snaps)
		d.n--
	}
	d.snaps[(d.start+d.n)%len(d.snaps)] = snap
	d.n++
}

// Delays returns who delayed whom during the window ending at now: for
// each victim with a snapshot, the current cumulative delays (current)
// minus those of its oldest snapshot within the window, longest first.
// since is the oldest snapshot used (zero when there is none). A victim
// missing from current is measured up to its newest snapshot.
func (s *Store) Delays(now time.Time, window time.Duration, current []Victim) (edges []Edge, since time.Time) {
	if window <= 0 || window > s.window {
		window = s.window
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	byID := map[string]Victim{}
	for _, v := range current {
		byID[v.ContainerID] = v
	}
	for id, d := range s.delays {
		var base *delaySnap
		for i := 0; i < d.n; i++ {
			if sn := &d.snaps[(d.start+i)%len(d.snaps)]; now.Sub(sn.time) <= window {
				base = sn
				break
			}
		}
		if base == nil {
			continue
		}
		if since.IsZero() || base.time.Before(since) {
			since = base.time
		}
		end, names := d.newest().secs, d.culprits
		taskID := d.taskID
		if v, ok := byID[id]; ok {
			end, names = s.vector(d, v.Culprits, false)
			taskID = v.TaskID
		}
		for i, c := range names {
			var from, to float64
			if i < len(base.secs) {
				from = base.secs[i]
			}
			if i < len(end) {
				to = end[i]
			}
			if to-from <= 0 {
				continue
			}
			e := Edge{VictimContainerID: id, VictimTaskID: taskID, Culprit: c, Secs: to - from}
			if se, ok := s.series[c]; ok {
				e.CulpritTaskID, e.CulpritRevocable = se.taskID, se.revocable
			}
			edges = append(edges, e)
		}
	}
	slices.SortFunc(edges, func(a, b Edge) int {
		return cmp.Or(cmp.Compare(b.Secs, a.Secs), strings.Compare(a.VictimContainerID, b.VictimContainerID), strings.Compare(a.Culprit, b.Culprit))
	})
	return edges, since
}
