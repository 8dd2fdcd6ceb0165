package qos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Memory is the "memory" controller. Memory cannot be throttled without
// pushing the holder into reclaim or the OOM killer, so when the node runs
// short of memory, or guaranteed work stalls on memory, it kills revocable
// containers, largest (MemBytes) first and newest first among equals, one at
// a time, before the kernel reclaims guaranteed work's memory or OOM-kills
// it.
//
// Signals:
//   - the node is short: MemAvailable < max(MinAvailableBytes,
//     MinAvailableFraction × MemTotal), the bytes counting only up to
//     ByteLineCap times the fraction's, as the reclaim controller's lines
//     (on a 1.5 GiB node 256 MiB becomes 115 MiB, the reclaim
//     controller's critical line). The next kill may follow after
//     KillCooldown, and only if the memory of victims still being killed
//     would not already lift MemAvailable over the line;
//   - a guaranteed or protected container's memory.pressure full avg10
//     exceeds PressureFullEnter (or "some" exceeds PressureSomeEnter). As
//     avg10 takes about ten seconds to show a kill's effect, the next kill
//     for pressure waits PressureCooldown and for the previous victim to be
//     gone.
//
// State: the time of the last kill and the kills still being carried out.
type Memory struct {
	cfg      MemoryConfig
	kills    killTracker
	lastKill time.Time
}

// NewMemory returns a memory controller.
func NewMemory(cfg MemoryConfig, killRetry time.Duration) *Memory {
	return &Memory{cfg: cfg, kills: newKillTracker(killRetry)}
}

// Evaluate implements Controller.
func (m *Memory) Evaluate(in Input) []Correction {
	m.kills.forgetGone(in.Containers)

	var (
		signal   string
		signalAt = in.Now
		cooldown time.Duration
	)
	threshold := m.line(in.Node.MemTotal)
	if in.Node.MemTotal > 0 && in.Node.MemAvailable < threshold {
		// Memory of victims already being killed is about to come back.
		available := in.Node.MemAvailable
		for i := range in.Containers {
			if c := &in.Containers[i]; m.kills.pending(c.ID, in.Now) {
				available += c.MemBytes
			}
		}
		if available >= threshold {
			return nil
		}
		signal = fmt.Sprintf("node MemAvailable %s < %s", formatBytes(in.Node.MemAvailable), formatBytes(threshold))
		cooldown = m.cfg.KillCooldown
	} else if c, what, value, limit := m.mostPressured(in.Containers); c != nil {
		if m.kills.anyPending(in.Now) {
			return nil
		}
		signal = fmt.Sprintf("%s memory pressure %s avg10 %.1f%% > %g%%", c.ID, what, value, limit)
		signalAt = c.sampledAt(in.Now)
		cooldown = m.cfg.PressureCooldown
	} else {
		return nil
	}
	if !m.lastKill.IsZero() && in.Now.Sub(m.lastKill) < cooldown {
		return nil
	}

	var victim *Container
	for i := range in.Containers {
		c := &in.Containers[i]
		if !c.correctable() || m.kills.pending(c.ID, in.Now) {
			continue
		}
		if victim == nil || c.MemBytes > victim.MemBytes || (c.MemBytes == victim.MemBytes && newerFirst(c, victim) < 0) {
			victim = c
		}
	}
	if victim == nil {
		return nil
	}
	m.kills.record(victim.ID, in.Now)
	m.lastKill = in.Now
	return []Correction{{
		Kind:        Kill,
		ContainerID: victim.ID,
		TaskID:      victim.TaskID,
		Reason:      fmt.Sprintf("%s; %s is the largest revocable container (%s)", signal, victim.ID, formatBytes(victim.MemBytes)),
		Controller:  "memory",
		Signal:      signalAt,
	}}
}

// line is the MemAvailable below which the node is short on a node of
// memTotal bytes: max(MinAvailableBytes, MinAvailableFraction × memTotal),
// the bytes capped at ByteLineCap × the fraction's (byteLine), as the
// reclaim controller's lines are.
func (m *Memory) line(memTotal uint64) uint64 {
	return byteLine(m.cfg.MinAvailableBytes, m.cfg.MinAvailableFraction, m.cfg.ByteLineCap, memTotal)
}

// KeepFree implements MemoryKeeper: the controller kills below its line
// and has no calm margin above it, so the line is what must stay free.
func (m *Memory) KeepFree(memTotal uint64) uint64 { return m.line(memTotal) }

// mostPressured returns the guarded container whose memory pressure exceeds
// its threshold by the largest margin, with the measure that does.
func (m *Memory) mostPressured(containers []Container) (worst *Container, what string, value, limit float64) {
	type candidate struct {
		c                   *Container
		what                string
		value, limit, ratio float64
	}
	var found []candidate
	for i := range containers {
		c := &containers[i]
		if !c.guarded() {
			continue
		}
		if m.cfg.PressureFullEnter > 0 && c.MemPressureFull10 > m.cfg.PressureFullEnter {
			found = append(found, candidate{c, "full", c.MemPressureFull10, m.cfg.PressureFullEnter, c.MemPressureFull10 / m.cfg.PressureFullEnter})
		}
		if m.cfg.PressureSomeEnter > 0 && c.MemPressureSome10 > m.cfg.PressureSomeEnter {
			found = append(found, candidate{c, "some", c.MemPressureSome10, m.cfg.PressureSomeEnter, c.MemPressureSome10 / m.cfg.PressureSomeEnter})
		}
	}
	if len(found) == 0 {
		return nil, "", 0, 0
	}
	// The largest excess wins; among equals, the first in input order.
	best := slices.MaxFunc(found, func(a, b candidate) int { return cmp.Compare(a.ratio, b.ratio) })
	return best.c, best.what, best.value, best.limit
}
