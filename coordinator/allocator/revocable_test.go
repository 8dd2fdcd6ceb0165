package allocator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slackline/slackline/resources"
)

// rev renders revocable resources as offers() does.
func rev(text string) string { return revPrefix + res(text).String() }

// wantRevocable checks an agent's revocable total and what is held of it.
func wantRevocable(t *testing.T, a *Allocator, agentID, total, held string) {
	t.Helper()
	gotTotal, gotHeld := a.AgentRevocable(agentID)
	if !gotTotal.Equal(res(total)) || !gotHeld.Equal(res(held)) {
		t.Fatalf("AgentRevocable(%s) = %v, %v; want %v, %v", agentID, gotTotal, gotHeld, res(total), res(held))
	}
}

func wantOffers(t *testing.T, what string, want, got []offer) {
	t.Helper()
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("%s: offers (-want +got):\n%s", what, diff)
	}
}

// TestRevocableCapability: only frameworks with the capability are offered
// revocable resources, always in an allocation of their own.
func TestRevocableCapability(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capable  []string // frameworks given the capability
		withdraw []string // then withdrawn
		want     []offer
	}{
		{
			name: "without the capability, never",
			want: []offer{{"f", "*", "a1", "cpus:4;mem:4096"}},
		},
		{
			name:    "with it, a separate allocation",
			capable: []string{"f"},
			want:    []offer{{"f", "*", "a1", "cpus:4;mem:4096"}, {"f", "*", "a1", rev("cpus:2")}},
		},
		{
			name:    "regular to the first in DRF order, revocable to the first capable one",
			capable: []string{"g"},
			want:    []offer{{"f", "*", "a1", "cpus:4;mem:4096"}, {"g", "*", "a1", rev("cpus:2")}},
		},
		{
			name:     "capability withdrawn",
			capable:  []string{"f", "g"},
			withdraw: []string{"f", "g"},
			want:     []offer{{"f", "*", "a1", "cpus:4;mem:4096"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Config{})
			a.AddAgent("a1", res("cpus:4;mem:4096"))
			a.SetAgentRevocable("a1", res("cpus:2"))
			a.AddFramework("f", nil, true)
			a.AddFramework("g", nil, true)
			for _, fw := range tt.capable {
				a.SetFrameworkRevocable(fw, true)
			}
			for _, fw := range tt.withdraw {
				a.SetFrameworkRevocable(fw, false)
			}
			a.SetFrameworkRevocable("nobody", true) // ignored
			mustCheck(t, a)
			// Several rounds, every offer declined without a filter: the
			// same offers come back, never revocable ones to a framework
			// without the capability (checkedAllocate checks that too).
			for round := range 3 {
				got := allocate(t, a, t0, nil)
				wantOffers(t, fmt.Sprintf("round %d", round), tt.want, got)
				for _, o := range got {
					if r, ok := strings.CutPrefix(o.Resources, revPrefix); ok {
						a.ReleaseRevocable(o.Framework, o.Role, o.Agent, res(r), 0, t0)
					} else {
						a.Release(o.Framework, o.Role, o.Agent, res(o.Resources), 0, t0)
					}
					mustCheck(t, a)
				}
			}
		})
	}
}

// TestRevocableCapabilityKeptOnResubscription: AddFramework on a known
// framework keeps the capability; a removed framework loses it.
func TestRevocableCapabilityKeptOnResubscription(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", resources.Resources{})
	a.SetAgentRevocable("a1", res("cpus:2"))
	a.AddFramework("f", nil, true)
	a.SetFrameworkRevocable("f", true)
	a.AddFramework("f", []string{"r"}, true)
	wantOffers(t, "re-subscribed", []offer{{"f", "r", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
	a.ReleaseRevocable("f", "r", "a1", res("cpus:2"), 0, t0)
	a.RemoveFramework("f")
	a.AddFramework("f", []string{"r"}, true)
	wantOffers(t, "removed and added again", nil, allocate(t, a, t0, nil))
}

// TestRevocableSeparateOffers: one pass yields per agent one regular and
// one revocable allocation, each from its own pool, and releasing from one
// pool never touches the other.
func TestRevocableSeparateOffers(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.AddAgent("a2", res("cpus:2;mem:2048"))
	a.AddAgent("a3", res("cpus:1;mem:1024"))
	a.SetAgentRevocable("a1", res("cpus:2;mem:1024"))
	a.SetAgentRevocable("a3", res("cpus:0.5"))
	a.SetAgentRevocable("nowhere", res("cpus:1")) // ignored
	a.AddFramework("f", nil, true)
	a.SetFrameworkRevocable("f", true)
	got := allocate(t, a, t0, nil)
	wantOffers(t, "first pass", []offer{
		{"f", "*", "a1", "cpus:4;mem:4096"},
		{"f", "*", "a1", rev("cpus:2;mem:1024")},
		{"f", "*", "a2", "cpus:2;mem:2048"},
		{"f", "*", "a3", "cpus:1;mem:1024"},
		{"f", "*", "a3", rev("cpus:0.5")},
	}, got)
	wantRevocable(t, a, "a1", "cpus:2;mem:1024", "cpus:2;mem:1024")
	wantRevocable(t, a, "a2", "", "")
	if got := a.AgentAllocated("a1"); !got.Equal(res("cpus:4;mem:4096")) {
		t.Errorf("AgentAllocated(a1) = %v: must be regular only", got)
	}
	if got := a.FrameworkAllocated("f"); !got.Equal(res("cpus:7;mem:7168")) {
		t.Errorf("FrameworkAllocated = %v: must be regular only", got)
	}
	if got := a.FrameworkAllocatedRevocable("f"); !got.Equal(res("cpus:2.5;mem:1024")) {
		t.Errorf("FrameworkAllocatedRevocable = %v", got)
	}
	if got := a.ClusterTotal(); !got.Equal(res("cpus:7;mem:7168")) {
		t.Errorf("ClusterTotal = %v: must not include revocable totals", got)
	}
	wantOffers(t, "nothing left", nil, allocate(t, a, t0, nil))

	// A regular release of cpus leaves the revocable hold alone, and the
	// other way round.
	a.Release("f", "*", "a3", res("cpus:0.5"), 0, t0)
	mustCheck(t, a)
	wantRevocable(t, a, "a3", "cpus:0.5", "cpus:0.5")
	a.ReleaseRevocable("f", "*", "a1", res("cpus:2;mem:1024"), 0, t0)
	a.ReleaseRevocable("f", "*", "a2", res("cpus:2"), 0, t0) // no pool there: ignored
	mustCheck(t, a)
	if got := a.FrameworkAllocatedOn("f", "*", "a1"); !got.Equal(res("cpus:4;mem:4096")) {
		t.Errorf("regular hold on a1 = %v after a revocable release", got)
	}
	wantOffers(t, "after releases", []offer{
		{"f", "*", "a1", rev("cpus:2;mem:1024")},
		{"f", "*", "a3", "cpus:0.5"},
	}, allocate(t, a, t0, nil))
}

// TestRevocableEstimateShrink: while what is held exceeds a shrunk
// estimate, nothing (of the exceeded scalars) is offered; offers resume
// when the estimate grows or holds are released.
func TestRevocableEstimateShrink(t *testing.T) {
	t.Parallel()
	type step struct {
		do         func(a *Allocator)
		total      string // revocable total afterwards
		held       string // revocable held afterwards, the offer included
		wantOffers []offer
	}
	estimate := func(r string) func(*Allocator) {
		return func(a *Allocator) { a.SetAgentRevocable("a1", res(r)) }
	}
	release := func(r string) func(*Allocator) {
		return func(a *Allocator) { a.ReleaseRevocable("f", "*", "a1", res(r), 0, t0) }
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "cpus",
			steps: []step{
				{estimate("cpus:2"), "cpus:2", "cpus:2", []offer{{"f", "*", "a1", rev("cpus:2")}}},
				{estimate("cpus:1"), "cpus:1", "cpus:2", nil},
				{release("cpus:0.5"), "cpus:1", "cpus:1.5", nil},
				{estimate("cpus:1.5"), "cpus:1.5", "cpus:1.5", nil},
				{estimate("cpus:3"), "cpus:3", "cpus:3", []offer{{"f", "*", "a1", rev("cpus:1.5")}}},
				{estimate("cpus:0.5"), "cpus:0.5", "cpus:3", nil},
				{release("cpus:2.6"), "cpus:0.5", "cpus:0.5", []offer{{"f", "*", "a1", rev("cpus:0.1")}}},
				{estimate(""), "", "cpus:0.5", nil},
				{release("cpus:1"), "", "", nil},
				{estimate("cpus:1"), "cpus:1", "cpus:1", []offer{{"f", "*", "a1", rev("cpus:1")}}},
			},
		},
		{
			// Per scalar, like regular totals: with cpus over-committed,
			// spare memory is still offered.
			name: "per scalar",
			steps: []step{
				{estimate("cpus:2;mem:1024"), "cpus:2;mem:1024", "cpus:2;mem:1024", []offer{{"f", "*", "a1", rev("cpus:2;mem:1024")}}},
				{estimate("cpus:1;mem:2048"), "cpus:1;mem:2048", "cpus:2;mem:2048", []offer{{"f", "*", "a1", rev("mem:1024")}}},
			},
		},
		{
			// An agent re-registering with revocable tasks before its
			// first estimate: over-committed until the estimate comes.
			name: "claim before the estimate",
			steps: []step{
				{func(a *Allocator) { a.ClaimRevocable("f", "*", "a1", res("cpus:1")) }, "", "cpus:1", nil},
				{estimate("cpus:0.5"), "cpus:0.5", "cpus:1", nil},
				{estimate("cpus:4"), "cpus:4", "cpus:4", []offer{{"f", "*", "a1", rev("cpus:3")}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Config{})
			a.AddAgent("a1", res("cpus:1;mem:1024"))
			a.AddFramework("f", nil, true)
			a.SetFrameworkRevocable("f", true)
			wantOffers(t, "regular", []offer{{"f", "*", "a1", "cpus:1;mem:1024"}}, allocate(t, a, t0, nil))
			for i, s := range tt.steps {
				s.do(a)
				mustCheck(t, a)
				wantOffers(t, fmt.Sprintf("step %d", i), s.wantOffers, allocate(t, a, t0, nil))
				wantRevocable(t, a, "a1", s.total, s.held)
			}
			if got := a.FrameworkAllocated("f"); !got.Equal(res("cpus:1;mem:1024")) {
				t.Errorf("regular allocation moved: %v", got)
			}
		})
	}
}

// TestRevocableQuotaUntouched: revocable offers are not clamped by quota
// and revocable holds (offers or claims) never consume quota headroom.
func TestRevocableQuotaUntouched(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.SetAgentRevocable("a1", res("cpus:3;mem:2048"))
	a.SetQuotaLimit("q", res("cpus:1;mem:1024"))
	a.SetQuotaLimit("parent", res("cpus:1"))
	a.AddFramework("f", []string{"q"}, true)
	a.AddFramework("g", []string{"parent/child"}, true)
	a.SetFrameworkRevocable("f", true)
	a.SetFrameworkRevocable("g", true)
	// Regular offers are clamped ("parent" sorts before "q" at equal
	// shares); the revocable pool goes whole to the first candidate, the
	// one at its limit included.
	wantOffers(t, "first pass", []offer{
		{"g", "parent/child", "a1", "cpus:1;mem:4096"},
		{"f", "q", "a1", "cpus:1"},
		{"g", "parent/child", "a1", rev("cpus:3;mem:2048")},
	}, allocate(t, a, t0, nil))
	a.ClaimRevocable("g", "parent/child", "a1", res("cpus:8")) // over-commits the pool
	mustCheck(t, a)
	allocated := map[string]resources.Resources{}
	for _, st := range a.RoleStates() {
		allocated[st.Name] = st.Allocated
	}
	want := map[string]resources.Resources{
		"q": res("cpus:1"), "parent": res("cpus:1;mem:4096"), "parent/child": res("cpus:1;mem:4096"),
	}
	if diff := cmp.Diff(want, allocated, cmp.Comparer(resources.Resources.Equal)); diff != "" {
		t.Fatalf("role allocations count revocable holds (-want +got):\n%s", diff)
	}
	// The regular headroom is what the regular holds leave.
	a.Release("f", "q", "a1", res("cpus:0.5"), 0, t0)
	a.Release("g", "parent/child", "a1", res("cpus:0.5"), 0, t0)
	wantOffers(t, "after regular releases", []offer{
		{"f", "q", "a1", "cpus:0.5"},
		{"g", "parent/child", "a1", "cpus:0.5"},
	}, allocate(t, a, t0, nil))
	// f's role q is at its cpus limit, and first in DRF order: it is
	// offered the revocable cpus.
	a.ReleaseRevocable("g", "parent/child", "a1", res("cpus:9"), 0, t0)
	wantRevocable(t, a, "a1", "cpus:3;mem:2048", "cpus:2;mem:2048")
	wantOffers(t, "at the limit", []offer{{"f", "q", "a1", rev("cpus:1")}}, allocate(t, a, t0, nil))
}

// TestRevocableFollowsRegularShares: revocable offers go in the DRF order of
// regular shares, and move no share.
func TestRevocableFollowsRegularShares(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	for _, id := range []string{"r1", "r2", "r3"} {
		a.AddAgent(id, resources.Resources{}) // revocable capacity only
		a.SetAgentRevocable(id, res("cpus:4"))
	}
	a.AddAgent("big", res("cpus:10;mem:10240")) // visited last
	a.AddFramework("a", []string{"x"}, true)
	a.AddFramework("b", []string{"y"}, true)
	a.SetFrameworkRevocable("a", true)
	a.SetFrameworkRevocable("b", true)
	a.Claim("a", "x", "big", res("cpus:5"))         // regular share 0.5
	a.ClaimRevocable("b", "y", "r1", res("cpus:4")) // lots of revocable, regular share 0
	mustCheck(t, a)
	// b (role y) has the lower regular share: it is offered every revocable
	// pool of the pass, whatever it holds of revocable resources, since
	// revocable offers move no share.
	wantOffers(t, "revocable by regular shares", []offer{
		{"b", "y", "r2", rev("cpus:4")},
		{"b", "y", "r3", rev("cpus:4")},
		{"b", "y", "big", "cpus:5;mem:10240"},
	}, allocate(t, a, t0, nil))
	for _, st := range a.RoleStates() {
		if st.Name == "y" && !st.Allocated.Equal(res("cpus:5;mem:10240")) {
			t.Errorf("role y allocated %v: must not count revocable holds", st.Allocated)
		}
	}
	// Now b's regular share (1.0) exceeds a's (0.5): revocable goes to a.
	a.ReleaseRevocable("b", "y", "r2", res("cpus:4"), 0, t0)
	wantOffers(t, "after regular shares changed", []offer{{"a", "x", "r2", rev("cpus:4")}}, allocate(t, a, t0, nil))
	if got := a.FrameworkAllocatedRevocable("b"); !got.Equal(res("cpus:8")) {
		t.Errorf("FrameworkAllocatedRevocable(b) = %v", got)
	}
}

// TestRevocableFilters: ReleaseRevocable with refuse > 0 filters revocable
// offers only; regular filters do not block revocable offers; Revive
// clears revocable filters.
func TestRevocableFilters(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) *Allocator {
		a := New(Config{})
		a.AddAgent("a1", res("cpus:4;mem:4096"))
		a.SetAgentRevocable("a1", res("cpus:2"))
		a.AddFramework("f", nil, true)
		a.SetFrameworkRevocable("f", true)
		wantOffers(t, "first pass", []offer{{"f", "*", "a1", "cpus:4;mem:4096"}, {"f", "*", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
		return a
	}
	t.Run("blocks until expiry, regular offers unaffected", func(t *testing.T) {
		a := setup(t)
		a.ReleaseRevocable("f", "*", "a1", res("cpus:2"), 10*time.Second, t0)
		a.Release("f", "*", "a1", res("cpus:4;mem:4096"), 0, t0)
		mustCheck(t, a)
		wantOffers(t, "filtered", []offer{{"f", "*", "a1", "cpus:4;mem:4096"}}, allocate(t, a, t0.Add(9*time.Second), nil))
		wantOffers(t, "expired", []offer{{"f", "*", "a1", rev("cpus:2")}}, allocate(t, a, t0.Add(10*time.Second), nil))
	})
	t.Run("regular filters do not block revocable offers", func(t *testing.T) {
		a := setup(t)
		a.Release("f", "*", "a1", res("cpus:4;mem:4096"), time.Hour, t0)
		a.ReleaseRevocable("f", "*", "a1", res("cpus:2"), 0, t0)
		wantOffers(t, "", []offer{{"f", "*", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
	})
	t.Run("a grown estimate is no longer contained", func(t *testing.T) {
		a := setup(t)
		a.ReleaseRevocable("f", "*", "a1", res("cpus:2"), time.Hour, t0)
		a.SetAgentRevocable("a1", res("cpus:1.5"))
		wantOffers(t, "shrunk: still contained", nil, allocate(t, a, t0, nil))
		a.SetAgentRevocable("a1", res("cpus:3"))
		mustCheck(t, a)
		wantOffers(t, "grown", []offer{{"f", "*", "a1", rev("cpus:3")}}, allocate(t, a, t0, nil))
	})
	t.Run("another capable framework is offered what one declined", func(t *testing.T) {
		a := setup(t)
		a.AddFramework("g", nil, true)
		a.SetFrameworkRevocable("g", true)
		a.ReleaseRevocable("f", "*", "a1", res("cpus:2"), time.Hour, t0)
		wantOffers(t, "", []offer{{"g", "*", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
	})
	t.Run("Revive clears revocable filters", func(t *testing.T) {
		a := setup(t)
		a.ReleaseRevocable("f", "*", "a1", res("cpus:2"), time.Hour, t0)
		wantOffers(t, "filtered", nil, allocate(t, a, t0, nil))
		a.Revive("f", nil)
		mustCheck(t, a)
		wantOffers(t, "revived", []offer{{"f", "*", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
	})
	t.Run("Suppress stops revocable offers, Revive resumes them", func(t *testing.T) {
		a := setup(t)
		a.ReleaseRevocable("f", "*", "a1", res("cpus:2"), 0, t0)
		a.Suppress("f", nil)
		wantOffers(t, "suppressed", nil, allocate(t, a, t0, nil))
		a.Revive("f", []string{"*"})
		wantOffers(t, "revived", []offer{{"f", "*", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
	})
}

// TestRevocableLifecycle: RemoveAgent, RemoveFramework, deactivation and
// role changes apply to revocable pools and holds.
func TestRevocableLifecycle(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) *Allocator {
		a := New(Config{})
		for _, id := range []string{"a1", "a2"} {
			a.AddAgent(id, resources.Resources{}) // revocable capacity only
			a.SetAgentRevocable(id, res("cpus:2"))
		}
		a.AddFramework("f", []string{"r"}, true)
		a.SetFrameworkRevocable("f", true)
		allocate(t, a, t0, nil)
		if got := a.FrameworkAllocatedRevocable("f"); !got.Equal(res("cpus:4")) {
			t.Fatalf("FrameworkAllocatedRevocable = %v", got)
		}
		return a
	}
	t.Run("RemoveAgent", func(t *testing.T) {
		a := setup(t)
		a.ReleaseRevocable("f", "r", "a1", res("cpus:2"), time.Hour, t0)
		a.ReleaseRevocable("f", "r", "a2", res("cpus:1"), 0, t0)
		a.RemoveAgent("a2")
		mustCheck(t, a)
		if got := a.FrameworkAllocatedRevocable("f"); !got.IsEmpty() {
			t.Fatalf("revocable holds survive their agent: %v", got)
		}
		wantRevocable(t, a, "a2", "", "")
		a.RemoveAgent("a1")
		mustCheck(t, a)
		// The same id comes back with no pool, then an estimate: no
		// filter survives.
		a.AddAgent("a1", resources.Resources{})
		wantOffers(t, "no estimate yet", nil, allocate(t, a, t0, nil))
		a.SetAgentRevocable("a1", res("cpus:2"))
		wantOffers(t, "new estimate", []offer{{"f", "r", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
	})
	t.Run("RemoveFramework", func(t *testing.T) {
		a := setup(t)
		a.RemoveFramework("f")
		mustCheck(t, a)
		wantRevocable(t, a, "a1", "cpus:2", "")
		if len(a.RoleStates()) != 0 {
			t.Fatalf("roles left: %+v", a.RoleStates())
		}
	})
	t.Run("DeactivateFramework and DeactivateAgent", func(t *testing.T) {
		a := setup(t)
		a.ReleaseRevocable("f", "r", "a1", res("cpus:2"), 0, t0)
		a.ReleaseRevocable("f", "r", "a2", res("cpus:2"), 0, t0)
		a.DeactivateFramework("f")
		wantOffers(t, "inactive framework", nil, allocate(t, a, t0, nil))
		a.ActivateFramework("f")
		a.DeactivateAgent("a1")
		wantOffers(t, "inactive agent", []offer{{"f", "r", "a2", rev("cpus:2")}}, allocate(t, a, t0, nil))
		a.ActivateAgent("a1")
		wantOffers(t, "active again", []offer{{"f", "r", "a1", rev("cpus:2")}}, allocate(t, a, t0, nil))
	})
	t.Run("a revocable hold keeps a left role until released", func(t *testing.T) {
		a := setup(t)
		a.UpdateFrameworkRoles("f", []string{"s"})
		mustCheck(t, a)
		var names []string
		for _, st := range a.RoleStates() {
			names = append(names, st.Name)
		}
		if diff := cmp.Diff([]string{"r", "s"}, names); diff != "" {
			t.Fatalf("roles (-want +got):\n%s", diff)
		}
		a.ReleaseRevocable("f", "r", "a1", res("cpus:2"), time.Hour, t0)
		a.ReleaseRevocable("f", "r", "a2", res("cpus:2"), 0, t0)
		mustCheck(t, a)
		if got := a.RoleStates(); len(got) != 1 || got[0].Name != "s" {
			t.Fatalf("roles %+v", got)
		}
		wantOffers(t, "offered in the new role", []offer{{"f", "s", "a1", rev("cpus:2")}, {"f", "s", "a2", rev("cpus:2")}}, allocate(t, a, t0, nil))
	})
	t.Run("a framework known only through a revocable claim", func(t *testing.T) {
		a := setup(t)
		a.ClaimRevocable("late", "r", "a1", res("cpus:1"))
		a.ClaimRevocable("late", "r", "nowhere", res("cpus:1")) // ignored
		mustCheck(t, a)
		if got := a.FrameworkAllocatedRevocable("late"); !got.Equal(res("cpus:1")) {
			t.Fatalf("claimed %v", got)
		}
		a.ReleaseRevocable("late", "r", "a1", res("cpus:1"), 0, t0)
		mustCheck(t, a)
		if _, ok := a.frameworkIndex["late"]; ok {
			t.Fatalf("framework known only through a released claim is still tracked")
		}
	})
}

func TestRevocableMinAllocatable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		min       resources.Resources
		revocable string
		want      bool
	}{
		{"default: too little", resources.Resources{}, "cpus:0.009;mem:31", false},
		{"default: enough", resources.Resources{}, "cpus:0.01", true},
		{"custom", res("cpus:1"), "cpus:0.5;mem:4096", false},
		{"custom, enough", res("cpus:1"), "cpus:1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Config{MinAllocatable: tt.min})
			a.AddAgent("a1", resources.Resources{})
			a.SetAgentRevocable("a1", res(tt.revocable))
			a.AddFramework("f", nil, true)
			a.SetFrameworkRevocable("f", true)
			if got := len(allocate(t, a, t0, nil)) == 1; got != tt.want {
				t.Errorf("offered = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRevocableEventDrivenMatchesFullPass: with revocable pools, passes over
// single agents give the same offers as a full pass.
func TestRevocableEventDrivenMatchesFullPass(t *testing.T) {
	t.Parallel()
	build := func() *Allocator {
		a := New(Config{})
		for i := range 12 {
			id := fmt.Sprintf("a%02d", i)
			a.AddAgent(id, res(fmt.Sprintf("cpus:%d;mem:%d", 1+i%4, 1024*(1+i%3))))
			if i%3 != 0 {
				a.SetAgentRevocable(id, res(fmt.Sprintf("cpus:%g", 0.5*float64(i%4))))
			}
		}
		for i := range 5 {
			fw := fmt.Sprintf("f%d", i)
			a.AddFramework(fw, []string{[]string{"eng/web", "eng/db", "ops", "*"}[i%4]}, true)
			a.SetFrameworkRevocable(fw, i%2 == 0)
		}
		a.SetQuotaLimit("ops", res("cpus:3"))
		return a
	}
	full, event := build(), build()
	for round := range 4 {
		now := t0.Add(time.Duration(round) * time.Second)
		got1 := allocate(t, full, now, nil)
		var got2 []offer
		for i := range 12 {
			got2 = append(got2, allocate(t, event, now, []string{fmt.Sprintf("a%02d", i)})...)
		}
		wantOffers(t, fmt.Sprintf("round %d: full vs event-driven", round), got1, got2)
		for i, o := range got1 {
			if i%2 != 0 {
				continue
			}
			for _, a := range []*Allocator{full, event} {
				if r, ok := strings.CutPrefix(o.Resources, revPrefix); ok {
					a.ReleaseRevocable(o.Framework, o.Role, o.Agent, res(r), 2*time.Second, now)
				} else {
					a.Release(o.Framework, o.Role, o.Agent, res(o.Resources), 2*time.Second, now)
				}
			}
		}
	}
}
