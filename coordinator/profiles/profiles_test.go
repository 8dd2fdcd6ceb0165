package profiles

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// accept is a settings check that refuses only "bad".
func accept(s string) error {
	if strings.Contains(s, "bad") {
		return errors.New("--estimator-window: must be positive")
	}
	return nil
}

func hosts(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("h%d", i))
	}
	return out
}

// stableFleet is n agents running version v of web, each with scored
// estimates and violations.
func stableFleet(n int, v uint64, scored uint64, violations float64) []Signals {
	var out []Signals
	for _, h := range hosts(n) {
		out = append(out, Signals{Host: h, Profile: "web", Version: v, Scored: scored, Violations: violations})
	}
	return out
}

func applied(t *testing.T) *Profile {
	t.Helper()
	p, err := Apply(nil, "web", map[string]string{"tier": "web"}, "estimator-target-violation: 0.01\n", "alice", t0, accept)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wave describes the fleet's signals during a wave: what the updated
// agents (chosen and switched) and the others gained since the wave
// started.
type wave struct {
	updatedScored     uint64
	updatedViolations float64
	updatedP99        time.Duration
	othersScored      uint64
	othersViolations  float64
	othersP99         time.Duration
	refuse            bool // the chosen agents refuse the candidate
	notSwitched       bool // the chosen agents still run the stable version
}

// during returns the fleet's signals under w, relative to the rollout's
// baseline.
func during(p *Profile, w wave) []Signals {
	r := p.Rollout
	var out []Signals
	for _, h := range slices.Sorted(func(yield func(string) bool) {
		for h := range r.Baseline {
			if !yield(h) {
				return
			}
		}
	}) {
		base := r.Baseline[h]
		s := base
		chosen := slices.Contains(r.Hosts, h)
		switch {
		case chosen && w.refuse:
			s.Refused = r.Candidate.Number
		case chosen && !w.notSwitched:
			if base.Version != r.Candidate.Number {
				// The new version's estimator starts from zero.
				s = Signals{Host: h, Profile: "web", Version: r.Candidate.Number}
			}
			s.Scored += w.updatedScored
			s.Violations += w.updatedViolations
			s.RunqP99 = w.updatedP99
		case !chosen:
			s.Scored += w.othersScored
			s.Violations += w.othersViolations
			s.RunqP99 = w.othersP99
		}
		out = append(out, s)
	}
	return out
}

func policy() Policy {
	return Policy{Waves: []float64{0.1, 0.5, 1}, Soak: 10 * time.Minute, MinScored: 1000,
		ViolationTolerance: 0.005, RunqP99Tolerance: 0.2, RunqP99Floor: time.Millisecond}
}

func started(t *testing.T) *Profile {
	t.Helper()
	p, err := StartRollout(applied(t), "estimator-target-violation: 0.05\n", policy(), "bob", t0, stableFleet(10, 1, 5000, 50), accept)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStartRolloutChoosesTheFirstWave(t *testing.T) {
	t.Parallel()
	p := started(t)
	r := p.Rollout
	if r.State != RolloutInProgress || r.Candidate.Number != 2 || r.Previous.Number != 1 || len(r.Hosts) != 1 {
		t.Fatalf("rollout = %+v, want in progress, candidate 2 from 1, on 1 host", r)
	}
	chosen := r.Hosts[0]
	for _, h := range hosts(10) {
		got := Assign(p, h).Version.Number
		want := uint64(1)
		if h == chosen {
			want = 2
		}
		if got != want {
			t.Errorf("Assign(%s) = version %d, want %d", h, got, want)
		}
	}
	if _, err := StartRollout(p, "x: 1", policy(), "bob", t0, nil, accept); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("a second rollout: err = %v, want ErrFailedPrecondition", err)
	}
}

// TestStep is the rollout's decision table: each case starts a rollout of
// version 2 over version 1 on ten agents, runs its waves under the given
// signals, and checks the outcome.
func TestStep(t *testing.T) {
	t.Parallel()
	const soak = 10 * time.Minute
	calm := wave{updatedScored: 2000, updatedViolations: 20, othersScored: 9000, othersViolations: 90}
	tests := []struct {
		name string
		// waves are the signals of each step; steps are soak apart unless
		// at says otherwise.
		waves []wave
		at    []time.Duration // offset of each step from the wave's start (default soak)
		want  []Outcome
		// wantState, wantStable, wantHosts check the end.
		wantState  RolloutState
		wantStable uint64
		wantHosts  int
		wantReason string
	}{
		{
			name: "soaking, nothing worse: unchanged", waves: []wave{calm}, at: []time.Duration{soak - time.Second},
			want: []Outcome{Unchanged}, wantState: RolloutInProgress, wantStable: 1, wantHosts: 1, wantReason: "soaking",
		},
		{
			name: "soaked, equal rates: next wave covers half", waves: []wave{calm},
			want: []Outcome{NextWave}, wantState: RolloutInProgress, wantStable: 1, wantHosts: 5,
		},
		{
			name: "all waves equal: completed, candidate stable", waves: []wave{calm, calm, {updatedScored: 9000, updatedViolations: 90}},
			want: []Outcome{NextWave, NextWave, Completed}, wantState: RolloutDone, wantStable: 2, wantHosts: 10,
		},
		{
			name: "violation rate worse in wave 1: rolled back before the soak", at: []time.Duration{time.Minute},
			waves: []wave{{updatedScored: 2000, updatedViolations: 200, othersScored: 9000, othersViolations: 90}},
			want:  []Outcome{RolledBack}, wantState: RolloutRolledBack, wantStable: 1, wantHosts: 1, wantReason: "violation rate 10.00%",
		},
		{
			name:  "violation rate higher within tolerance: next wave",
			waves: []wave{{updatedScored: 2000, updatedViolations: 29, othersScored: 9000, othersViolations: 90}},
			want:  []Outcome{NextWave}, wantState: RolloutInProgress, wantStable: 1, wantHosts: 5,
		},
		{
			name:  "too few estimates scored: waits, no rollback on noise",
			waves: []wave{{updatedScored: 100, updatedViolations: 50, othersScored: 9000, othersViolations: 90}},
			want:  []Outcome{Unchanged}, wantState: RolloutInProgress, wantStable: 1, wantHosts: 1, wantReason: "waits for 1000 scored",
		},
		{
			name: "chosen agents not switched yet: waits", waves: []wave{{notSwitched: true, othersScored: 9000}},
			want: []Outcome{Unchanged}, wantState: RolloutInProgress, wantStable: 1, wantHosts: 1, wantReason: "has 0 and 81000",
		},
		{
			name: "a chosen agent refused: rolled back", waves: []wave{{refuse: true, othersScored: 9000}}, at: []time.Duration{time.Second},
			want: []Outcome{RolledBack}, wantState: RolloutRolledBack, wantStable: 1, wantHosts: 1, wantReason: "refused version 2",
		},
		{
			name: "run-queue p99 worse: rolled back",
			waves: []wave{{updatedScored: 2000, updatedViolations: 20, updatedP99: 8 * time.Millisecond,
				othersScored: 9000, othersViolations: 90, othersP99: 2 * time.Millisecond}},
			want: []Outcome{RolledBack}, wantState: RolloutRolledBack, wantStable: 1, wantHosts: 1, wantReason: "run-queue p99 8ms",
		},
		{
			name: "run-queue p99 within tolerance and floor: next wave",
			waves: []wave{{updatedScored: 2000, updatedViolations: 20, updatedP99: 3 * time.Millisecond,
				othersScored: 9000, othersViolations: 90, othersP99: 2 * time.Millisecond}},
			want: []Outcome{NextWave}, wantState: RolloutInProgress, wantStable: 1, wantHosts: 5,
		},
		{
			name:  "final wave worse than the reference of wave 2: rolled back",
			waves: []wave{calm, calm, {updatedScored: 9000, updatedViolations: 900}},
			want:  []Outcome{NextWave, NextWave, RolledBack}, wantState: RolloutRolledBack, wantStable: 1, wantHosts: 10, wantReason: "violation rate 10.00%",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := started(t)
			for i, w := range tt.waves {
				at := soak
				if i < len(tt.at) {
					at = tt.at[i]
				}
				next, got := Step(p, p.Rollout.WaveStarted.Add(at), during(p, w))
				if got != tt.want[i] {
					t.Fatalf("step %d: outcome %v, want %v (reason %q, updated %+v, others %+v)", i, got, tt.want[i], next.Rollout.Reason, next.Rollout.Updated, next.Rollout.Others)
				}
				if got == Unchanged && next != p && next.Rollout.State != RolloutInProgress {
					t.Fatalf("step %d: unchanged but the rollout moved to %v", i, next.Rollout.State)
				}
				p = next
			}
			r := p.Rollout
			if r.State != tt.wantState || p.Stable.Number != tt.wantStable || len(r.Hosts) != tt.wantHosts {
				t.Errorf("end: state %v, stable %d, %d hosts; want %v, %d, %d", r.State, p.Stable.Number, len(r.Hosts), tt.wantState, tt.wantStable, tt.wantHosts)
			}
			if !strings.Contains(r.Reason, tt.wantReason) {
				t.Errorf("reason %q, want it to contain %q", r.Reason, tt.wantReason)
			}
			// What agents run follows the state: rolled back or done, every
			// host runs the stable version.
			if r.State != RolloutInProgress {
				for _, h := range hosts(10) {
					if a := Assign(p, h); a.Version.Number != p.Stable.Number {
						t.Errorf("after %v: %s runs version %d, want %d", r.State, h, a.Version.Number, p.Stable.Number)
					}
				}
			}
		})
	}
}

// TestStepCountsFromZeroAfterARebuild: an agent switched to the candidate
// restarts its counters; a baseline taken under the old version must not
// be subtracted from the new counters.
func TestStepCountsFromZeroAfterARebuild(t *testing.T) {
	t.Parallel()
	p := started(t)
	chosen := p.Rollout.Hosts[0]
	var fleet []Signals
	for _, s := range stableFleet(10, 1, 5000, 50) {
		if s.Host == chosen {
			// 6000 scored since the switch, 600 violated: 10%. Subtracting
			// the old baseline (5000, 50) would make it 1000 and 550.
			s = Signals{Host: chosen, Profile: "web", Version: 2, Scored: 6000, Violations: 600}
		} else {
			s.Scored += 9000
			s.Violations += 90
		}
		fleet = append(fleet, s)
	}
	next, got := Step(p, t0.Add(time.Minute), fleet)
	if got != RolledBack {
		t.Fatalf("outcome %v, want RolledBack", got)
	}
	want := Group{Agents: 1, Scored: 6000, Violations: 600}
	if diff := cmp.Diff(want, next.Rollout.Updated); diff != "" {
		t.Errorf("updated group (-want +got):\n%s", diff)
	}
}

// TestStepWithoutOthersJudgesTheUpdatedAlone: a wave that covers every
// matching agent, with no earlier wave's reference, moves on once soaked
// with enough estimates scored, instead of waiting for others forever.
func TestStepWithoutOthersJudgesTheUpdatedAlone(t *testing.T) {
	t.Parallel()
	p := started(t)
	chosen := p.Rollout.Hosts[0]
	fleet := []Signals{{Host: chosen, Profile: "web", Version: 2, Scored: 2000, Violations: 20}}
	next, got := Step(p, p.Rollout.WaveStarted.Add(p.Rollout.Policy.Soak), fleet)
	if got == Unchanged || got == RolledBack {
		t.Fatalf("outcome %v (reason %q), want the rollout to move on", got, next.Rollout.Reason)
	}
}

func TestStepDoesNotModifyItsInput(t *testing.T) {
	t.Parallel()
	p := started(t)
	before := p.Clone()
	Step(p, t0.Add(time.Hour), during(p, wave{updatedScored: 2000, othersScored: 9000}))
	if diff := cmp.Diff(before, p); diff != "" {
		t.Errorf("Step changed its input (-before +after):\n%s", diff)
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, profile, settings string
		selector                map[string]string
		wantErr                 string
	}{
		{name: "ok", profile: "web", settings: "estimator-window: 30s", selector: map[string]string{"tier": "web"}},
		{name: "empty name", profile: "", wantErr: "name: required"},
		{name: "bad name", profile: "Web!", wantErr: `name "Web!"`},
		{name: "settings refused by the agent's check", profile: "web", settings: "bad", wantErr: "settings: --estimator-window"},
		{name: "settings too long", profile: "web", settings: strings.Repeat("x", MaxSettingsBytes+1), wantErr: "settings: 16385 bytes"},
		{name: "empty selector attribute", profile: "web", selector: map[string]string{"": "x"}, wantErr: "selector: an empty attribute name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Apply(nil, tt.profile, tt.selector, tt.settings, "alice", t0, accept)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrInvalid containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Stable.Number != 1 || p.Stable.By != "alice" || len(p.History) != 1 || p.History[0].By != "alice" {
				t.Errorf("profile = %+v, want version 1 by alice, audited", p)
			}
		})
	}
}

func TestApplyAbortsARollout(t *testing.T) {
	t.Parallel()
	p := started(t)
	q, err := Apply(p, "web", p.Selector, "estimator-window: 1m", "carol", t0.Add(time.Minute), accept)
	if err != nil {
		t.Fatal(err)
	}
	if q.Rollout.State != RolloutAborted || q.Stable.Number != 3 || p.Rollout.State != RolloutInProgress {
		t.Fatalf("after apply: rollout %v, stable %d (input's rollout %v); want aborted, 3, in progress", q.Rollout.State, q.Stable.Number, p.Rollout.State)
	}
	for _, h := range hosts(10) {
		if a := Assign(q, h); a.Version.Number != 3 {
			t.Errorf("%s runs version %d, want 3", h, a.Version.Number)
		}
	}
	last := q.History[len(q.History)-1]
	if last.By != "carol" || !strings.Contains(last.What, "applied version 3") {
		t.Errorf("last change = %+v, want carol applying version 3", last)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	t.Parallel()
	var p *Profile
	for i := range MaxHistory + 5 {
		var err error
		if p, err = Apply(p, "web", nil, "", fmt.Sprint("op", i), t0, accept); err != nil {
			t.Fatal(err)
		}
	}
	if len(p.History) != MaxHistory || p.History[0].By != "op5" {
		t.Errorf("history: %d entries from %s, want %d from op5", len(p.History), p.History[0].By, MaxHistory)
	}
}

func TestSelect(t *testing.T) {
	t.Parallel()
	all := &Profile{Name: "all"}
	web := &Profile{Name: "web", Selector: map[string]string{"tier": "web"}}
	webEU := &Profile{Name: "web-eu", Selector: map[string]string{"tier": "web", "zone": "eu"}}
	aWeb := &Profile{Name: "a-web", Selector: map[string]string{"tier": "web"}}
	ps := []*Profile{all, web, webEU, aWeb}
	tests := []struct {
		attrs map[string]string
		want  string
	}{
		{map[string]string{"tier": "db"}, "all"},
		{map[string]string{"tier": "web"}, "a-web"},
		{map[string]string{"tier": "web", "zone": "eu"}, "web-eu"},
		{map[string]string{"tier": "web", "zone": "us"}, "a-web"},
	}
	for _, tt := range tests {
		if got := Select(ps, tt.attrs); got == nil || got.Name != tt.want {
			t.Errorf("Select(%v) = %v, want %s", tt.attrs, got, tt.want)
		}
	}
	if got := Select([]*Profile{web}, map[string]string{"tier": "db"}); got != nil {
		t.Errorf("Select with no match = %s, want nil", got.Name)
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mutate  func(*Policy)
		wantErr string
	}{
		{func(p *Policy) {}, ""},
		{func(p *Policy) { p.Waves = nil }, "waves: want 1 to"},
		{func(p *Policy) { p.Waves = []float64{0.5, 0.2, 1} }, "waves[1]"},
		{func(p *Policy) { p.Waves = []float64{0.1, 0.5} }, "last share must be 1"},
		{func(p *Policy) { p.Soak = 0 }, "soak: must be positive"},
		{func(p *Policy) { p.ViolationTolerance = -1 }, "violation_tolerance"},
		{func(p *Policy) { p.ShadowSoak = -time.Second }, "shadow_soak: must not be negative"},
		{func(p *Policy) { p.ShadowSoak = 0 }, ""},
	}
	for _, tt := range tests {
		p := DefaultPolicy()
		tt.mutate(&p)
		err := p.Validate()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
		}
	}
}

func TestShareCoversAtLeastOne(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		f    float64
		n, k int
	}{{0.1, 10, 1}, {0.1, 3, 1}, {0.5, 10, 5}, {0.5, 3, 2}, {1, 7, 7}, {0.1, 0, 0}} {
		if got := share(tt.f, tt.n); got != tt.k {
			t.Errorf("share(%v, %d) = %d, want %d", tt.f, tt.n, got, tt.k)
		}
	}
}

// TestAbortRollout: aborting a rollout under way sends its agents back to
// the stable version and records who did it; a profile without a rollout
// under way, or none at all, is refused with the error naming why.
func TestAbortRollout(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := Apply(nil, "web", nil, "estimator: fast\n", "op", now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AbortRollout(p, "web", "op", now); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("abort without a rollout: %v, want ErrFailedPrecondition", err)
	}
	if _, err := AbortRollout(nil, "nope", "op", now); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("abort of a missing profile: %v, want ErrNotFound naming it", err)
	}
	var fleet []Signals
	for i := range 10 {
		fleet = append(fleet, Signals{Host: fmt.Sprintf("h%d", i), Profile: "web", Version: 1})
	}
	live := DefaultPolicy()
	live.ShadowSoak = 0 // straight to the live waves
	r, err := StartRollout(p, "estimator: usage\n", live, "op", now, fleet, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rollout.Hosts) == 0 || Assign(r, r.Rollout.Hosts[0]).Version.Number != 2 {
		t.Fatalf("rollout's first wave: hosts %v", r.Rollout.Hosts)
	}
	later := now.Add(time.Minute)
	a, err := AbortRollout(r, "web", "alice", later)
	if err != nil {
		t.Fatal(err)
	}
	if a.Rollout.State != RolloutAborted || !a.Rollout.EndedAt.Equal(later) || !strings.Contains(a.Rollout.Reason, "alice") {
		t.Errorf("aborted rollout: state %v, ended %v, reason %q", a.Rollout.State, a.Rollout.EndedAt, a.Rollout.Reason)
	}
	for _, h := range r.Rollout.Hosts {
		if got := Assign(a, h).Version.Number; got != 1 {
			t.Errorf("host %s runs version %d after the abort, want the stable 1", h, got)
		}
	}
	if last := a.History[len(a.History)-1]; last.By != "alice" || !strings.Contains(last.What, "aborted") {
		t.Errorf("history ends with %+v, want alice's abort", last)
	}
	if r.Rollout.State != RolloutInProgress {
		t.Error("AbortRollout changed the profile it was given")
	}
	if _, err := AbortRollout(a, "web", "op", later); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("second abort: %v, want ErrFailedPrecondition", err)
	}
}
