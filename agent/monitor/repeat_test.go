package monitor

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// changesEBPF is a fakeEBPF that knows what moved (EBPFChanges): a
// cgroup is unchanged when its figures at BeginPass equal those of the
// previous BeginPass.
type changesEBPF struct {
	*fakeEBPF
	mu        sync.Mutex
	prev      map[uint64]EBPFStats
	unchanged map[uint64]bool
}

func (c *changesEBPF) BeginPass() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fakeEBPF.mu.Lock()
	defer c.fakeEBPF.mu.Unlock()
	now := map[uint64]EBPFStats{}
	c.unchanged = map[uint64]bool{}
	for id, s := range c.fakeEBPF.stats {
		now[id] = s
		p, ok := c.prev[id]
		c.unchanged[id] = ok && sameEBPF(p, s)
	}
	c.prev = now
	return nil
}

func (c *changesEBPF) Unchanged(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unchanged[id]
}

func sameEBPF(a, b EBPFStats) bool {
	return a.OnCPU == b.OnCPU && a.Wakeups == b.Wakeups && a.RunqSum == b.RunqSum && a.Running == b.Running &&
		a.Sched == b.Sched && a.NetTxBytes == b.NetTxBytes && a.NetRxBytes == b.NetRxBytes && fmt.Sprint(a.RunqBuckets) == fmt.Sprint(b.RunqBuckets)
}

// countingFile counts the reads of an open control file.
type countingFile struct {
	openFile
	reads *int
}

func (f countingFile) ReadAt(p []byte, off int64) (int, error) {
	*f.reads++
	return f.openFile.ReadAt(p, off)
}

// TestIdleContainerRepeated (#29): with eBPF that knows what moved, an
// idle container whose figures did not move and none of whose files is
// due is not read at all (no eBPF lookup, no control file read), and its
// sample is the one a monitor that reads everything publishes (a twin
// monitor over the same files and figures, without EBPFChanges); a
// change eBPF sees is read in the very next pass, and so are the files
// when their refresh is due or the target changed.
func TestIdleContainerRepeated(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			rel := "slackline/guaranteed/c1"
			l.write(t, root, rel, 5000)
			withChanges := &changesEBPF{fakeEBPF: &fakeEBPF{}}
			plain := &fakeEBPF{}
			m := newTestMonitor(t, l.mode, dir, withChanges, 100)
			twin := newTestMonitor(t, l.mode, dir, plain, 100)
			target := Target{ID: "c1", TaskID: "t1", CgroupPath: rel, CgroupID: 7, CPULimit: 1}
			m.SetTargets([]Target{target})
			twin.SetTargets([]Target{target})
			st := EBPFStats{OnCPU: time.Second, Wakeups: 10, Sched: true, RunqBuckets: []uint64{0, 3, 5}}
			reads := 0
			for i, step := range []struct {
				at       time.Duration
				change   func(*EBPFStats) // what eBPF saw before the pass
				usage    uint64           // cpu.stat's usage_usec before the pass (0: as it was)
				target   func(*Target)
				repeated bool
			}{
				{at: 0},
				{at: 100 * time.Millisecond, repeated: true},
				{at: 200 * time.Millisecond, repeated: true},
				{at: 300 * time.Millisecond, change: func(s *EBPFStats) { s.OnCPU += time.Millisecond; s.Wakeups++; s.RunqBuckets[2]++ }, usage: 6000},
				{at: 400 * time.Millisecond}, // the last sample had a CPU rate: not quiet
				{at: 500 * time.Millisecond, repeated: true},
				{at: 600 * time.Millisecond, target: func(t *Target) { t.CPULimit = 2 }},
				{at: 700 * time.Millisecond, repeated: true},
				{at: 1300 * time.Millisecond}, // the files' refresh is due (the grid's second passed since pass 3's reads)
				{at: 1400 * time.Millisecond, repeated: true},
				{at: 1500 * time.Millisecond, change: func(s *EBPFStats) { s.Running = true; s.NetTxBytes += 1 << 20 }},
				{at: 1600 * time.Millisecond, change: func(s *EBPFStats) { s.Running = false; s.OnCPU += time.Millisecond }, usage: 7000},
			} {
				if step.change != nil {
					step.change(&st)
				}
				if step.usage != 0 {
					l.write(t, root, rel, step.usage)
				}
				if step.target != nil {
					step.target(&target)
					m.SetTargets([]Target{target})
					twin.SetTargets([]Target{target})
				}
				withChanges.set(7, st)
				plain.set(7, st)
				withChanges.fakeEBPF.mu.Lock()
				asked := len(withChanges.asked)
				withChanges.fakeEBPF.mu.Unlock()
				readsBefore := reads
				now := t0.Add(step.at)
				if err := m.Sample(now); err != nil {
					t.Fatalf("pass %d: %v", i, err)
				}
				if err := twin.Sample(now); err != nil {
					t.Fatalf("twin pass %d: %v", i, err)
				}
				if i == 0 { // count every read of the files the first pass opened
					for _, f := range controlFiles(m.containers["c1"]) {
						if f.f != nil {
							f.f = countingFile{openFile: f.f, reads: &reads}
						}
					}
				}
				withChanges.fakeEBPF.mu.Lock()
				lookups := len(withChanges.asked) - asked
				withChanges.fakeEBPF.mu.Unlock()
				// Every pass here but the first and the one at 1.3 s (both
				// sample the node too) is quiet exactly when it repeats.
				if quiet := !m.QuietSince().IsZero(); quiet != step.repeated {
					t.Errorf("pass %d at %v: quiet %v, want %v", i, step.at, quiet, step.repeated)
				}
				if step.repeated && (lookups != 0 || reads != readsBefore) {
					t.Errorf("pass %d at %v: %d eBPF lookups and %d file reads, want none (repeated)", i, step.at, lookups, reads-readsBefore)
				}
				if !step.repeated && lookups != 1 {
					t.Errorf("pass %d at %v: %d eBPF lookups, want 1 (sampled)", i, step.at, lookups)
				}
				got, _ := m.Latest("c1")
				want, _ := twin.Latest("c1")
				if !sameUsage(got, want) {
					t.Errorf("pass %d at %v: sample\n%+v\nwant the twin's\n%+v", i, step.at, got, want)
				}
				if u := m.Usages(); len(u) != 1 || !u[0].Stats.GetTimestamp().AsTime().Equal(now) {
					t.Errorf("pass %d: Usages' Timestamp is not the pass's", i)
				}
			}
			if got, want := m.repeated, uint64(5); got != want {
				t.Errorf("%d samples repeated, want %d", got, want)
			}
		})
	}
}

// TestQuietSince (#29): a pass is quiet when every container's sample
// repeated its previous one, and not when it sampled the node, read a
// container or saw targets come or go; a quiet pass reports since when
// the containers have been idle: the last pass with activity (a sample
// with an interval figure not 0) or a change of targets, not the passes
// that only read the node or idle containers' files.
func TestQuietSince(t *testing.T) {
	t.Parallel()
	l := layouts[0]
	dir := t.TempDir()
	root := filepath.Join(dir, "cgroup")
	e := &changesEBPF{fakeEBPF: &fakeEBPF{}}
	m := newTestMonitor(t, l.mode, dir, e, 100)
	var targets []Target
	st := EBPFStats{OnCPU: time.Second, Wakeups: 10, Sched: true}
	for i := range 2 {
		rel := fmt.Sprintf("slackline/guaranteed/q%d", i)
		l.write(t, root, rel, 5000)
		targets = append(targets, Target{ID: fmt.Sprintf("q%d", i), CgroupPath: rel, CgroupID: uint64(i + 1), CPULimit: 1})
		e.set(uint64(i+1), st)
	}
	m.SetTargets(targets)
	ms := time.Millisecond
	for _, step := range []struct {
		at    time.Duration
		drop  bool // the second target, before the pass
		run   bool // the first ran before the pass
		since time.Duration
		quiet bool
	}{
		{at: 0},                               // first samples (new targets), and the node
		{at: 100 * ms, quiet: true, since: 0}, // repeated
		{at: 300 * ms, quiet: true, since: 0},
		{at: 1000 * ms},                        // the node's second, and the files' refresh: idle
		{at: 1100 * ms, quiet: true, since: 0}, // still idle since the targets came
		{at: 1200 * ms, drop: true},            // a target dropped
		{at: 1300 * ms, quiet: true, since: 1200 * ms},
		{at: 1500 * ms, run: true}, // activity
		{at: 1600 * ms},            // read again after activity: idle, but not a repeat
		{at: 1700 * ms, quiet: true, since: 1500 * ms},
	} {
		if step.drop {
			m.SetTargets(targets[:1])
		}
		if step.run {
			st.OnCPU += 10 * ms
			st.Wakeups++
			e.set(1, st)
			l.write(t, root, targets[0].CgroupPath, 15000)
		}
		if err := m.Sample(t0.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		got := m.QuietSince()
		if quiet := !got.IsZero(); quiet != step.quiet || quiet && !got.Equal(t0.Add(step.since)) {
			t.Errorf("pass at %v: quiet since %v (zero: not quiet), want quiet %v since %v", step.at, got.Sub(t0), step.quiet, step.since)
		}
	}
}

// TestIdleRefreshesShareAPass (#29): the refreshes of idle containers
// fall on the grid of their intervals (tick.Crossed), so the files of
// containers last read at different passes (two of three ran, at
// different times) are refreshed in the same pass, the one at the grid's
// second, and the passes in between read no file at all: the runtime
// wakes its system monitor for one pass in ten, not for a few reads at
// every pass. (On age since each container's last read, c2 would be
// refreshed at 1.3 s and c3 at 1.6 s.)
func TestIdleRefreshesShareAPass(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			e := &changesEBPF{fakeEBPF: &fakeEBPF{}}
			m := newTestMonitor(t, l.mode, dir, e, 100)
			var targets []Target
			stats := map[uint64]EBPFStats{}
			for i := range 3 {
				rel := fmt.Sprintf("slackline/guaranteed/c%d", i+1)
				l.write(t, root, rel, 5000)
				id := uint64(i + 1)
				targets = append(targets, Target{ID: fmt.Sprintf("c%d", i+1), CgroupPath: rel, CgroupID: id, CPULimit: 1})
				stats[id] = EBPFStats{OnCPU: time.Second, Wakeups: 10, Sched: true}
			}
			m.SetTargets(targets)
			ran := map[time.Duration]int{300 * time.Millisecond: 2, 600 * time.Millisecond: 3} // pass -> the container that ran before it
			reads := 0
			var readAt []time.Duration
			for at := time.Duration(0); at <= 2500*time.Millisecond; at += 100 * time.Millisecond {
				if c, ok := ran[at]; ok {
					s := stats[uint64(c)]
					s.OnCPU += time.Millisecond
					s.Wakeups++
					stats[uint64(c)] = s
					l.write(t, root, targets[c-1].CgroupPath, 5000+uint64(at/time.Millisecond))
				}
				for id, s := range stats {
					e.set(id, s)
				}
				before := reads
				if err := m.Sample(t0.Add(at)); err != nil {
					t.Fatalf("pass at %v: %v", at, err)
				}
				if at == 0 { // count every read of the files the first pass opened
					for _, c := range m.containers {
						for _, f := range controlFiles(c) {
							if f.f != nil {
								f.f = countingFile{openFile: f.f, reads: &reads}
							}
						}
					}
					continue
				}
				if reads != before {
					readAt = append(readAt, at)
				}
			}
			want := []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second, 2 * time.Second}
			if fmt.Sprint(readAt) != fmt.Sprint(want) {
				t.Errorf("files read at the passes at %v, want %v (the runs and the grid's seconds)", readAt, want)
			}
		})
	}
}

// TestRepeatHorizonChangesNothing (#29): a monitor that, within a run of
// repeats, trusts the horizon its samplers gave (container.repeatUntil)
// reads the same files and eBPF entries at the same passes, and publishes
// the same samples, as its twin that asks every sampler at every pass,
// over a minute of 100 ms passes that cross the grids' seconds and fifth
// seconds, with seeded random runs of CPU, eBPF changes, target changes
// and pressure that comes and goes.
func TestRepeatHorizonChangesNothing(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.mode, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(29, 1))
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			unified := filepath.Join(root, l.unified)
			e := &changesEBPF{fakeEBPF: &fakeEBPF{}}
			twinE := &changesEBPF{fakeEBPF: &fakeEBPF{}}
			m := newTestMonitor(t, l.mode, dir, e, 100)
			twin := newTestMonitor(t, l.mode, dir, twinE, 100)
			twin.noRepeatHorizon = true
			var targets []Target
			stats := map[uint64]EBPFStats{}
			usage := map[uint64]uint64{}
			const n = 4
			quietPSI := func(rel string) {
				for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure"} {
					if err := os.WriteFile(filepath.Join(unified, rel, f), []byte(psi(0, 3000000, 0, 1500000)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range n {
				rel := fmt.Sprintf("slackline/guaranteed/c%d", i+1)
				id := uint64(i + 1)
				usage[id] = 5000
				l.write(t, root, rel, usage[id])
				if i%2 == 0 {
					quietPSI(rel)
				}
				targets = append(targets, Target{ID: fmt.Sprintf("c%d", i+1), CgroupPath: rel, CgroupID: id, CPULimit: 1})
				stats[id] = EBPFStats{OnCPU: time.Second, Wakeups: 10, Sched: true}
			}
			m.SetTargets(targets)
			twin.SetTargets(targets)
			reads, twinReads := 0, 0
			for pass := range 600 {
				at := time.Duration(pass) * 100 * time.Millisecond
				for i := range targets {
					id := uint64(i + 1)
					switch r := rng.IntN(100); {
					case r < 4: // it ran
						s := stats[id]
						s.OnCPU += time.Millisecond
						s.Wakeups++
						stats[id] = s
						usage[id] += 1000
						l.write(t, root, targets[i].CgroupPath, usage[id])
						if i%2 == 0 {
							quietPSI(targets[i].CgroupPath)
						}
					case r < 5: // pressure comes or goes, eBPF sees nothing
						if rng.IntN(2) == 0 {
							quietPSI(targets[i].CgroupPath)
						} else {
							l.write(t, root, targets[i].CgroupPath, usage[id])
						}
					case r < 6:
						targets[i].CPULimit = float64(1 + rng.IntN(3))
						m.SetTargets(targets)
						twin.SetTargets(targets)
					}
				}
				for id, s := range stats {
					e.set(id, s)
					twinE.set(id, s)
				}
				readsBefore, twinBefore := reads, twinReads
				e.fakeEBPF.mu.Lock()
				asked := len(e.asked)
				e.fakeEBPF.mu.Unlock()
				twinE.fakeEBPF.mu.Lock()
				twinAsked := len(twinE.asked)
				twinE.fakeEBPF.mu.Unlock()
				now := t0.Add(at)
				if err := m.Sample(now); err != nil {
					t.Fatalf("pass at %v: %v", at, err)
				}
				if err := twin.Sample(now); err != nil {
					t.Fatalf("twin's pass at %v: %v", at, err)
				}
				for _, mm := range []struct {
					m     *Monitor
					reads *int
				}{{m, &reads}, {twin, &twinReads}} {
					for _, c := range mm.m.containers {
						for _, f := range controlFiles(c) {
							if f.f != nil {
								if _, ok := f.f.(countingFile); !ok {
									f.f = countingFile{openFile: f.f, reads: mm.reads}
								}
							}
						}
					}
				}
				e.fakeEBPF.mu.Lock()
				lookups := len(e.asked) - asked
				e.fakeEBPF.mu.Unlock()
				twinE.fakeEBPF.mu.Lock()
				twinLookups := len(twinE.asked) - twinAsked
				twinE.fakeEBPF.mu.Unlock()
				if reads-readsBefore != twinReads-twinBefore || lookups != twinLookups {
					t.Fatalf("pass at %v: %d file reads and %d eBPF lookups, the twin %d and %d", at, reads-readsBefore, lookups, twinReads-twinBefore, twinLookups)
				}
				// Each sampler's own horizon holds (the container's is the
				// earliest, which would hide a sampler's wrong one).
				for _, c := range m.containers {
					if !now.Before(c.repeatUntil) || !c.prev.Time.Equal(now) {
						continue
					}
					a := c.samplers[len(c.samplers)-1].(*ebpfSampler).activity
					for i, s := range c.samplers {
						r := s.(repeater)
						end := now.Add(6 * time.Second)
						if u := r.repeatsUntil(now, &c.prev, a); !u.IsZero() && u.Before(end) {
							end = u
						}
						for probe := now.Add(10 * time.Millisecond); probe.Before(end); probe = probe.Add(10 * time.Millisecond) {
							if !r.repeats(probe, &c.prev, a) {
								t.Fatalf("pass at %v, %s: sampler %d repeats until %v by its horizon, not at %v", at, c.id, i, end.Sub(t0), probe.Sub(t0))
							}
						}
					}
				}
				for _, tg := range targets {
					got, _ := m.Latest(tg.ID)
					want, _ := twin.Latest(tg.ID)
					if !sameUsage(got, want) {
						t.Fatalf("pass at %v, %s: sample\n%+v\nwant the twin's\n%+v", at, tg.ID, got, want)
					}
				}
			}
			if m.repeated != twin.repeated || m.repeated < 1000 {
				t.Errorf("%d samples repeated, the twin %d; want equal, and many (of %d)", m.repeated, twin.repeated, 600*n)
			}
			t.Logf("%d of %d samples repeated", m.repeated, 600*n)
		})
	}
}

// sameUsage compares two samples but for their Stats' Timestamp (a
// repeated sample keeps the pass's that read it).
func sameUsage(a, b Usage) bool {
	sa, sb := a.Stats, b.Stats
	a.Stats, b.Stats = nil, nil
	if a != b {
		return false
	}
	ca, cb := proto.Clone(sa).(*slacklinev1.ResourceStatistics), proto.Clone(sb).(*slacklinev1.ResourceStatistics)
	ca.Timestamp, cb.Timestamp = nil, nil
	return proto.Equal(ca, cb)
}
