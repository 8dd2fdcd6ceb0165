package agent

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/qos"
)

// memoryShaper is what the reclaim controller's corrections need of the
// containerizer (the real one has it; test fakes need not): the revocable
// subtree's memory.high and freezer. Each method wraps
// containerizer.ErrUnsupported where the host lacks the mechanism.
type memoryShaper interface {
	SetRevocableMemoryHigh(bytes uint64) error
	RevocableMemoryHigh() (uint64, error)
	SetRevocableFrozen(frozen bool) error
	RevocableFrozen() (bool, error)
}

// memoryInput fills in what the node offers of memory shaping, and its
// state (the truth the controllers read).
func (l *qosLoop) memoryInput(in *qos.Input) {
	ms, ok := l.cz.(memoryShaper)
	if !ok {
		return
	}
	if high, err := ms.RevocableMemoryHigh(); err == nil {
		in.Node.MemoryHigh, in.RevocableMemoryHigh = true, high
	}
	if frozen, err := ms.RevocableFrozen(); err == nil {
		in.Node.Freeze, in.RevocableFrozen = true, frozen
	}
}

// applyMemory carries out a Reclaim, Release, Freeze or Thaw.
func (l *qosLoop) applyMemory(c qos.Correction) error {
	ms, ok := l.cz.(memoryShaper)
	if !ok {
		return fmt.Errorf("the containerizer cannot shape memory")
	}
	switch c.Kind {
	case qos.Reclaim, qos.Release:
		return ms.SetRevocableMemoryHigh(c.MemoryHigh)
	case qos.Freeze:
		return ms.SetRevocableFrozen(true)
	case qos.Thaw:
		return ms.SetRevocableFrozen(false)
	}
	return fmt.Errorf("not a memory correction: %s", c.Kind)
}

var (
	memoryHighDesc = prometheus.NewDesc("slackline_qos_revocable_memory_high_bytes",
		"memory.high of the revocable subtree (the reclaim controller's lever); 0: none. Absent where the host has no memory.high.", nil, nil)
	frozenDesc = prometheus.NewDesc("slackline_qos_revocable_frozen",
		"1 while the revocable subtree is frozen by the reclaim controller. Absent without a freezer.", nil, nil)
	ioLimitDesc = prometheus.NewDesc("slackline_qos_revocable_io_limit_bytes_per_second",
		"Per-device cap on the revocable subtree's disk reads and writes (the diskio controller's lever); 0: none. Absent where the host cannot cap.", nil, nil)
)

// qosStateCollector reports, at scrape time, the memory and disk I/O
// levers' state in the revocable subtree's cgroup files.
type qosStateCollector struct{ cz Containerizer }

// Describe implements prometheus.Collector.
func (c qosStateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memoryHighDesc
	ch <- frozenDesc
	ch <- ioLimitDesc
}

// Collect implements prometheus.Collector.
func (c qosStateCollector) Collect(ch chan<- prometheus.Metric) {
	if ms, ok := c.cz.(memoryShaper); ok {
		if high, err := ms.RevocableMemoryHigh(); err == nil {
			ch <- prometheus.MustNewConstMetric(memoryHighDesc, prometheus.GaugeValue, float64(high))
		}
		if frozen, err := ms.RevocableFrozen(); err == nil {
			v := 0.0
			if frozen {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(frozenDesc, prometheus.GaugeValue, v)
		}
	}
	if ds, ok := c.cz.(diskShaper); ok && ds.DiskIO().Cap {
		if limit, err := ds.RevocableIOLimit(); err == nil {
			ch <- prometheus.MustNewConstMetric(ioLimitDesc, prometheus.GaugeValue, float64(limit))
		}
	}
}
