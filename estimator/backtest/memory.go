package backtest

import (
	"fmt"
	"time"

	"github.com/slackline/slackline/estimator"
)

// MemoryResult is how one estimator's mem did on one scenario, over every
// sample after the first estimate. Amounts are MiB.
//
// At sample j the real memory slack is ideal_j = max(0, Σ allocation −
// Σ working set_j) over the guaranteed containers (a trace's MemBytes is
// its working set: anonymous plus active file pages), offered_j the mem of
// the latest estimate made from earlier samples. Sample j is over when
// offered_j − ideal_j > Options.MemoryTolerance: had revocable tasks held
// all they were offered, guaranteed working sets would not have fit in
// their allocations, and reclaim or a kill would have had to win memory
// back.
type MemoryResult struct {
	Estimator string `json:"estimator"`
	Scenario  string `json:"scenario"`
	Samples   int    `json:"samples"`
	// MeanIdeal and MeanOffered are means of ideal_j and offered_j (MiB).
	MeanIdeal   float64 `json:"mean_ideal_mib"`
	MeanOffered float64 `json:"mean_offered_mib"`
	// Harvest is MeanOffered / MeanIdeal; SafeHarvest counts only what was
	// offered without exceeding the real slack.
	Harvest     float64 `json:"harvest"`
	SafeHarvest float64 `json:"safe_harvest"`
	// OverRate is the fraction of samples that are over.
	OverRate float64 `json:"over_rate"`
	// MaxExcess is the largest offered_j − ideal_j (MiB).
	MaxExcess float64 `json:"max_excess_mib"`
}

// DefaultMemoryTolerance is the over-offer (MiB) not counted as over: page
// cache moving between the active and inactive lists from one sample to the
// next.
const DefaultMemoryTolerance = 8.0

// ReplayMemory is Replay for mem: it feeds the scenario through est (with
// estimator.Config.Memory set, or mem is never offered) one estimate per
// opt.EstimateInterval and scores the mem estimates against the working
// sets that followed. tolerance is in MiB. It is deterministic; est must be
// fresh.
func ReplayMemory(name string, est estimator.Estimator, sc Scenario, opt Options, tolerance float64) (MemoryResult, error) {
	if len(sc.Traces) == 0 {
		return MemoryResult{}, fmt.Errorf("%w: %s has no traces", ErrScenario, sc.Name)
	}
	interval := sc.Traces[0].Interval
	n := len(sc.Traces[0].Points)
	var allocMiB float64
	for _, t := range sc.Traces {
		if t.Interval != interval {
			return MemoryResult{}, fmt.Errorf("%w: %s mixes sampling intervals %v and %v", ErrScenario, sc.Name, interval, t.Interval)
		}
		if t.Allocation.Mem() <= 0 {
			return MemoryResult{}, fmt.Errorf("%w: trace %s has no mem allocation", ErrScenario, t.Name)
		}
		n = min(n, len(t.Points))
		allocMiB += t.Allocation.Mem()
	}
	if opt.EstimateInterval < interval || opt.EstimateInterval%interval != 0 {
		return MemoryResult{}, fmt.Errorf("%w: estimate interval %v is not a multiple of the sampling interval %v", ErrScenario, opt.EstimateInterval, interval)
	}
	every := int(opt.EstimateInterval / interval)
	keep := max(1, int(opt.History/interval))
	containers := make([]estimator.Container, len(sc.Traces))
	for i, t := range sc.Traces {
		containers[i] = estimator.Container{ID: fmt.Sprintf("%s-%d", t.Name, i), Allocated: t.Allocation}
	}
	at := func(j int) time.Time { return epoch.Add(time.Duration(j+1) * interval) }

	res := MemoryResult{Estimator: name, Scenario: sc.Name}
	var offered, sumIdeal, sumOffer, sumSafe float64
	var over int
	estimated := false
	for j := range n {
		if estimated {
			var ws float64
			for _, t := range sc.Traces {
				ws += float64(t.Points[j].MemBytes) / (1 << 20)
			}
			ideal := max(0, allocMiB-ws)
			res.Samples++
			sumIdeal += ideal
			sumOffer += offered
			sumSafe += min(offered, ideal)
			excess := offered - ideal
			res.MaxExcess = max(res.MaxExcess, excess)
			if excess > tolerance {
				over++
			}
		}
		if (j+1)%every != 0 {
			continue
		}
		first := max(0, j+1-keep)
		for i, t := range sc.Traces {
			history := containers[i].History[:0]
			for k := first; k <= j; k++ {
				p := t.Points[k]
				history = append(history, estimator.Sample{Time: at(k), CPU: p.CPU, MemBytes: p.MemBytes})
			}
			containers[i].History = history
		}
		offered, estimated = est.Estimate(estimator.Input{Now: at(j), Containers: containers}).Mem(), true
	}
	if res.Samples == 0 {
		return res, fmt.Errorf("%w: %s is shorter than one estimate interval", ErrScenario, sc.Name)
	}
	s := float64(res.Samples)
	res.MeanIdeal, res.MeanOffered = sumIdeal/s, sumOffer/s
	if sumIdeal > 0 {
		res.Harvest, res.SafeHarvest = sumOffer/sumIdeal, sumSafe/sumIdeal
	}
	res.OverRate = float64(over) / s
	return res, nil
}
