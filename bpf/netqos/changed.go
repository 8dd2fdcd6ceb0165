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
// an idle cgroup now costs nothing. Every fullTCPReadInterval ReadAllTCP
// reads every watched cgroup anyway (a mark made visible before its
// counter, on a weakly ordered CPU, is caught within it).

const (
	// fullTCPReadInterval bounds how long ReadAllTCP goes without reading
	// every watched cgroup's counters.
	fullTCPReadInterval = time.Second
	// tcpWalkAbove: when more cgroups than this need reading in a pass,
	// one batch walk of tcp_stats is cheaper than their lookups.
	tcpWalkAbove = tcpBatch / 4
)

// tcpReadPlan is what one ReadAllTCP pass reads.
type tcpReadPlan struct {
	full bool     // every watched cgroup is read
	walk bool     // tcp_stats is walked with batch lookups instead of the lookups of read
	read []uint64 // the cgroups to look up (every watched one when full)
}

// planTCPRead decides which watched cgroups a pass at now reads: all of
// them without marks (marked nil), at the first pass (lastFull zero), when
// fullEvery has passed since the last full read or the clock went back;
// otherwise those without a cached read (watched since) and those marked
// changed. read is a reusable buffer.
func planTCPRead(now, lastFull time.Time, fullEvery time.Duration, watched map[uint64]bool,
	cache map[uint64]TCPStats, marked func(uint64) bool, read []uint64) tcpReadPlan {
	plan := tcpReadPlan{read: read[:0]}
	plan.full = marked == nil || lastFull.IsZero() || now.Before(lastFull) || now.Sub(lastFull) >= fullEvery
	for id := range watched {
		if plan.full {
			plan.read = append(plan.read, id)
			continue
		}
		if _, ok := cache[id]; !ok || marked(id) {
			plan.read = append(plan.read, id)
		}
	}
	plan.walk = plan.full || len(plan.read) > tcpWalkAbove
	return plan
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
	p.readIDs = plan.read
	if plan.full {
		p.lastFull = now
		for id := range p.cache {
			if !p.watched[id] {
				delete(p.cache, id)
			}
		}
	}
	p.reads.Full += boolCount(plan.full)
	p.reads.LookedUp += uint64(len(plan.read))
	p.reads.Reused += uint64(len(p.watched) - len(plan.read))
	if plan.walk && !p.noBatch {
		// Every watched cgroup's counters: fresh values are never wrong.
		err := p.readBatch(p.cache)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
		p.noBatch = true
	}
	var perCPU []netqosTcpCounters
	for _, id := range plan.read {
		if err := p.tcp.Lookup(id, &perCPU); err != nil {
			return fmt.Errorf("tcp stats of cgroup %d: %w", id, err)
		}
		p.cache[id] = sumTCP(perCPU)
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
