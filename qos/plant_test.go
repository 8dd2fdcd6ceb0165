package qos_test

import (
	"math/rand/v2"
	"time"

	"github.com/slackline/slackline/qos"
)

// t0 is the start of every simulated timeline.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// plant is a small model of a node, closed around a controller: one
// latency-critical guaranteed container ("web-1") and revocable CPU hogs.
//
// CPU: guaranteed work gets the CPU it demands (up to the node); revocable
// hogs share what is left, within the revocable subtree's limit, in
// proportion to their demand. Interference: web-1's run-queue p99 is
// baseP99 plus slope for each core of total use above knee (shared caches,
// SMT siblings and wakeup preemption start hurting before the node is
// full), plus each running hog's thrash (a cache- or memory-bandwidth hog
// that hurts whatever its CPU share), plus deterministic noise. Events: one
// threshold event per 10 ms of the interval while p99 is above 1 ms, blamed
// on the hogs in proportion to the harm they cause. Memory: MemAvailable is
// MemTotal minus the containers' memory; web-1's memory PSI full rises as
// MemAvailable falls below 2% of MemTotal.
type plant struct {
	cpus       float64
	knee       float64
	slope      time.Duration // per core above knee
	baseP99    time.Duration
	noise      time.Duration // uniform in [-noise, +noise]
	rng        *rand.Rand
	guaranteed float64 // CPU demand of web-1
	webMem     uint64
	memTotal   uint64
	hogs       []*hog
	limit      float64 // revocable subtree CPU limit, 0 = none
	interval   time.Duration
}

type hog struct {
	id      string
	demand  float64 // cores
	alloc   float64
	thrash  time.Duration
	mem     uint64
	memRate uint64 // bytes per second of growth
	started time.Time
	killed  bool
}

func newPlant() *plant {
	return &plant{
		cpus:     8,
		knee:     6,
		slope:    2 * time.Millisecond,
		baseP99:  200 * time.Microsecond,
		rng:      rand.New(rand.NewPCG(1, 2)),
		webMem:   2 << 30,
		memTotal: 16 << 30,
		interval: 100 * time.Millisecond,
	}
}

func (p *plant) addHog(id string, demand float64, started time.Duration) *hog {
	h := &hog{id: id, demand: demand, alloc: demand, mem: 256 << 20, started: at(started)}
	p.hogs = append(p.hogs, h)
	return h
}

// apply carries out corrections the way the agent does.
func (p *plant) apply(corrections []qos.Correction) {
	for _, c := range corrections {
		switch c.Kind {
		case qos.Throttle, qos.Unthrottle:
			if c.ContainerID == "" {
				p.limit = c.CPULimit
			}
		case qos.Kill:
			for _, h := range p.hogs {
				if h.id == c.ContainerID {
					h.killed = true
				}
			}
		}
	}
}

// sample advances the plant to now and returns what the agent would see.
func (p *plant) sample(now time.Time) qos.Input {
	var live []*hog
	var demand float64
	for _, h := range p.hogs {
		if !h.killed {
			h.mem += h.memRate * uint64(p.interval) / uint64(time.Second)
			live = append(live, h)
			demand += h.demand
		}
	}
	g := min(p.guaranteed, p.cpus)
	r := min(demand, p.cpus-g)
	if p.limit > 0 {
		r = min(r, p.limit)
	}
	excess := max(0, g+r-p.knee)
	p99 := p.baseP99 + time.Duration(excess*float64(p.slope))
	harm := make(map[string]time.Duration)
	for _, h := range live {
		share := 0.0
		if demand > 0 {
			share = h.demand / demand
		}
		harm[h.id] = time.Duration(excess*share*float64(p.slope)) + h.thrash
		p99 += h.thrash
	}
	if p.noise > 0 {
		p99 += time.Duration((p.rng.Float64()*2 - 1) * float64(p.noise))
	}
	p99 = max(p99, 50*time.Microsecond)

	used := p.webMem
	for _, h := range live {
		used += h.mem
	}
	available := uint64(0)
	if used < p.memTotal {
		available = p.memTotal - used
	}
	memPSI := 0.0
	if low := p.memTotal / 50; available < low {
		memPSI = 60 * float64(low-available) / float64(low)
	}

	web := qos.Container{
		ID: "web-1", TaskID: "web-1-task", CPUAllocated: 6, CPU: g, MemBytes: p.webMem,
		StartedAt: at(-time.Hour), RunqP99: p99, RunqP50: p99 / 8, MemPressureFull10: memPSI,
		DelayedBy: make(map[string]time.Duration),
	}
	in := qos.Input{
		Now:            now,
		Node:           qos.Node{CPUs: p.cpus, MemTotal: p.memTotal, MemAvailable: available},
		RevocableLimit: p.limit,
	}
	var totalHarm time.Duration
	for _, d := range harm {
		totalHarm += d
	}
	for _, h := range live {
		if harm[h.id] > 0 {
			// who-delayed-whom: delay over the interval, ~100 wakeups.
			web.DelayedBy[h.id] = harm[h.id] * 100
		}
	}
	in.Containers = append(in.Containers, web)
	for _, h := range live {
		share := 0.0
		if demand > 0 {
			share = h.demand / demand
		}
		in.Containers = append(in.Containers, qos.Container{
			ID: h.id, TaskID: h.id + "-task", Revocable: true, CPUAllocated: h.alloc,
			CPU: r * share, MemBytes: h.mem, StartedAt: h.started,
		})
	}
	if p99 > time.Millisecond && totalHarm > 0 {
		n := int(p.interval / (10 * time.Millisecond))
		for i := range n {
			culprit := ""
			// Blame the hogs in proportion to their harm, deterministically.
			pick := time.Duration(float64(totalHarm) * (float64(i) + 0.5) / float64(n))
			for _, h := range live {
				if pick < harm[h.id] {
					culprit = h.id
					break
				}
				pick -= harm[h.id]
			}
			in.Events = append(in.Events, qos.Event{
				Time:      now.Add(-p.interval + time.Duration(i+1)*p.interval/time.Duration(n)),
				Container: "web-1", Culprit: culprit, Latency: p99,
			})
		}
	}
	return in
}

// step is one evaluation of the closed loop.
type step struct {
	in  qos.Input
	out []qos.Correction
}

// run drives the plant and the controller from `from` to `to` (exclusive),
// calling change (if not nil) before each sample so a scenario can alter the
// load, and returns every step.
func (p *plant) run(c qos.Controller, from, to time.Duration, change func(now time.Duration)) []step {
	var steps []step
	for d := from; d < to; d += p.interval {
		if change != nil {
			change(d)
		}
		in := p.sample(at(d))
		out := c.Evaluate(in)
		p.apply(out)
		steps = append(steps, step{in: in, out: out})
	}
	return steps
}

// webP99 returns web-1's run-queue p99 in an input.
func webP99(in qos.Input) time.Duration {
	for _, c := range in.Containers {
		if c.ID == "web-1" {
			return c.RunqP99
		}
	}
	return 0
}
