package profiles

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// outranking returns n hosts, not in the fleet of hosts(10), that web's
// rollouts choose before any of hosts: newcomers a wave chosen afresh
// would take instead of them.
func outranking(n int, hosts []string) []string {
	best := uint64(1<<64 - 1)
	for _, h := range hosts {
		best = min(best, rank("web", h))
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		if h := fmt.Sprintf("n%d", i); rank("web", h) < best {
			out = append(out, h)
		}
	}
	return out
}

// joined returns fleet with capable agents of hosts added, running p's
// stable version.
func joined(p *Profile, fleet []Signals, hosts []string) []Signals {
	fleet = slices.Clone(fleet)
	for _, h := range hosts {
		fleet = append(fleet, Signals{Host: h, Profile: "web", Version: p.Stable.Number, Reported: true, ShadowCapable: true})
	}
	return fleet
}

// without returns fleet without the agents of hosts.
func without(fleet []Signals, hosts []string) []Signals {
	return slices.DeleteFunc(slices.Clone(fleet), func(s Signals) bool { return slices.Contains(hosts, s.Host) })
}

// TestShadowStageFleetChanges: the first live wave starts on the agents
// the candidate was tested on in shadow, a stage whose agents all left
// starts again on others, and the stage is bounded (#29 item 5).
func TestShadowStageFleetChanges(t *testing.T) {
	t.Parallel()
	soaked := t0.Add(5 * time.Minute)
	limit := t0.Add(MaxShadowStageSoaks * 5 * time.Minute)
	good := agentState{shadowScored: 2000, shadowViolations: 20, activeScored: 2000, activeViolations: 20}
	for _, tc := range []struct {
		name string
		// steps are Step's calls in order: at when, on the fleet fleet
		// returns; the last one's outcome is checked.
		steps []func(p *Profile) (time.Time, []Signals)
		want  Outcome
		// wantStage and wantReason are the rollout's after the last step;
		// wantHosts checks its wave 1 or shadow hosts (given the shadow
		// stage's first agents).
		wantStage  Stage
		wantReason string
		wantHosts  func(t *testing.T, first []string, r *Rollout)
	}{
		{
			name: "wave 1 starts on the tested agents though newcomers outrank them",
			steps: []func(p *Profile) (time.Time, []Signals){func(p *Profile) (time.Time, []Signals) {
				return soaked, joined(p, fleetOf(p, 10, shadowing(p, good)), outranking(8, p.Rollout.ShadowHosts))
			}},
			want: ShadowPassed, wantStage: StageLive, wantReason: "shadow stage passed on 2 agents",
			wantHosts: func(t *testing.T, first []string, r *Rollout) {
				// 18 agents, a 0.2 wave: 4, the 2 tested ones among them.
				if len(r.Hosts) != 4 {
					t.Errorf("wave 1 on %v, want 4 agents", r.Hosts)
				}
				for _, h := range first {
					if !slices.Contains(r.Hosts, h) {
						t.Errorf("wave 1 on %v leaves out %s, an agent the candidate was tested on in shadow", r.Hosts, h)
					}
				}
			},
		},
		{
			name: "wave 1 keeps the tested agents still present when some left",
			steps: []func(p *Profile) (time.Time, []Signals){func(p *Profile) (time.Time, []Signals) {
				h := p.Rollout.ShadowHosts
				st := shadowing(p, good)
				st[h[0]] = agentState{capable: true, shadowing: true, shadowScored: 1000, shadowViolations: 10, activeScored: 1000, activeViolations: 10}
				return soaked, without(joined(p, fleetOf(p, 10, st), outranking(8, h)), h[1:])
			}},
			want: ShadowPassed, wantStage: StageLive, wantReason: "shadow stage passed on 1 agents",
			wantHosts: func(t *testing.T, first []string, r *Rollout) {
				if !slices.Contains(r.Hosts, first[0]) || slices.Contains(r.Hosts, first[1]) || len(r.Hosts) != 4 {
					t.Errorf("wave 1 on %v, want 4 agents with %s (tested, present) and without %s (left)", r.Hosts, first[0], first[1])
				}
			},
		},
		{
			name: "every agent of the stage left: the stage starts again on others",
			steps: []func(p *Profile) (time.Time, []Signals){func(p *Profile) (time.Time, []Signals) {
				return t0.Add(3 * time.Minute), without(fleetOf(p, 10, nil), p.Rollout.ShadowHosts)
			}},
			want: Unchanged, wantStage: StageShadow, wantReason: "shadow stage on 2 agents soaking until 2026-11-27T12:08:00Z",
			wantHosts: func(t *testing.T, first []string, r *Rollout) {
				if len(r.ShadowHosts) != 2 || slices.ContainsFunc(r.ShadowHosts, func(h string) bool { return slices.Contains(first, h) }) {
					t.Errorf("shadow hosts %v, want 2 agents of the fleet, none of %v (left)", r.ShadowHosts, first)
				}
				if !r.ShadowStarted.Equal(t0.Add(3 * time.Minute)) {
					t.Errorf("shadow stage started %v, want again at %v", r.ShadowStarted, t0.Add(3*time.Minute))
				}
			},
		},
		{
			name: "the re-chosen agents soak from their own start",
			steps: []func(p *Profile) (time.Time, []Signals){
				func(p *Profile) (time.Time, []Signals) {
					return t0.Add(3 * time.Minute), without(fleetOf(p, 10, nil), p.Rollout.ShadowHosts)
				},
				func(p *Profile) (time.Time, []Signals) {
					// Soaked from the first start, not from the second.
					return t0.Add(7 * time.Minute), fleetOf(p, 10, shadowing(p, good))
				},
			},
			want: Unchanged, wantStage: StageShadow, wantReason: "soaking until 2026-11-27T12:08:00Z",
		},
		{
			name: "the re-chosen agents pass the stage after their soak",
			steps: []func(p *Profile) (time.Time, []Signals){
				func(p *Profile) (time.Time, []Signals) {
					return t0.Add(3 * time.Minute), without(fleetOf(p, 10, nil), p.Rollout.ShadowHosts)
				},
				func(p *Profile) (time.Time, []Signals) {
					return t0.Add(8 * time.Minute), fleetOf(p, 10, shadowing(p, good))
				},
			},
			want: ShadowPassed, wantStage: StageLive, wantReason: "shadow stage passed on 2 agents",
		},
		{
			name: "too few estimates scored waits until the bound",
			steps: []func(p *Profile) (time.Time, []Signals){func(p *Profile) (time.Time, []Signals) {
				return limit.Add(-time.Second), fleetOf(p, 10, shadowing(p, agentState{shadowScored: 100, activeScored: 100}))
			}},
			want: Unchanged, wantStage: StageShadow, wantReason: "waits for 1000 scored estimates",
		},
		{
			name: "too few estimates scored at the bound: live waves, saying so",
			steps: []func(p *Profile) (time.Time, []Signals){func(p *Profile) (time.Time, []Signals) {
				return limit, fleetOf(p, 10, shadowing(p, agentState{shadowScored: 100, activeScored: 100}))
			}},
			want: ShadowPassed, wantStage: StageLive,
			wantReason: "shadow stage ended unjudged after 15m0s (3 times shadow_soak) with 200 and 200 of 1000 scored estimates of version 2 in shadow and of version 1 live on 2 agents: judged on live signals only",
			wantHosts: func(t *testing.T, first []string, r *Rollout) {
				if !slices.Equal(r.Hosts, first) {
					t.Errorf("wave 1 on %v, want the shadow stage's %v", r.Hosts, first)
				}
			},
		},
		{
			name: "agents that keep leaving cannot hold the stage past its bound",
			steps: []func(p *Profile) (time.Time, []Signals){
				func(p *Profile) (time.Time, []Signals) {
					return limit.Add(-time.Minute), without(fleetOf(p, 10, nil), p.Rollout.ShadowHosts)
				},
				func(p *Profile) (time.Time, []Signals) {
					return limit, fleetOf(p, 10, nil)
				},
			},
			want: ShadowPassed, wantStage: StageLive, wantReason: "shadow stage ended unjudged after 15m0s",
		},
		{
			name: "a worse shadow still rolls back at the bound",
			steps: []func(p *Profile) (time.Time, []Signals){func(p *Profile) (time.Time, []Signals) {
				return limit, fleetOf(p, 10, shadowing(p, agentState{shadowScored: 2000, shadowViolations: 100, activeScored: 2000, activeViolations: 20}))
			}},
			want: RolledBack, wantStage: StageShadow, wantReason: "violation rate 5.00% of version 2 in shadow",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := shadowStarted(t)
			first := slices.Clone(p.Rollout.ShadowHosts)
			var got Outcome
			for _, step := range tc.steps {
				at, fleet := step(p)
				p, got = Step(p, at, fleet)
			}
			r := p.Rollout
			if got != tc.want || r.Stage != tc.wantStage || !strings.Contains(r.Reason, tc.wantReason) {
				t.Fatalf("Step = %v, stage %v, reason %q; want %v, %v, %q", got, r.Stage, r.Reason, tc.want, tc.wantStage, tc.wantReason)
			}
			if tc.wantHosts != nil {
				tc.wantHosts(t, first, r)
			}
			if got == ShadowPassed {
				if last := p.History[len(p.History)-1]; last.By != Coordinator || !strings.Contains(last.What, tc.wantReason) {
					t.Errorf("last change %+v, want the coordinator's, saying %q", last, tc.wantReason)
				}
			}
		})
	}
}

// TestShadowStageRechosenAudited: re-choosing the stage's agents is in the
// audit trail, naming those that left and those chosen.
func TestShadowStageRechosenAudited(t *testing.T) {
	t.Parallel()
	p := shadowStarted(t)
	first := slices.Clone(p.Rollout.ShadowHosts)
	next, _ := Step(p, t0.Add(time.Minute), without(fleetOf(p, 10, nil), first))
	last := next.History[len(next.History)-1]
	want := fmt.Sprintf("every agent of the shadow stage left (%s); shadow stage again on %s", strings.Join(first, ", "), strings.Join(next.Rollout.ShadowHosts, ", "))
	if last.By != Coordinator || !strings.Contains(last.What, want) {
		t.Errorf("last change %+v, want the coordinator's %q", last, want)
	}
	// Nothing left to re-choose from: the stage keeps its agents.
	if again, _ := Step(next, t0.Add(2*time.Minute), nil); !slices.Equal(again.Rollout.ShadowHosts, next.Rollout.ShadowHosts) {
		t.Errorf("with no fleet, shadow hosts %v, want %v kept", again.Rollout.ShadowHosts, next.Rollout.ShadowHosts)
	}
}
