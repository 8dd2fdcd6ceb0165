package bpf_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/internal/privileged"
)

// TestAllCulprits: with every culprit attributed, a guaranteed victim
// pinned to a CPU that an untracked hog (another service's cgroup) and a
// revocable hog share has its waits split among them: the untracked cgroup
// by id, the revocable one by id (and in DelayedByRevocable), the rest to
// what else ran (itself, the kernel, an idle CPU waking up, the part older
// than the runs kept); the parts sum to its total wait. Without the option
// only revocable culprits are named.
func TestAllCulprits(t *testing.T) {
	privileged.Require(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: one for the test, one shared by victim and hogs")
	}
	forEachVariant(t, testAllCulprits)
}

func testAllCulprits(t *testing.T, variant int) {
	root := testRoot(t)
	m := loadVariant(t, variant, bpf.Config{AllCulprits: true})
	cpu := runtime.NumCPU() - 1
	other, revocable, victim := newCgroup(t, root, "other"), newCgroup(t, root, "revocable"), newCgroup(t, root, "victim")
	if err := m.Track(revocable.id, bpf.ClassRevocable); err != nil {
		t.Fatal(err)
	}
	if err := m.Track(victim.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	p := startHelper(t, victim, cpu, "victim", "1s")
	hogs := startHogs(t, cpu, other, revocable)
	p.start(t)
	p.wait(t)
	for _, h := range hogs {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	}
	st := stats(t, m, victim.id)
	delays, err := m.DelayedBy(victim.id)
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	for culprit, d := range delays {
		sum += d
		name, ok := bpf.CulpritName(culprit)
		if !ok {
			name = "cgroup"
		}
		t.Logf("%s %d: %v", name, culprit, d)
	}
	t.Logf("total wait %v over %d waits; attributed %v; delayed by revocable %v", st.RunqTotal, st.RunqCount, sum, st.DelayedByRevocable)
	if delays[other.id] <= 0 || delays[revocable.id] <= 0 {
		t.Errorf("DelayedBy = %v: want both hogs (other %d, revocable %d) named", delays, other.id, revocable.id)
	}
	if st.DelayedByRevocable != delays[revocable.id] {
		t.Errorf("DelayedByRevocable %v, want the revocable hog's share %v", st.DelayedByRevocable, delays[revocable.id])
	}
	// Waits that began on another CPU are counted but not attributed in the
	// wakeup variant, so the sum may fall short of the total there.
	if sum > st.RunqTotal || (variant == 0 && sum != st.RunqTotal) {
		t.Errorf("attributed %v of a total wait of %v", sum, st.RunqTotal)
	}

	// Off: revocable culprits only.
	if err := m.SetAllCulprits(false); err != nil {
		t.Fatal(err)
	}
	victim2 := newCgroup(t, root, "victim2")
	if err := m.Track(victim2.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	p = startHelper(t, victim2, cpu, "victim", "500ms")
	hogs = startHogs(t, cpu, other, revocable)
	p.start(t)
	p.wait(t)
	for _, h := range hogs {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	}
	delays, err = m.DelayedBy(victim2.id)
	if err != nil {
		t.Fatal(err)
	}
	for culprit := range delays {
		if culprit != revocable.id {
			t.Errorf("DelayedBy names %d with every culprit off: %v", culprit, delays)
		}
	}
}
