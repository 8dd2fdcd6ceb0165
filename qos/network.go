package qos

import (
	"fmt"
	"time"
)

// Network is the "network" controller: an AIMD feedback controller on the
// pace of all revocable egress (Correction.Resource Bandwidth, the subtree),
// protecting guaranteed and protected containers' traffic:
//
//   - violation, while revocable containers send (at least
//     MinRevocableMbps): a guarded container's TCP round trips are delayed
//     (p99 above both RTTFactor × its baseline and baseline + RTTIncrease;
//     the baseline is its least interval p99 over BaselineWindow; only
//     while the link carries RTTLinkFloor of the capacity, when known), or it
//     retransmits more than RetransmitFraction of its packets, or the
//     managed interfaces' egress exceeds SaturationEnter of the node's
//     capacity. Round trips and losses count once Persistence consecutive
//     samples show them; only evidence observed after the controller's last
//     change counts;
//   - on violation the pace is multiplied by DecreaseFactor, starting from
//     the applied limit, the estimate, or what revocable work sends if that
//     is lower, at most every DecreaseInterval and never below the floor
//     (FloorFraction of the capacity): step by step, several times within
//     one monitor interval while the link stays saturated;
//   - calm: every signal below its Exit threshold (round trips halfway back
//     to the baseline, no losses, egress below SaturationExit); after
//     CalmPeriod of calm the pace rises by IncreaseStepFraction of the
//     capacity every IncreaseInterval, and the limit is removed when it
//     reaches the revocable bandwidth estimate. Between the thresholds the
//     pace holds;
//   - plateau: for PlateauHold after a decrease, raises stop at
//     PlateauFraction of the pace at which guaranteed traffic was delayed,
//     then probing resumes. Without it the pace climbed back to where the
//     delay began every few seconds (a 0.7 cut is won back in 3-4 s), and
//     each climb cost the guaranteed task a few hundred milliseconds of
//     delayed round trips: enough to set its p99.
//
// It never kills: a paced task only slows down. State kept between
// evaluations: when the limit last changed and in which direction, since
// when the signals are calm, the plateau and until when it holds, and
// each guarded container's RTT baseline
// (forgotten when the container goes). The applied limit is read from
// Input.RevocableBandwidthLimit at every evaluation.
type Network struct {
	cfg NetworkConfig

	lastChange time.Time
	calmSince  time.Time
	// plateau is the highest pace raises reach until plateauUntil
	// (Mbit/s, 0 none).
	plateau      float64
	plateauUntil time.Time
	baselines    map[string]*rttBaseline
	streaks      map[string]*streak
}

// streak counts a container's consecutive samples with delayed round trips
// or losses.
type streak struct {
	sampled time.Time // the last sample counted
	n       int
}

// rttBaseline is the least RTT p99 of a container over the last one to two
// BaselineWindows: the minimum of the current window and of the previous
// one, so that it follows a path that got longer within two windows.
type rttBaseline struct {
	current, previous time.Duration
	since             time.Time // start of the current window
}

func (b *rttBaseline) add(p50 time.Duration, now time.Time, window time.Duration) {
	if now.Sub(b.since) >= window {
		b.previous, b.current, b.since = b.current, p50, now
		return
	}
	if b.current == 0 || p50 < b.current {
		b.current = p50
	}
}

func (b *rttBaseline) value() time.Duration {
	if b.previous > 0 && b.previous < b.current {
		return b.previous
	}
	return b.current
}

// NewNetwork returns a network controller.
func NewNetwork(cfg NetworkConfig) *Network {
	return &Network{cfg: cfg, baselines: map[string]*rttBaseline{}, streaks: map[string]*streak{}}
}

// Evaluate implements Controller.
func (c *Network) Evaluate(in Input) []Correction {
	now, cfg := in.Now, c.cfg
	capacity := in.Node.LinkCapacity
	var revocableTx float64
	present := make(map[string]bool, len(in.Containers))
	for i := range in.Containers {
		ct := &in.Containers[i]
		present[ct.ID] = true
		switch {
		case ct.correctable():
			revocableTx += ct.NetTx
		case ct.guarded() && ct.TCPRTTP99 > 0:
			b := c.baselines[ct.ID]
			if b == nil {
				b = &rttBaseline{since: now}
				c.baselines[ct.ID] = b
			}
			b.add(ct.TCPRTTP99, now, cfg.BaselineWindow)
		}
	}
	for id := range c.baselines {
		if !present[id] {
			delete(c.baselines, id)
		}
	}
	for id := range c.streaks {
		if !present[id] {
			delete(c.streaks, id)
		}
	}

	worst, stale, calm := c.assess(in)
	if calm {
		if c.calmSince.IsZero() {
			c.calmSince = now
		}
	} else {
		c.calmSince = time.Time{}
	}
	ceiling := in.RevocableBandwidth
	if ceiling <= 0 {
		ceiling = capacity
	}
	floor := max(1, cfg.FloorFraction*capacity)
	current := in.RevocableBandwidthLimit
	switch {
	case worst != nil && revocableTx >= cfg.MinRevocableMbps && revocableTx > 0:
		return c.decrease(now, worst, current, ceiling, floor, revocableTx)
	case worst != nil || stale:
		return nil // nothing revocable to slow down, or waiting for fresh evidence
	case calm && current > 0 && now.Sub(c.calmSince) >= cfg.CalmPeriod && now.Sub(c.lastChange) >= cfg.IncreaseInterval:
		return c.raise(now, current, ceiling, capacity)
	}
	return nil
}

// assess returns the worst fresh violation (nil if none), whether a
// violation was seen only in evidence older than the last change, and
// whether every signal is calm. It counts the containers' streaks of
// delayed samples.
func (c *Network) assess(in Input) (worst *violation, stale, calm bool) {
	now, cfg := in.Now, c.cfg
	calm = true
	// With a known capacity, round trips are the node's doing only while
	// its link is busy.
	linkBusy := in.Node.LinkCapacity <= 0 || in.Node.LinkSampledAt.IsZero() ||
		in.Node.LinkTx >= cfg.RTTLinkFloor*in.Node.LinkCapacity
	consider := func(v violation, observed time.Time) {
		if !c.lastChange.IsZero() && !observed.After(c.lastChange) {
			stale = true
			return
		}
		if worst == nil || v.severity > worst.severity {
			worst = &v
		}
	}
	for i := range in.Containers {
		ct := &in.Containers[i]
		if !ct.guarded() {
			continue
		}
		sampled := ct.sampledAt(now)
		var delayed []violation
		if b := c.baselines[ct.ID]; b != nil && ct.TCPRTTP99 > 0 {
			base := b.value()
			enter := max(time.Duration(cfg.RTTFactor*float64(base)), base+cfg.RTTIncrease)
			exit := base + (enter-base)/2
			if ct.TCPRTTP99 > enter && linkBusy {
				delayed = append(delayed, violation{
					reason: fmt.Sprintf("%s TCP round-trip p99 %s > %s (baseline %s)", ct.ID,
						formatDuration(ct.TCPRTTP99), formatDuration(enter), formatDuration(base)),
					signalAt: sampled,
					severity: float64(ct.TCPRTTP99) / float64(enter),
				})
			}
			if ct.TCPRTTP99 > exit && linkBusy {
				calm = false
			}
		}
		if cfg.RetransmitFraction > 0 && ct.NetTxPackets > 0 && ct.TCPRetransmits > 0 {
			lost := float64(ct.TCPRetransmits) / float64(ct.NetTxPackets)
			if lost > cfg.RetransmitFraction && ct.TCPRetransmits >= cfg.MinRetransmits && linkBusy {
				delayed = append(delayed, violation{
					reason: fmt.Sprintf("%s retransmitted %d segments, %.1f%% of its packets (> %g%%)", ct.ID,
						ct.TCPRetransmits, 100*lost, 100*cfg.RetransmitFraction),
					signalAt: sampled,
					severity: lost / cfg.RetransmitFraction,
				})
			}
			if lost > cfg.RetransmitFraction/2 && linkBusy {
				calm = false
			}
		}
		s := c.streaks[ct.ID]
		if s == nil {
			s = &streak{}
			c.streaks[ct.ID] = s
		}
		if !sampled.Equal(s.sampled) {
			s.sampled = sampled
			if len(delayed) > 0 {
				s.n++
			} else {
				s.n = 0
			}
		}
		if s.n >= cfg.Persistence {
			for _, v := range delayed {
				consider(v, sampled)
			}
		}
	}
	if capacity := in.Node.LinkCapacity; capacity > 0 && !in.Node.LinkSampledAt.IsZero() {
		used := in.Node.LinkTx / capacity
		if used >= cfg.SaturationEnter {
			consider(violation{
				reason: fmt.Sprintf("link egress %.0f Mbit/s is %.0f%% of %.0f Mbit/s (>= %g%%)", in.Node.LinkTx,
					100*used, capacity, 100*cfg.SaturationEnter),
				signalAt: in.Node.LinkSampledAt,
				severity: used / cfg.SaturationEnter,
			}, in.Node.LinkSampledAt)
		}
		if used > cfg.SaturationExit {
			calm = false
		}
	}
	return worst, stale, calm
}

// decrease multiplies the pace by DecreaseFactor.
func (c *Network) decrease(now time.Time, v *violation, current, ceiling, floor, revocableTx float64) []Correction {
	if !c.lastChange.IsZero() && now.Sub(c.lastChange) < c.cfg.DecreaseInterval {
		return nil // let the previous step show
	}
	from := current
	if from <= 0 {
		from = ceiling
	}
	// A pace above what revocable work sends would change nothing.
	if from <= 0 || revocableTx < from {
		from = max(revocableTx, floor)
	}
	limit := max(floor, from*c.cfg.DecreaseFactor)
	if current > 0 && limit >= current-epsilon {
		return nil // at the floor already
	}
	c.lastChange = now
	if c.cfg.PlateauHold > 0 {
		c.plateau, c.plateauUntil = max(limit, from*c.cfg.PlateauFraction), now.Add(c.cfg.PlateauHold)
	}
	return []Correction{{
		Kind: Throttle, Resource: Bandwidth, BandwidthLimit: limit, Controller: "network", Signal: v.signalAt,
		Reason: fmt.Sprintf("%s; revocable egress %.0f Mbit/s paced to %.0f Mbit/s", v.reason, revocableTx, limit),
	}}
}

// raise adds one step to the pace, and removes the limit at the ceiling.
func (c *Network) raise(now time.Time, current, ceiling, capacity float64) []Correction {
	base := capacity
	if base <= 0 {
		base = max(ceiling, current)
	}
	target := current + c.cfg.IncreaseStepFraction*base
	if c.plateau > 0 && now.Before(c.plateauUntil) {
		if current >= c.plateau-epsilon {
			return nil // holding below where guaranteed traffic was delayed
		}
		target = min(target, c.plateau)
	}
	shown := fmt.Sprintf("%.0f Mbit/s", target)
	if c.plateau > 0 && now.Before(c.plateauUntil) && target >= c.plateau-epsilon {
		shown += " (the plateau)"
	}
	if ceiling > 0 && target >= ceiling-epsilon {
		target, shown = 0, "the estimate"
	}
	c.lastChange = now
	return []Correction{{
		Kind: Unthrottle, Resource: Bandwidth, BandwidthLimit: target, Controller: "network", Signal: c.calmSince,
		Reason: fmt.Sprintf("guaranteed traffic calm for %s: revocable egress pace %.0f Mbit/s -> %s", now.Sub(c.calmSince), current, shown),
	}}
}
