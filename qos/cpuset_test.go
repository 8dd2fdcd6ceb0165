package qos_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slackline/slackline/qos"
)

// cpusetScene is an 8-CPU node: web-1 guaranteed using webCPU cores with
// run-queue p99 webP99 and, when delay is not negative, that much delay
// caused by batch-1 over the last 100 ms (eBPF attribution); batch-1 and
// batch-2 revocable.
func cpusetScene(now time.Duration, webCPU float64, webP99, delay time.Duration) qos.Input {
	web := qos.Container{ID: "web-1", CPUAllocated: 6, CPU: webCPU, RunqP99: webP99, StartedAt: at(-time.Hour)}
	if delay >= 0 {
		web.DelayedBy = map[string]time.Duration{}
		if delay > 0 {
			web.DelayedBy["batch-1"] = delay
		}
	}
	return qos.Input{
		Now:  at(now),
		Node: qos.Node{CPUs: 8, MemTotal: 16 << 30, MemAvailable: 8 << 30},
		Containers: []qos.Container{web,
			{ID: "batch-1", Revocable: true, CPUAllocated: 2, CPU: 2, StartedAt: at(-3 * time.Minute)},
			{ID: "batch-2", Revocable: true, CPUAllocated: 2, CPU: 2, StartedAt: at(-2 * time.Minute)},
		},
		RevocableCPUs: []int{0, 1, 2, 3, 4, 5, 6, 7},
	}
}

// confineLoop feeds a controller inputs built every 100 ms by scene(i),
// applying the CPU sets and limits it asks for to the next input, and
// returns the corrections rendered one per line ("1.5s confine 4-7").
func confineLoop(t *testing.T, c qos.Controller, n int, scene func(i int) qos.Input) string {
	t.Helper()
	var b strings.Builder
	cpus := []int{0, 1, 2, 3, 4, 5, 6, 7}
	limit := 0.0
	for i := range n {
		in := scene(i)
		in.RevocableCPUs, in.RevocableLimit = cpus, limit
		for _, corr := range c.Evaluate(in) {
			fmt.Fprintf(&b, "%v %v ", in.Now.Sub(t0), corr.Kind)
			switch corr.Kind {
			case qos.Confine:
				if len(corr.CPUs) == 0 {
					b.WriteString("all")
					cpus = []int{0, 1, 2, 3, 4, 5, 6, 7}
				} else {
					b.WriteString(qos.FormatCPUs(corr.CPUs))
					cpus = corr.CPUs
				}
			case qos.Kill:
				b.WriteString(corr.ContainerID)
			default:
				limit = corr.CPULimit
				fmt.Fprint(&b, corr.CPULimit)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func newCPUSet(t *testing.T, names string, edit func(*qos.Config)) qos.Controller {
	t.Helper()
	cfg := qos.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	c, err := qos.NewSet(qos.ParseNames(names), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCPUSetTable(t *testing.T) {
	calm := 200 * time.Microsecond
	sized := func(cfg *qos.Config) { cfg.CPUSet.Headroom = 1.25 }
	tests := []struct {
		name  string
		edit  func(*qos.Config)
		n     int
		scene func(i int) qos.Input
		want  string
	}{
		{
			name:  "calm and unconfined: nothing, however much CPU guaranteed work uses",
			n:     100,
			scene: func(i int) qos.Input { return cpusetScene(time.Duration(i)*100*ms, 1.5, calm, 0) },
		},
		{
			name:  "sized: guaranteed work using 1.5 cores, 2 CPUs kept free of revocable work, one CPU per ShrinkInterval",
			edit:  sized,
			n:     40,
			scene: func(i int) qos.Input { return cpusetScene(time.Duration(i)*100*ms, 1.5, calm, 0) },
			want:  "0s confine 1-7\n1s confine 2-7\n",
		},
		{
			name: "violations take one CPU per ShrinkInterval down to MinCPUs, never none",
			n:    150,
			scene: func(i int) qos.Input {
				return cpusetScene(time.Duration(i)*100*ms, 0.5, 4*ms, -1) // no attribution: nothing judged
			},
			want: "0s confine 1-7\n1s confine 2-7\n2s confine 3-7\n3s confine 4-7\n4s confine 5-7\n5s confine 6-7\n6s confine 7\n",
		},
		{
			name: "calm gives a CPU back every GrowInterval after GrowAfter, up to the size guaranteed use allows",
			n:    400,
			scene: func(i int) qos.Input {
				if i < 20 {
					return cpusetScene(time.Duration(i)*100*ms, 0.5, 4*ms, -1)
				}
				return cpusetScene(time.Duration(i)*100*ms, 0.5, calm, -1)
			},
			// 0.5 cores × 1.25 -> one CPU stays free of revocable work.
			want: "0s confine 1-7\n1s confine 2-7\n7s confine 1-7\n",
		},
		{
			name: "a violation right after a CPU was given back takes it back; that size waits ProbeBackoff",
			n:    500,
			scene: func(i int) qos.Input {
				if i < 25 || i == 76 { // until 2.4 s, and at 7.6 s just after the probe at 7.5 s
					return cpusetScene(time.Duration(i)*100*ms, 0.5, 4*ms, -1)
				}
				return cpusetScene(time.Duration(i)*100*ms, 0.5, calm, -1)
			},
			want: "0s confine 1-7\n1s confine 2-7\n2s confine 3-7\n" +
				"7.5s confine 2-7\n7.6s confine 3-7\n" + // the probe and its undoing
				"37.6s confine 2-7\n42.6s confine 1-7\n", // after the 30 s backoff
		},
		{
			name: "no guaranteed work: every CPU back at once",
			edit: sized,
			n:    30,
			scene: func(i int) qos.Input {
				in := cpusetScene(time.Duration(i)*100*ms, 1.5, calm, 0)
				if i >= 20 {
					in.Containers = in.Containers[1:]
				}
				return in
			},
			want: "0s confine 1-7\n1s confine 2-7\n2s confine all\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := confineLoop(t, newCPUSet(t, "cpuset", tt.edit), tt.n, tt.scene)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestNeverWorseThanNothing: with eBPF attribution, a correction that does
// not reduce the delay revocable work causes guaranteed work is undone
// within EffectWindow (best-effort work gets its CPUs back) and not tried
// again for ProbeBackoff; one that does reduce it stays. Both mechanisms,
// each alone.
func TestNeverWorseThanNothing(t *testing.T) {
	cfg := qos.DefaultConfig()
	window := cfg.Interference.EffectWindow
	for _, mechanism := range []string{"cpuset", "interference"} {
		for _, helps := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, helps=%v", mechanism, helps), func(t *testing.T) {
				c := newCPUSet(t, mechanism, nil)
				cpus, limit := []int{0, 1, 2, 3, 4, 5, 6, 7}, 0.0
				var tightened, undone, lastBefore, lastTightened time.Duration
				for i := range 200 {
					now := time.Duration(i) * 100 * ms
					// Calm for a second, then batch-1 delays web-1 by 5 ms
					// per 100 ms; when corrections help, that delay and
					// web-1's run-queue p99 (its whole wait is not
					// measured) in proportion to the CPU revocable work
					// keeps.
					delay, p99 := time.Duration(0), 200*time.Microsecond
					if i >= 10 {
						share := 1.0
						if helps {
							share = float64(len(cpus)) / 8
							if limit > 0 {
								share = min(share, limit/4)
							}
						}
						delay = time.Duration(share * float64(5*ms))
						p99 = max(time.Duration(share*float64(4*ms)), 200*time.Microsecond)
					}
					in := cpusetScene(now, 0, p99, delay)
					in.RevocableCPUs, in.RevocableLimit = cpus, limit
					for _, corr := range c.Evaluate(in) {
						loosens := false
						switch corr.Kind {
						case qos.Confine:
							loosens = len(corr.CPUs) == 0 || len(corr.CPUs) > len(cpus)
							cpus = corr.CPUs
							if len(cpus) == 0 {
								cpus = []int{0, 1, 2, 3, 4, 5, 6, 7}
							}
						case qos.Throttle, qos.Unthrottle:
							loosens = corr.CPULimit == 0 || (limit > 0 && corr.CPULimit > limit)
							limit = corr.CPULimit
						case qos.Kill:
							continue
						}
						switch {
						case strings.Contains(corr.Reason, "did not help") && undone == 0:
							undone = now
						case !loosens && tightened == 0:
							tightened = now
						}
						if !loosens && undone == 0 {
							lastBefore = now
						}
						if !loosens {
							lastTightened = now
						}
					}
				}
				if tightened == 0 {
					t.Fatal("no correction")
				}
				if !helps {
					// Judged EffectWindow after the first correction, or half
					// of one after the last if it went on tightening.
					if undone == 0 || undone-tightened > max(window, lastBefore-tightened+window/2)+cfg.Interference.DecreaseInterval {
						t.Errorf("first correction at %v, last at %v, undone at %v: want undone within %v of the first, or %v of the last",
							tightened, lastBefore, undone, window, window/2)
					}
					if len(cpus) != 8 || limit != 0 {
						t.Errorf("at the end revocable work has %d CPUs and limit %v, want every CPU and no limit", len(cpus), limit)
					}
					if lastTightened > undone && lastTightened-undone < cfg.Interference.ProbeBackoff {
						t.Errorf("tightened again at %v, %v after undoing, before ProbeBackoff (%v)", lastTightened, lastTightened-undone, cfg.Interference.ProbeBackoff)
					}
				} else if undone != 0 {
					t.Errorf("a correction that helped was undone at %v", undone)
				}
			})
		}
	}
}

// TestCPUSetBeforeThrottling: in a set with both, CPUs are taken from
// revocable work first; the interference controller throttles only once
// revocable work is on its last CPU.
func TestCPUSetBeforeThrottling(t *testing.T) {
	got := confineLoop(t, newCPUSet(t, "interference,cpuset", nil), 90, func(i int) qos.Input {
		return cpusetScene(time.Duration(i)*100*ms, 0.5, 4*ms, -1)
	})
	want := "0s confine 1-7\n1s confine 2-7\n2s confine 3-7\n3s confine 4-7\n4s confine 5-7\n5s confine 6-7\n6s confine 7\n" +
		"6.1s throttle 0.5\n6.6s throttle 0.25\n7.1s throttle 0.16\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestCPUSetInvariants drives the cpuset controller through long random
// runs of violations, calm and changing guaranteed use, on nodes of 2, 4 and
// 8 CPUs, sized and not, without eBPF attribution and with it (random delay
// caused by revocable work and random whole waits, so that episodes are
// judged and undone for want of effect or of gain), and checks what it must
// never do: leave revocable work without a CPU (it never pauses it), or give
// it the last CPU free of it while guaranteed work uses any; and it only
// ever moves one CPU at a time, except to give every CPU back when
// guaranteed work is gone, or to undo an episode, which gives back only what
// the episode took (never more CPUs than revocable work had since the last
// CPU given back).
func TestCPUSetInvariants(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, headroom := range []float64{0, 1.25} {
			for _, attributed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%d CPUs, headroom %v, attributed %v", n, headroom, attributed), func(t *testing.T) {
					c := newCPUSet(t, "cpuset", func(cfg *qos.Config) { cfg.CPUSet.Headroom = headroom })
					rng := rand.New(rand.NewPCG(uint64(n), 7))
					all := make([]int, n)
					for i := range all {
						all[i] = i
					}
					cpus := all
					heldSinceGrowth := n // the most CPUs revocable work had since the last CPU given back
					guaranteed, violating, present := 0.5, false, true
					undos := 0
					for i := range 20000 {
						if rng.IntN(50) == 0 {
							violating = !violating
						}
						if rng.IntN(200) == 0 {
							guaranteed = float64(rng.IntN(2*n)) / 2
						}
						if rng.IntN(500) == 0 {
							present = !present
						}
						p99 := 200 * time.Microsecond
						if violating {
							p99 = 4 * ms
						}
						delay := time.Duration(-1)
						if attributed {
							delay = time.Duration(rng.IntN(6)) * ms
						}
						in := cpusetScene(time.Duration(i)*100*ms, guaranteed, p99, delay)
						in.Node.CPUs = float64(n)
						if attributed {
							in.Containers[0].RunqWait = time.Duration(4+rng.IntN(12)) * ms
						}
						if !present {
							in.Containers = in.Containers[1:]
						}
						in.RevocableCPUs = cpus
						for _, corr := range c.Evaluate(in) {
							if corr.Kind != qos.Confine {
								continue
							}
							next := corr.CPUs
							if len(next) == 0 {
								next = all
							}
							usesCPU := present && guaranteed > 0.01
							undo := strings.Contains(corr.Reason, "did not help")
							switch {
							case len(next) == 0:
								t.Fatalf("%v: revocable work left without a CPU", in.Now.Sub(t0))
							case undo && len(next) > heldSinceGrowth:
								t.Fatalf("%v: an undo gave revocable work %d CPUs, more than the %d it had before: %v", in.Now.Sub(t0), len(next), heldSinceGrowth, corr)
							case undo:
								undos++
							case usesCPU && len(next) == n && len(cpus) < n:
								t.Fatalf("%v: revocable work given the last CPU while guaranteed work uses %v cores: %v", in.Now.Sub(t0), guaranteed, corr)
							case present && len(next) != len(cpus)+1 && len(next) != len(cpus)-1:
								t.Fatalf("%v: from %d to %d CPUs at once: %v", in.Now.Sub(t0), len(cpus), len(next), corr)
							}
							if !undo && len(next) > len(cpus) {
								heldSinceGrowth = len(next)
							}
							cpus = next
						}
					}
					if attributed && undos == 0 {
						t.Error("no episode was undone: the run did not exercise the undo")
					}
				})
			}
		}
	}
}

// TestUndoneWhenWorseWithoutViolation: a correction after which revocable
// work delays guaranteed work more is undone even when the violation itself
// has stopped (the server's p99 fell into the hold band): the verdict does
// not wait for a violation.
func TestUndoneWhenWorseWithoutViolation(t *testing.T) {
	for _, mechanism := range []string{"cpuset", "interference"} {
		t.Run(mechanism, func(t *testing.T) {
			c := newCPUSet(t, mechanism, nil)
			cpus, limit := []int{0, 1, 2, 3, 4, 5, 6, 7}, 0.0
			corrected, undone := time.Duration(0), time.Duration(0)
			for i := range 100 {
				now := time.Duration(i) * 100 * ms
				delay, p99 := time.Duration(0), 200*time.Microsecond
				switch {
				case i >= 10 && corrected == 0:
					delay, p99 = 5*ms, 4*ms
				case corrected > 0 && undone == 0:
					delay, p99 = 10*ms, 700*time.Microsecond // worse for it, yet no violation
				case undone > 0:
					delay, p99 = 5*ms, 700*time.Microsecond
				}
				in := cpusetScene(now, 0, p99, delay)
				in.RevocableCPUs, in.RevocableLimit = cpus, limit
				for _, corr := range c.Evaluate(in) {
					cpus, limit = applyToEight(corr, cpus, limit)
					if strings.Contains(corr.Reason, "did not help") {
						undone = now
					} else if corrected == 0 {
						corrected = now
					}
				}
			}
			if corrected == 0 || undone == 0 {
				t.Fatalf("corrected at %v, undone at %v: want the correction undone", corrected, undone)
			}
			if len(cpus) != 8 || limit != 0 {
				t.Errorf("after the undo: %d CPUs, limit %v; want every CPU and no limit", len(cpus), limit)
			}
			t.Logf("corrected at %v, undone at %v", corrected, undone)
		})
	}
}

// TestUndoneWhenWaitingMovesElsewhere: confining or throttling revocable
// work cuts the delay it causes, but the guaranteed work waits more in all
// (its threads crowd the CPUs left to them): waiting moved is not waiting
// saved, and the correction is undone.
func TestUndoneWhenWaitingMovesElsewhere(t *testing.T) {
	for _, mechanism := range []string{"cpuset", "interference"} {
		t.Run(mechanism, func(t *testing.T) {
			c := newCPUSet(t, mechanism, nil)
			cpus, limit := []int{0, 1, 2, 3, 4, 5, 6, 7}, 0.0
			var corrected, undone time.Duration
			for i := range 100 {
				now := time.Duration(i) * 100 * ms
				delay, wait, p99 := time.Duration(0), 5*ms, 200*time.Microsecond
				switch {
				case i >= 10 && corrected == 0:
					delay, wait, p99 = 5*ms, 10*ms, 4*ms
				case corrected > 0 && undone == 0:
					delay, wait, p99 = 500*time.Microsecond, 20*ms, 4*ms // less from revocable work, more in all
				case undone > 0:
					delay, wait, p99 = 5*ms, 10*ms, 700*time.Microsecond
				}
				in := cpusetScene(now, 0, p99, delay)
				in.Containers[0].RunqWait = wait
				in.RevocableCPUs, in.RevocableLimit = cpus, limit
				for _, corr := range c.Evaluate(in) {
					cpus, limit = applyToEight(corr, cpus, limit)
					switch {
					case strings.Contains(corr.Reason, "did not help"):
						undone = now
						if !strings.Contains(corr.Reason, "in all") {
							t.Errorf("undone for another reason: %v", corr)
						}
					case corrected == 0:
						corrected = now
					}
				}
			}
			if corrected == 0 || undone == 0 {
				t.Fatalf("corrected at %v, undone at %v: want the correction undone", corrected, undone)
			}
			if len(cpus) != 8 || limit != 0 {
				t.Errorf("after the undo: %d CPUs, limit %v; want every CPU and no limit", len(cpus), limit)
			}
		})
	}
}

// applyToEight applies a correction's CPU set or limit to the revocable
// subtree of an eight-CPU node (an empty set is every CPU).
func applyToEight(corr qos.Correction, cpus []int, limit float64) ([]int, float64) {
	switch corr.Kind {
	case qos.Confine:
		cpus = corr.CPUs
		if len(cpus) == 0 {
			cpus = []int{0, 1, 2, 3, 4, 5, 6, 7}
		}
	case qos.Throttle, qos.Unthrottle:
		limit = corr.CPULimit
	}
	return cpus, limit
}

// TestJudgedByCost: a correction stays only if guaranteed work waits less
// in all, not only behind revocable work. Batch-1 delays web-1 from 1 s;
// the first correction cuts that delay tenfold in every case, and web-1's
// whole wait (or, where it is not measured, its run-queue p99) falls with
// it or does not. One that does not is undone within EffectWindow and a
// decrease interval: revocable work gets every CPU back and no limit, no
// container is killed for it (a kill would not help either), and neither
// mechanism tightens again within ProbeBackoff although the violations
// come back with the CPU.
func TestJudgedByCost(t *testing.T) {
	cfg := qos.DefaultConfig()
	type signals struct{ delay, wait, p99 time.Duration } // per 100 ms; wait 0: not measured
	tests := []struct {
		name      string
		violation signals // from 1 s while revocable work has every CPU and no limit
		corrected signals // while it has fewer or a limit
		undone    bool
	}{
		{
			name:      "attributed delay falls, whole wait does not: undone",
			violation: signals{5 * ms, 10 * ms, 4 * ms},
			corrected: signals{500 * time.Microsecond, 10 * ms, 4 * ms},
			undone:    true,
		},
		{
			name:      "attributed delay falls, whole wait falls by less than MinWaitGain: undone",
			violation: signals{5 * ms, 10 * ms, 4 * ms},
			corrected: signals{500 * time.Microsecond, 9500 * time.Microsecond, 700 * time.Microsecond},
			undone:    true,
		},
		{
			name:      "both fall: kept",
			violation: signals{5 * ms, 10 * ms, 4 * ms},
			corrected: signals{500 * time.Microsecond, 6 * ms, 700 * time.Microsecond},
		},
		{
			name:      "whole wait not measured, run-queue p99 does not fall: undone",
			violation: signals{5 * ms, 0, 4 * ms},
			corrected: signals{500 * time.Microsecond, 0, 4 * ms},
			undone:    true,
		},
		{
			name:      "whole wait not measured, run-queue p99 falls: kept",
			violation: signals{5 * ms, 0, 4 * ms},
			corrected: signals{500 * time.Microsecond, 0, 700 * time.Microsecond},
		},
	}
	for _, mechanism := range []string{"cpuset", "interference", "cpuset,interference"} {
		for _, tt := range tests {
			t.Run(mechanism+": "+tt.name, func(t *testing.T) {
				c := newCPUSet(t, mechanism, nil)
				cpus, limit := []int{0, 1, 2, 3, 4, 5, 6, 7}, 0.0
				var corrected, undone, retightened time.Duration
				var kills []string
				for i := range 400 {
					now := time.Duration(i) * 100 * ms
					s := signals{0, 5 * ms, 200 * time.Microsecond}
					switch {
					case i >= 10 && (len(cpus) < 8 || limit > 0):
						s = tt.corrected
					case i >= 10:
						s = tt.violation
					}
					if tt.violation.wait == 0 {
						s.wait = 0
					}
					in := cpusetScene(now, 0.5, s.p99, s.delay)
					in.Containers[0].RunqWait = s.wait
					in.RevocableCPUs, in.RevocableLimit = cpus, limit
					for _, corr := range c.Evaluate(in) {
						if corr.Kind == qos.Kill {
							kills = append(kills, now.String()+" "+corr.String())
							continue
						}
						before := len(cpus)
						cpus, limit = applyToEight(corr, cpus, limit)
						tightens := corr.Kind == qos.Throttle || (corr.Kind == qos.Confine && len(cpus) < before)
						switch {
						case strings.Contains(corr.Reason, "did not help"):
							if undone == 0 {
								undone = now
								t.Logf("%v: %v", now, corr)
							}
						case corrected == 0:
							corrected = now
						case undone > 0 && tightens && retightened == 0:
							retightened = now
						}
					}
				}
				if corrected == 0 {
					t.Fatal("no correction")
				}
				if !tt.undone {
					if undone > 0 {
						t.Errorf("corrected at %v, undone at %v: want it kept", corrected, undone)
					}
					return
				}
				limitWithin := corrected + cfg.Interference.EffectWindow + cfg.Interference.DecreaseInterval
				if undone == 0 || undone > limitWithin {
					t.Fatalf("corrected at %v, undone at %v: want it undone by %v", corrected, undone, limitWithin)
				}
				if len(cpus) != 8 || limit != 0 {
					t.Errorf("after the undo: %d CPUs, limit %v; want every CPU and no limit", len(cpus), limit)
				}
				if len(kills) > 0 {
					t.Errorf("killed although the correction's cost, not its effect, failed: %v", kills)
				}
				if retightened > 0 && retightened-undone < cfg.Interference.ProbeBackoff {
					t.Errorf("undone at %v, tightened again at %v: want a ProbeBackoff (%v) first", undone, retightened, cfg.Interference.ProbeBackoff)
				}
			})
		}
	}
}

// TestVerdictWaitsForRevocableWork: revocable work frozen right after a
// correction (the benchmark freezes it every 2 s) makes guaranteed work
// wait less whatever the correction did; the verdict waits until it has
// run in three quarters of half an EffectWindow, and then finds that the
// correction bought nothing, and undoes it.
func TestVerdictWaitsForRevocableWork(t *testing.T) {
	cfg := qos.DefaultConfig()
	for _, mechanism := range []string{"cpuset", "interference"} {
		t.Run(mechanism, func(t *testing.T) {
			// Frozen from 1 s, when the correction comes, to 4 s.
			v := verdictScene(t, mechanism, 100, func(i int) bool { return i < 40 }, false)
			// The sample at 4 s, the first of revocable work running again,
			// covers the 100 ms before it.
			resumed := 4*time.Second - 100*ms
			if v.corrected == 0 || !strings.Contains(v.reason, "did not help") ||
				v.undone < resumed+cfg.Interference.EffectWindow*3/8 || v.undone > resumed+cfg.Interference.EffectWindow {
				t.Fatalf("corrected at %v, undone at %v (%q): want it judged once revocable work ran for 3/4 of half an EffectWindow after %v, and undone as not having helped",
					v.corrected, v.undone, v.reason, resumed)
			}
			if len(v.cpus) != 8 || v.limit != 0 {
				t.Errorf("after the undo: %d CPUs, limit %v; want every CPU and no limit", len(v.cpus), v.limit)
			}
		})
	}
}

// verdict is what verdictScene saw: when the correction came and when it
// was undone (0: never), the undo's reason, and the revocable CPUs and
// limit at the end.
type verdict struct {
	corrected, undone time.Duration
	reason            string
	cpus              []int
	limit             float64
}

// verdictScene runs mechanism for n samples of 100 ms of a scene in which,
// from 1 s, revocable work causes a violation; once corrected, the delay
// it causes falls while guaranteed work waits as much in all (the
// correction buys nothing), except in the samples where idle(i) says
// revocable work stands still: then guaranteed work waits as when calm
// (its p99 stays high with frozenP99). Nothing may be killed.
func verdictScene(t *testing.T, mechanism string, n int, idle func(i int) bool, frozenP99 bool) verdict {
	t.Helper()
	c := newCPUSet(t, mechanism, nil)
	v := verdict{cpus: []int{0, 1, 2, 3, 4, 5, 6, 7}}
	for i := range n {
		now := time.Duration(i) * 100 * ms
		delay, wait, p99, beCPU := time.Duration(0), 5*ms, 200*time.Microsecond, 2.0
		constrained := len(v.cpus) < 8 || v.limit > 0
		switch {
		case i >= 10 && constrained && idle(i):
			delay, wait, beCPU = 0, 5*ms, 0
			if frozenP99 {
				p99 = 4 * ms
			}
		case i >= 10 && constrained:
			delay, wait, p99 = 500*time.Microsecond, 10*ms, 700*time.Microsecond
		case i >= 10:
			delay, wait, p99 = 5*ms, 10*ms, 4*ms
		}
		in := cpusetScene(now, 0.5, p99, delay)
		in.Containers[0].RunqWait = wait
		in.Containers[1].CPU, in.Containers[2].CPU = beCPU/2, beCPU/2
		in.RevocableCPUs, in.RevocableLimit = v.cpus, v.limit
		for _, corr := range c.Evaluate(in) {
			v.cpus, v.limit = applyToEight(corr, v.cpus, v.limit)
			if corr.Kind == qos.Kill {
				t.Fatalf("%v: %s: nothing should be killed", now, corr.Reason)
			}
			switch {
			case strings.Contains(corr.Reason, "undone for") && v.undone == 0:
				v.undone, v.reason = now, corr.Reason
			case v.corrected == 0:
				v.corrected = now
			}
		}
	}
	return v
}

// TestVerdictOnIntermittentWork: revocable work that stands still now and
// then is still judged. In the scene of TestVerdictWaitsForRevocableWork,
// the correction cuts the delay revocable work causes while guaranteed work
// waits as much in all (it bought nothing); revocable work is idle in some
// samples. Work idle in one sample of eight is judged on the samples where
// it ran, like work that never pauses; work idle more often, or frozen
// from the correction on while guaranteed work still waits, is judged (or,
// having never run, given its CPU back) at the verdict's deadline, three
// EffectWindows after the correction. In every case the correction is
// undone and revocable work has every CPU and no limit at the end.
func TestVerdictOnIntermittentWork(t *testing.T) {
	cfg := qos.DefaultConfig()
	window := cfg.Interference.EffectWindow
	tests := []struct {
		name      string
		idle      func(i int) bool // revocable work idle in sample i, once corrected
		within    time.Duration    // undone at most this long after the correction
		verdict   string           // in the undo's reason
		frozenP99 bool             // guaranteed work's p99 stays high while it is idle
	}{
		{name: "idle one sample in eight", idle: func(i int) bool { return i%8 == 0 },
			within: window + window/2, verdict: "did not help"},
		{name: "idle one sample in three", idle: func(i int) bool { return i%3 == 0 },
			within: 3*window + window/2, verdict: "did not help"},
		{name: "frozen from the correction on", idle: func(int) bool { return true },
			within: 3*window + window/2, verdict: "could not be judged", frozenP99: true},
	}
	for _, tt := range tests {
		for _, mechanism := range []string{"cpuset", "interference"} {
			t.Run(tt.name+"/"+mechanism, func(t *testing.T) {
				v := verdictScene(t, mechanism, 600, tt.idle, tt.frozenP99)
				if v.corrected == 0 || v.undone == 0 || v.undone-v.corrected > tt.within {
					t.Fatalf("corrected at %v, undone at %v: want it undone within %v", v.corrected, v.undone, tt.within)
				}
				if !strings.Contains(v.reason, tt.verdict) {
					t.Errorf("undone with %q; want %q", v.reason, tt.verdict)
				}
				t.Logf("%v: %s", v.undone, v.reason)
				if len(v.cpus) != 8 || v.limit != 0 {
					t.Errorf("at the end: %d CPUs, limit %v; want every CPU and no limit", len(v.cpus), v.limit)
				}
			})
		}
	}
}

// TestVerdictAtALowFloor: the CPU revocable work must use for a sample to
// count as running is at most half the interference controller's floor,
// so work throttled to a floor set below the default 0.05 core is judged
// (here: before the verdict's deadline, as not having helped).
func TestVerdictAtALowFloor(t *testing.T) {
	cfg := qos.DefaultConfig()
	window := cfg.Interference.EffectWindow
	tests := []struct {
		name   string
		floor  float64 // FloorCores (FloorFraction 0)
		beCPU  float64 // what revocable work uses once corrected
		within time.Duration
	}{
		{name: "floor 0.04 core, work at the floor", floor: 0.04, beCPU: 0.04, within: 2 * window},
		{name: "floor 0.02 core, work at the floor", floor: 0.02, beCPU: 0.02, within: 2 * window},
		{name: "default floor, work at 0.06 core", floor: 0.1, beCPU: 0.06, within: 2 * window},
	}
	for _, tt := range tests {
		for _, mechanism := range []string{"cpuset", "interference"} {
			t.Run(tt.name+"/"+mechanism, func(t *testing.T) {
				c := newCPUSet(t, mechanism, func(cfg *qos.Config) {
					cfg.Interference.FloorCores, cfg.Interference.FloorFraction = tt.floor, 0
				})
				cpus, limit := []int{0, 1, 2, 3, 4, 5, 6, 7}, 0.0
				var corrected, undone time.Duration
				var reason string
				for i := range 100 {
					now := time.Duration(i) * 100 * ms
					delay, wait, p99, beCPU := time.Duration(0), 5*ms, 200*time.Microsecond, 2.0
					constrained := len(cpus) < 8 || limit > 0
					switch {
					case i >= 10 && constrained:
						delay, wait, p99, beCPU = 500*time.Microsecond, 10*ms, 700*time.Microsecond, tt.beCPU
					case i >= 10:
						delay, wait, p99 = 5*ms, 10*ms, 4*ms
					}
					in := cpusetScene(now, 0.5, p99, delay)
					in.Containers[0].RunqWait = wait
					in.Containers[1].CPU, in.Containers[2].CPU = beCPU/2, beCPU/2
					in.RevocableCPUs, in.RevocableLimit = cpus, limit
					for _, corr := range c.Evaluate(in) {
						cpus, limit = applyToEight(corr, cpus, limit)
						switch {
						case strings.Contains(corr.Reason, "undone for") && undone == 0:
							undone, reason = now, corr.Reason
						case corrected == 0:
							corrected = now
						}
					}
				}
				if corrected == 0 || undone == 0 || undone-corrected > tt.within {
					t.Fatalf("corrected at %v, undone at %v: want it undone within %v", corrected, undone, tt.within)
				}
				if !strings.Contains(reason, "did not help") {
					t.Errorf("undone with %q; want it judged (did not help)", reason)
				}
			})
		}
	}
}

// TestBackoffWearsOff: the backoff after corrections that did not help
// doubles up to ProbeBackoffMax while they keep failing, and goes back to
// ProbeBackoff once guaranteed work has been calm for ProbeBackoffMax, not
// before. Each correction here cuts the delay revocable work causes while
// guaranteed work waits as much in all, and is undone.
func TestBackoffWearsOff(t *testing.T) {
	short := func(cfg *qos.Config) {
		cfg.CPUSet.ProbeBackoff, cfg.CPUSet.ProbeBackoffMax = 2*time.Second, 8*time.Second
		cfg.Interference.ProbeBackoff, cfg.Interference.ProbeBackoffMax = 2*time.Second, 8*time.Second
	}
	tests := []struct {
		calm time.Duration // between two spells of violations
		want string        // the backoff of the first undo after it
	}{
		{calm: 4 * time.Second, want: "undone for 8s"},
		{calm: 12 * time.Second, want: "undone for 2s"},
	}
	for _, tt := range tests {
		for _, mechanism := range []string{"cpuset", "interference"} {
			t.Run(fmt.Sprintf("calm %v/%s", tt.calm, mechanism), func(t *testing.T) {
				c := newCPUSet(t, mechanism, short)
				cpus, limit := []int{0, 1, 2, 3, 4, 5, 6, 7}, 0.0
				calmFrom := 40 * time.Second
				again := calmFrom + tt.calm
				var undos []string
				var after string
				for i := range int((again + 20*time.Second) / (100 * ms)) {
					now := time.Duration(i) * 100 * ms
					violating := now >= time.Second && (now < calmFrom || now >= again)
					delay, wait, p99 := time.Duration(0), 5*ms, 200*time.Microsecond
					constrained := len(cpus) < 8 || limit > 0
					switch {
					case violating && constrained:
						delay, wait, p99 = 500*time.Microsecond, 10*ms, 700*time.Microsecond
					case violating:
						delay, wait, p99 = 5*ms, 10*ms, 4*ms
					}
					in := cpusetScene(now, 0.5, p99, delay)
					in.Containers[0].RunqWait = wait
					in.RevocableCPUs, in.RevocableLimit = cpus, limit
					for _, corr := range c.Evaluate(in) {
						cpus, limit = applyToEight(corr, cpus, limit)
						if !strings.Contains(corr.Reason, "undone for") {
							continue
						}
						undos = append(undos, fmt.Sprintf("%v: %s", now, corr.Reason[strings.Index(corr.Reason, "undone for"):]))
						if now >= again && after == "" {
							after = corr.Reason
						}
					}
				}
				if len(undos) < 4 || !strings.HasSuffix(undos[3], "undone for 8s") {
					t.Fatalf("undos %q: want at least 4 before the calm, the 4th at ProbeBackoffMax", undos)
				}
				if !strings.HasSuffix(after, tt.want) {
					t.Errorf("after %v calm: %q; want %q (undos %q)", tt.calm, after, tt.want, undos)
				}
			})
		}
	}
}
