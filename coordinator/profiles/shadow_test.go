package profiles

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// shadowPolicy is policy() with a 5-minute shadow stage on the first
// wave's agents (1 of 10 agents with waves 0.1, 0.5, 1; 2 with 0.2).
func shadowPolicy() Policy {
	p := policy()
	p.Waves = []float64{0.2, 0.5, 1}
	p.ShadowSoak = 5 * time.Minute
	return p
}

// agentState is one agent's signals in a shadow scenario.
type agentState struct {
	capable    bool
	unreported bool
	// shadowing says the agent runs the version assigned to it in shadow;
	// shadowScored etc. are its counters.
	shadowing           bool
	refuseShadow        bool
	shadowScored        uint64
	shadowViolations    float64
	activeScored        uint64
	activeViolations    float64
	liveScored          uint64
	liveViolations      float64
	runsAssignedVersion bool // runs what Assign says (else the stable version)
}

// fleetOf returns the signals of hosts(n) for p, every agent running the
// stable version (or its assignment with runsAssignedVersion) with its
// shadow assignment and counters from states (by host; missing: a capable
// agent that has not switched its shadow yet).
func fleetOf(p *Profile, n int, states map[string]agentState) []Signals {
	var out []Signals
	for _, h := range hosts(n) {
		st, ok := states[h]
		if !ok {
			st = agentState{capable: true}
		}
		s := Signals{Host: h, Profile: "web", Version: p.Stable.Number, Reported: !st.unreported, ShadowCapable: st.capable && !st.unreported,
			Scored: st.liveScored, Violations: st.liveViolations}
		if st.runsAssignedVersion {
			s.Version = Assign(p, h).Version.Number
		}
		if a, want := AssignShadow(p, h); want && s.ShadowCapable {
			switch {
			case st.refuseShadow:
				s.Shadow.Refused = a.Version.Number
			case st.shadowing:
				s.Shadow = ShadowSignals{Profile: a.Profile, Version: a.Version.Number, Scored: st.shadowScored, Violations: st.shadowViolations,
					ActiveScored: st.activeScored, ActiveViolations: st.activeViolations}
			}
		}
		out = append(out, s)
	}
	return out
}

// shadowStarted is a rollout of version 2 of web with shadowPolicy on 10
// agents, every one of them able to shadow: its shadow stage runs on 2.
func shadowStarted(t *testing.T) *Profile {
	t.Helper()
	p := applied(t)
	p, err := StartRollout(p, "estimator-target-violation: 0.05\n", shadowPolicy(), "bob", t0, fleetOf(p, 10, nil), accept)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Rollout
	if r.Stage != StageShadow || len(r.ShadowHosts) != 2 || len(r.Hosts) != 0 {
		t.Fatalf("started: stage %v, shadow hosts %v, hosts %v; want the shadow stage on 2 agents and none live", r.Stage, r.ShadowHosts, r.Hosts)
	}
	return p
}

// shadowing is the state of the shadow stage's agents of p: running the
// candidate in shadow with these counters.
func shadowing(p *Profile, st agentState) map[string]agentState {
	m := map[string]agentState{}
	for _, h := range p.Rollout.ShadowHosts {
		st.capable, st.shadowing = true, true
		m[h] = st
	}
	return m
}

func TestShadowStage(t *testing.T) {
	t.Parallel()
	soaked := t0.Add(5 * time.Minute)
	for _, tc := range []struct {
		name string
		at   time.Time
		// states gives the agents' signals; nil: from the shadow hosts.
		states      func(p *Profile) map[string]agentState
		want        Outcome
		wantStage   Stage
		wantReason  string
		wantWithout []string
	}{
		{
			name: "worse shadow rolls back before the soak ends",
			at:   t0.Add(time.Minute),
			states: func(p *Profile) map[string]agentState {
				return shadowing(p, agentState{shadowScored: 2000, shadowViolations: 100, activeScored: 2000, activeViolations: 20})
			},
			want: RolledBack, wantStage: StageShadow,
			wantReason: "violation rate 5.00% of version 2 in shadow, 1.00% of version 1 live on the same 2 agents and inputs (tolerance 0.50 points; 4000 and 4000 estimates scored)",
		},
		{
			name: "within the tolerance after the soak passes to wave 1",
			at:   soaked,
			states: func(p *Profile) map[string]agentState {
				return shadowing(p, agentState{shadowScored: 2000, shadowViolations: 28, activeScored: 2000, activeViolations: 20})
			},
			want: ShadowPassed, wantStage: StageLive,
			wantReason: "shadow stage passed on 2 agents: violation rate 1.40% in shadow, 1.00% of version 1 live",
		},
		{
			name: "better shadow soaking",
			at:   soaked.Add(-time.Second),
			states: func(p *Profile) map[string]agentState {
				return shadowing(p, agentState{shadowScored: 2000, shadowViolations: 0, activeScored: 2000, activeViolations: 20})
			},
			want: Unchanged, wantStage: StageShadow, wantReason: "shadow stage on 2 agents soaking until 2026-11-27T12:05:00Z",
		},
		{
			name: "too few scored after the soak waits",
			at:   soaked.Add(5 * time.Minute), // within MaxShadowStageSoaks
			states: func(p *Profile) map[string]agentState {
				// 998 scored in shadow: a 10% rate says nothing yet.
				return shadowing(p, agentState{shadowScored: 499, shadowViolations: 50, activeScored: 2000, activeViolations: 20})
			},
			want: Unchanged, wantStage: StageShadow,
			wantReason: "shadow stage waits for 1000 scored estimates of version 2 in shadow and of version 1 live on the same agents (has 998 and 4000)",
		},
		{
			name: "an agent refusing the candidate in shadow rolls back",
			at:   t0.Add(time.Second),
			states: func(p *Profile) map[string]agentState {
				m := shadowing(p, agentState{})
				m[p.Rollout.ShadowHosts[1]] = agentState{capable: true, refuseShadow: true}
				return m
			},
			want: RolledBack, wantStage: StageShadow, wantReason: "refused version 2 in its shadow stage",
		},
		{
			name: "no agent of the stage can shadow: live waves at once",
			at:   t0.Add(time.Second),
			states: func(p *Profile) map[string]agentState {
				m := map[string]agentState{}
				for _, h := range p.Rollout.ShadowHosts {
					m[h] = agentState{capable: false}
				}
				return m
			},
			want: ShadowPassed, wantStage: StageLive, wantReason: "no agent of the shadow stage can run shadows",
			wantWithout: []string{"h0", "h1"},
		},
		{
			name: "an agent that has not reported yet may still shadow",
			at:   t0.Add(time.Second),
			states: func(p *Profile) map[string]agentState {
				return map[string]agentState{p.Rollout.ShadowHosts[0]: {capable: false}, p.Rollout.ShadowHosts[1]: {unreported: true}}
			},
			want: Unchanged, wantStage: StageShadow, wantReason: "soaking", wantWithout: []string{"h0"},
		},
		{
			name: "one agent cannot shadow: judged on the other",
			at:   t0.Add(time.Second),
			states: func(p *Profile) map[string]agentState {
				h := p.Rollout.ShadowHosts
				return map[string]agentState{h[0]: {capable: false},
					h[1]: {capable: true, shadowing: true, shadowScored: 1000, shadowViolations: 50, activeScored: 1000, activeViolations: 10}}
			},
			want: RolledBack, wantStage: StageShadow,
			wantReason: "5.00% of version 2 in shadow, 1.00% of version 1 live on the same 1 agents", wantWithout: []string{"h0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := shadowStarted(t)
			fleet := fleetOf(p, 10, tc.states(p))
			next, got := Step(p, tc.at, fleet)
			if got != tc.want {
				t.Fatalf("Step = %v (%q), want %v", got, next.Rollout.Reason, tc.want)
			}
			r := next.Rollout
			if r.Stage != tc.wantStage || !strings.Contains(r.Reason, tc.wantReason) {
				t.Errorf("stage %v, reason %q; want %v, %q", r.Stage, r.Reason, tc.wantStage, tc.wantReason)
			}
			if !slices.Equal(r.Paired.WithoutShadows, tc.wantWithout) {
				t.Errorf("without shadows %v, want %v", r.Paired.WithoutShadows, tc.wantWithout)
			}
			if p.Rollout.Stage != StageShadow || p.Rollout.State != RolloutInProgress {
				t.Error("Step changed the profile it was given")
			}
			// No agent ever runs the candidate live in the shadow stage or
			// after a rollback there.
			if r.Stage == StageShadow {
				for _, h := range hosts(10) {
					if v := Assign(next, h).Version.Number; v != 1 {
						t.Errorf("%s assigned version %d in the shadow stage, want the stable 1", h, v)
					}
				}
			}
			switch got {
			case RolledBack:
				if last := next.History[len(next.History)-1]; last.By != Coordinator || !strings.Contains(last.What, "rolled back in its shadow stage (never applied)") {
					t.Errorf("last change %+v, want the coordinator's rollback in the shadow stage", last)
				}
				for _, h := range hosts(10) {
					if _, ok := AssignShadow(next, h); ok {
						t.Errorf("%s still assigned a shadow after the rollback", h)
					}
				}
			case ShadowPassed:
				// Wave 1 is the shadow stage's agents, now running the
				// candidate live and the stable version in shadow.
				if !slices.Equal(r.Hosts, p.Rollout.ShadowHosts) || !r.WaveStarted.Equal(tc.at) || r.Wave != 0 {
					t.Errorf("wave 1: hosts %v from %v (wave %d), want %v from %v", r.Hosts, r.WaveStarted, r.Wave, p.Rollout.ShadowHosts, tc.at)
				}
				for _, h := range r.Hosts {
					if a, ok := AssignShadow(next, h); !ok || a.Version.Number != 1 || Assign(next, h).Version.Number != 2 {
						t.Errorf("%s: shadow %v (%v), live %d; want version 1 in shadow, 2 live", h, a.Version.Number, ok, Assign(next, h).Version.Number)
					}
				}
			}
		})
	}
}

// TestShadowStageSkippedWhenNoAgentCanShadow: when the first wave's agents
// all said they cannot shadow, the rollout starts live, saying so.
func TestShadowStageSkippedWhenNoAgentCanShadow(t *testing.T) {
	t.Parallel()
	p := applied(t)
	states := map[string]agentState{}
	for _, h := range hosts(10) {
		states[h] = agentState{capable: false}
	}
	next, err := StartRollout(p, "estimator-target-violation: 0.02\n", shadowPolicy(), "bob", t0, fleetOf(p, 10, states), accept)
	if err != nil {
		t.Fatal(err)
	}
	r := next.Rollout
	if r.Stage != StageLive || len(r.Hosts) != 2 || !strings.Contains(r.Reason, "no agent of the shadow stage can run shadows (h0, h1): judged on live signals only") {
		t.Errorf("stage %v, hosts %v, reason %q; want live wave 1 on 2 agents, saying why", r.Stage, r.Hosts, r.Reason)
	}
	if last := next.History[len(next.History)-1]; !strings.Contains(last.What, "judged on live signals only") {
		t.Errorf("audit %q does not say the shadow stage was skipped", last.What)
	}
}

// TestLiveWaveJudgedAgainstOwnShadow: in the live waves the updated agents
// shadow the previous version, and a candidate that violates more live
// than its agents' shadows of the previous version is rolled back, even
// while the comparison with the others cannot tell yet.
func TestLiveWaveJudgedAgainstOwnShadow(t *testing.T) {
	t.Parallel()
	p := shadowStarted(t)
	pass := shadowing(p, agentState{shadowScored: 2000, shadowViolations: 20, activeScored: 2000, activeViolations: 20})
	p, got := Step(p, t0.Add(5*time.Minute), fleetOf(p, 10, pass))
	if got != ShadowPassed {
		t.Fatalf("shadow stage: %v (%s)", got, p.Rollout.Reason)
	}
	at := t0.Add(7 * time.Minute)
	for _, tc := range []struct {
		name                           string
		liveScored, shadowScored       uint64
		liveViolations, shadowViolated float64
		want                           Outcome
		wantReason                     string
	}{
		{"worse than its own shadow", 1500, 1500, 60, 15, RolledBack,
			"violation rate 4.00% of version 2 live on the updated agents, 1.00% of version 1 in shadow on the same 2 agents and inputs"},
		{"within the tolerance", 1500, 1500, 22, 15, Unchanged, "soaking"},
		{"too few scored", 999, 1500, 100, 15, Unchanged, "soaking"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			states := map[string]agentState{}
			for _, h := range p.Rollout.Hosts {
				// The others (not chosen) have scored nothing: the
				// updated/others comparison cannot tell.
				states[h] = agentState{capable: true, shadowing: true, runsAssignedVersion: true,
					liveScored: tc.liveScored / 2, liveViolations: tc.liveViolations / 2,
					activeScored: tc.liveScored / 2, activeViolations: tc.liveViolations / 2,
					shadowScored: tc.shadowScored / 2, shadowViolations: tc.shadowViolated / 2}
			}
			next, got := Step(p, at, fleetOf(p, 10, states))
			if got != tc.want || !strings.Contains(next.Rollout.Reason, tc.wantReason) {
				t.Errorf("Step = %v (%q), want %v (%q)", got, next.Rollout.Reason, tc.want, tc.wantReason)
			}
			if pr := next.Rollout.Paired; pr.Agents != 2 || pr.Shadow.Scored != tc.shadowScored/2*2 {
				t.Errorf("paired %+v, want 2 agents' shadows of version 1", pr)
			}
		})
	}
}

func TestAssignShadow(t *testing.T) {
	t.Parallel()
	p := shadowStarted(t)
	in := p.Rollout.ShadowHosts[0]
	out := "h9" // not among the 2 of the shadow stage
	if slices.Contains(p.Rollout.ShadowHosts, out) {
		t.Fatalf("shadow hosts %v include %s", p.Rollout.ShadowHosts, out)
	}
	if a, ok := AssignShadow(p, in); !ok || a.Profile != "web" || a.Version.Number != 2 || a.Version.Settings != "estimator-target-violation: 0.05\n" {
		t.Errorf("shadow host: %+v %v, want version 2 of web", a, ok)
	}
	if _, ok := AssignShadow(p, out); ok {
		t.Errorf("%s is outside the shadow stage, yet assigned a shadow", out)
	}
	aborted, err := AbortRollout(p, "web", "alice", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := AssignShadow(aborted, in); ok {
		t.Error("a shadow assigned after the abort")
	}
	noShadows := applied(t)
	pol := shadowPolicy()
	pol.ShadowSoak = 0
	noShadows, err = StartRollout(noShadows, "estimator-target-violation: 0.02\n", pol, "bob", t0, fleetOf(noShadows, 10, nil), accept)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts(10) {
		if _, ok := AssignShadow(noShadows, h); ok {
			t.Errorf("%s assigned a shadow by a rollout without shadows", h)
		}
	}
	if _, ok := AssignShadow(nil, in); ok {
		t.Error("a shadow assigned without a profile")
	}
}
