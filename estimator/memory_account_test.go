package estimator_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/resources"
)

// TestMemoryAccount: every estimator that estimates memory says how its
// last mem was made (#28): each bound, which one set the estimate, and
// the node's KeepFree and other use behind the node bound. The account's
// estimate is the one published (no hysteresis here).
func TestMemoryAccount(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	server := guaranteed("server", "cpus:1;mem:1536", steadyHistory(t0, 600, 0.5, 384))
	serverNeed := 384 + 0.03*1536
	small := guaranteed("a", "cpus:1;mem:1024", steadyHistory(t0, 600, 0.5, 100))
	smallNeed := 100 + 0.03*1024
	tests := []struct {
		name   string
		memory bool
		in     estimator.Input
		want   estimator.MemoryAccount
	}{{
		// The colocation bench's node (#28): 1536 MiB, 60 MiB held
		// outside the containers, reclaim's 230 + 46 MiB kept free.
		name: "the node bound sets it on a small bounded node", memory: true,
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{server},
			Node: node(1536, 1536-384-60, 276)},
		want: estimator.MemoryAccount{
			Bound: estimator.MemoryBoundNode, EstimateMiB: 1536 - 276 - 60 - serverNeed,
			AllocatedMiB: 1536, NeedMiB: serverNeed, AllocationsMiB: 1536 - serverNeed,
			TotalMiB: 1536 - serverNeed, HasTotal: true, NodeMiB: 1536 - 276 - 60 - serverNeed, HasNode: true,
			Node: node(1536, 1536-384-60, 276), OtherBytes: 60 * mib, WorkingSetBytes: 384 * mib,
		},
	}, {
		name: "revocable working sets count as working sets, not as other use", memory: true,
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{
			server, {ID: "r", Revocable: true, Allocated: resources.MustParse("mem:700"), History: steadyHistory(t0, 600, 0, 640)},
		}, Node: node(1536, 1536-384-60-640, 276)},
		want: estimator.MemoryAccount{
			Bound: estimator.MemoryBoundNode, EstimateMiB: 1536 - 276 - 60 - serverNeed,
			AllocatedMiB: 1536, NeedMiB: serverNeed, AllocationsMiB: 1536 - serverNeed,
			TotalMiB: 1536 - serverNeed, HasTotal: true, NodeMiB: 1536 - 276 - 60 - serverNeed, HasNode: true,
			Node: node(1536, 1536-384-60-640, 276), OtherBytes: 60 * mib, WorkingSetBytes: (384 + 640) * mib,
		},
	}, {
		name: "the allocations set it on a large node", memory: true,
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:15360"), Containers: []estimator.Container{small},
			Node: node(16384, 16384-100-900, 1966)},
		want: estimator.MemoryAccount{
			Bound: estimator.MemoryBoundAllocations, EstimateMiB: 1024 - smallNeed,
			AllocatedMiB: 1024, NeedMiB: smallNeed, AllocationsMiB: 1024 - smallNeed,
			TotalMiB: 15360 - smallNeed, HasTotal: true, NodeMiB: 16384 - 1966 - 900 - smallNeed, HasNode: true,
			Node: node(16384, 16384-100-900, 1966), OtherBytes: 900 * mib, WorkingSetBytes: 100 * mib,
		},
	}, {
		name: "the agent's total sets it; node memory unknown", memory: true,
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:512"), Containers: []estimator.Container{small}},
		want: estimator.MemoryAccount{
			Bound: estimator.MemoryBoundTotal, EstimateMiB: 512 - smallNeed,
			AllocatedMiB: 1024, NeedMiB: smallNeed, AllocationsMiB: 1024 - smallNeed, TotalMiB: 512 - smallNeed, HasTotal: true,
		},
	}, {
		name: "on a tie the allocations are named", memory: true,
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1024"), Containers: []estimator.Container{small}},
		want: estimator.MemoryAccount{
			Bound: estimator.MemoryBoundAllocations, EstimateMiB: 1024 - smallNeed,
			AllocatedMiB: 1024, NeedMiB: smallNeed, AllocationsMiB: 1024 - smallNeed, TotalMiB: 1024 - smallNeed, HasTotal: true,
		},
	}, {
		name: "a node holding more than it can spare: a negative bound, an estimate of 0", memory: true,
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{server},
			Node: node(1536, 200, 276)},
		want: estimator.MemoryAccount{
			Bound: estimator.MemoryBoundNode, EstimateMiB: 0,
			AllocatedMiB: 1536, NeedMiB: serverNeed, AllocationsMiB: 1536 - serverNeed,
			TotalMiB: 1536 - serverNeed, HasTotal: true, NodeMiB: 1536 - 276 - (1336 - 384) - serverNeed, HasNode: true,
			Node: node(1536, 200, 276), OtherBytes: (1336 - 384) * mib, WorkingSetBytes: 384 * mib,
		},
	}, {
		name: "without memory (--oversubscribe-memory=false): no account",
		in: estimator.Input{Now: t0, Total: resources.MustParse("mem:1536"), Containers: []estimator.Container{server},
			Node: node(1536, 1536-384-60, 276)},
		want: estimator.MemoryAccount{},
	}}
	for _, tt := range tests {
		for _, name := range []string{"usage", "predictive", "fast", "calibrated"} {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				cfg := noHysteresis()
				cfg.Memory = tt.memory
				est := newEstimator(t, name, cfg)
				explainer, ok := est.(estimator.MemoryExplainer)
				if !ok {
					t.Fatalf("%s does not explain its memory estimate", name)
				}
				if got := explainer.ExplainMemory(); got.Bound != estimator.MemoryBoundNone {
					t.Errorf("before any estimate: bound %v, want none", got.Bound)
				}
				published := est.Estimate(tt.in)
				got := explainer.ExplainMemory()
				if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
					t.Errorf("memory account (-want +got):\n%s", diff)
				}
				if !near(published.Mem(), got.EstimateMiB) {
					t.Errorf("published mem %v MiB, account's estimate %v MiB", published.Mem(), got.EstimateMiB)
				}
			})
		}
	}
}

func TestMemoryBoundString(t *testing.T) {
	t.Parallel()
	for b, want := range map[estimator.MemoryBound]string{
		estimator.MemoryBoundNone: "none", estimator.MemoryBoundAllocations: "allocations",
		estimator.MemoryBoundTotal: "total", estimator.MemoryBoundNode: "node", estimator.MemoryBound(42): "none",
	} {
		if got := b.String(); got != want {
			t.Errorf("MemoryBound(%d).String() = %q, want %q", int(b), got, want)
		}
	}
}
