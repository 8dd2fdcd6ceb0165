package bpf

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/slackline/slackline/internal/privileged"
)

// verifierBudget bounds the instructions the kernel's verifier may walk to
// accept one program: a quarter of its limit (1,000,000). sched_switch once
// took 536,046 on 6.18 and 517,951 on 6.12 against 80,675 on 6.1 (a loop
// whose max() the newer verifiers followed down both paths): 20 s of every
// load in an emulated 6.12 guest, and half the limit.
const verifierBudget = 250_000

var processedRE = regexp.MustCompile(`processed (\d+) insns`)

// TestVerifierComplexity loads each scheduler program alone with the
// verifier's statistics and fails when one needed more than verifierBudget
// instructions on this kernel; it logs each program's figures.
func TestVerifierComplexity(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	spec, err := loadSched()
	if err != nil {
		t.Fatal(err)
	}
	spec.Maps["cpu_states"].MaxEntries = 2
	spec.Maps["culprit_states"].MaxEntries = 2
	for _, name := range []string{"tracked", "cgroup_stats"} {
		spec.Maps[name].MaxEntries = 64
	}
	for _, name := range []string{"sched_switch", "sched_switch_wakeups", "sched_wakeup", "sched_wakeup_new"} {
		one := spec.Copy()
		one.Programs = map[string]*ebpf.ProgramSpec{name: spec.Programs[name]}
		coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{
			Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}, Cache: KernelBTF()})
		if err != nil {
			if name == "sched_switch" && probeSchedInfo() != nil {
				t.Logf("%s: not on this kernel: %v", name, err)
				continue
			}
			t.Fatalf("%s: %v", name, err)
		}
		log := coll.Programs[name].VerifierLog
		coll.Close()
		m := processedRE.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("%s: no instruction count in the verifier's log %q", name, log)
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("%s: verifier processed %d instructions (budget %d)", name, n, verifierBudget)
		if n > verifierBudget {
			t.Errorf("%s: the verifier processed %d instructions, budget %d: every load costs that (seconds in an emulated guest) and the kernel's limit is 1,000,000", name, n, verifierBudget)
		}
	}
}
