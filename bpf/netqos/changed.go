package netqos

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/slackline/slackline/bpf"
)

// Changed marks (#29), as package bpf's: tcp_rtt and tcp_retransmit set a
// cgroup's flag in tcp_changed after adding to its counters, and
// ReadAllTCP looks up only the watched cgroups whose flag was set, reusing
// what it read before for the others. A batch walk of tcp_stats visits
// every bucket of its MaxCgroups whatever the number of watched cgroups;
// an idle cgroup now costs nothing. Every Config.FullReadInterval (default
// fullTCPReadInterval) ReadAllTCP reads every watched cgroup anyway (a
// mark made visible before its counter, on a weakly ordered CPU, is caught
// within it).

const (
	// fullTCPReadInterval bounds how long ReadAllTCP goes without reading
	// every watched cgroup's counters.
	fullTCPReadInterval = time.Second
	// tcpWalkAbove: when more cgroups than this need reading in a pass,
	// one batch walk of tcp_stats is cheaper than their lookups.
	tcpWalkAbove = tcpBatch / 4
)

// planTCPRead is bpf.PlanRead over the watched cgroups: a cgroup is
// stale when it has no cached read (watched since the last pass).
func planTCPRead(now, lastFull time.Time, fullEvery time.Duration, watched map[uint64]bool,
	cache map[uint64]TCPStats, marked func(uint64) bool, read []uint64) bpf.ReadPlan {
	stale := func(id uint64, _ bool) bool {
		_, ok := cache[id]
		return !ok
	}
	return bpf.PlanRead(now, lastFull, fullEvery, watched, stale, marked, tcpWalkAbove, read)
}

// refreshTCP brings p.cache up to date for a pass at now (planTCPRead) and
// drops the entries of cgroups no longer watched. p.mu must be held.
func (p *Programs) refreshTCP(now time.Time) error {
	var marked func(uint64) bool
	if p.marks != nil {
		// Taken before the reads: a change after this is marked again.
		p.marks.Take()
		marked = p.marks.Marked
	}
	plan := planTCPRead(now, p.lastFull, p.fullEvery, p.watched, p.cache, marked, p.readIDs)
	p.readIDs = plan.Read
	if plan.Full {
		p.lastFull = now
		for id := range p.cache {
			if !p.watched[id] {
				delete(p.cache, id)
			}
		}
	}
	p.reads.Full += boolCount(plan.Full)
	p.reads.LookedUp += uint64(len(plan.Read))
	p.reads.Reused += uint64(len(p.watched) - len(plan.Read))
	if plan.Walk && !p.noBatch {
		// Every watched cgroup's counters: fresh values are never wrong.
		err := p.readBatch()
		if err == nil {
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
		p.noBatch = true
	}
	var perCPU []netqosTcpCounters
	for _, id := range plan.Read {
		if err := p.tcp.Lookup(id, &perCPU); err != nil {
			return fmt.Errorf("tcp stats of cgroup %d: %w", id, err)
		}
		p.store(id, sumTCP(perCPU))
	}
	return nil
}

// ReadCounts returns how ReadAllTCP has read the counters since Load (as
// bpf.Monitor.ReadCounts: full passes, cgroups looked up, cgroups whose
// last counters were reused because no program marked them changed).
func (p *Programs) ReadCounts() bpf.ReadCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

func boolCount(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
