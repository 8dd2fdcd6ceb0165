package allocator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slackline/slackline/resources"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// offer is an Allocation in compact, comparable form.
type offer struct{ Framework, Role, Agent, Resources string }

// offers renders allocations; a revocable one's Resources read
// "revocable:" followed by the resources.
func offers(allocs []Allocation) []offer {
	var out []offer
	for _, al := range allocs {
		r := al.Resources.String()
		if al.Revocable {
			r = revPrefix + r
		}
		out = append(out, offer{al.FrameworkID, al.Role, al.AgentID, r})
	}
	return out
}

const revPrefix = "revocable:"

// allocate runs a pass and checks the invariants that every pass keeps:
// each allocation comes out of what was available on its agent (in its
// pool: regular or revocable), and a role path's quota is not exceeded by
// offers.
func allocate(t *testing.T, a *Allocator, now time.Time, agentIDs []string) []offer {
	t.Helper()
	allocs := checkedAllocate(t, a, now, agentIDs)
	mustCheck(t, a)
	return offers(allocs)
}

func checkedAllocate(t interface {
	Helper()
	Fatalf(string, ...any)
}, a *Allocator, now time.Time, agentIDs []string) []Allocation {
	t.Helper()
	before := map[string]resources.Resources{}
	revBefore := map[string]resources.Resources{}
	for id := range a.agentIndex {
		before[id] = a.AgentAvailable(id)
		total, held := a.AgentRevocable(id)
		revBefore[id] = total.Sub(held)
	}
	roleBefore := map[string]scalars{}
	for name, ri := range a.roleIndex {
		roleBefore[name] = a.nodes[ri].alloc
	}
	allocs := a.Allocate(now, agentIDs)
	regular := map[string]scalars{} // role -> regular scalars offered in its subtree
	for _, al := range allocs {
		pool := before
		if al.Revocable {
			pool = revBefore
			if fi, ok := a.frameworkIndex[al.FrameworkID]; !ok || !a.frameworks[fi].revocable {
				t.Fatalf("revocable allocation %v to %s, which lacks the capability", al.Resources, al.FrameworkID)
			}
		}
		avail := pool[al.AgentID]
		if !avail.Contains(al.Resources) {
			t.Fatalf("allocation %v (revocable %v) on %s exceeds what was available (%v): offered twice?", al.Resources, al.Revocable, al.AgentID, avail)
		}
		pool[al.AgentID] = avail.Sub(al.Resources)
		if !al.Resources.AnyScalarAtLeast(a.minAllocatable) {
			t.Fatalf("allocation %v below MinAllocatable", al.Resources)
		}
		if !al.Revocable {
			for role := al.Role; ; {
				regular[role] = regular[role].add(scalarsOf(al.Resources))
				i := strings.LastIndexByte(role, '/')
				if i < 0 {
					break
				}
				role = role[:i]
			}
		}
	}
	// Revocable offers leave the role tree (shares, quota) alone: each
	// role's allocation grew by exactly the regular offers in its subtree.
	for name, ri := range a.roleIndex {
		if got, want := a.nodes[ri].alloc, roleBefore[name].add(regular[name]); got != want {
			t.Fatalf("role %s: allocation %v after the pass, want %v (regular offers only)", name, got.resources(), want.resources())
		}
	}
	for name, ri := range a.roleIndex {
		n := &a.nodes[ri]
		if !n.hasQuota {
			continue
		}
		for s, limit := range n.quota {
			if limit > 0 && n.alloc[s] > max(limit, roleBefore[name][s]) {
				t.Fatalf("role %s: %s allocated %d exceeds limit %d", name, resources.Scalar(s).Name(), n.alloc[s], limit)
			}
		}
	}
	return allocs
}

// TestDRFPaperExample is the DRF paper's example: one agent <9 cpus, 18 GiB>,
// framework A needs <1 cpu, 4 GiB> per task and B <3 cpus, 1 GiB>. Each
// framework launches one task per offer when it fits and declines the rest;
// DRF ends with A running 3 tasks and B 2, whoever is offered first.
func TestDRFPaperExample(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		roleA, roleB   string
		wantFirstOffer string
	}{
		{name: "A offered first", roleA: "a", roleB: "b", wantFirstOffer: "A"},
		{name: "B offered first", roleA: "y", roleB: "x", wantFirstOffer: "B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Config{})
			a.AddAgent("agent", res("cpus:9;mem:18432"))
			a.AddFramework("A", []string{tt.roleA}, true)
			a.AddFramework("B", []string{tt.roleB}, true)
			need := map[string]resources.Resources{"A": res("cpus:1;mem:4096"), "B": res("cpus:3;mem:1024")}
			tasks := map[string]int{}
			var order []string
			now := t0
			for pass := 0; ; pass++ {
				if pass > 50 {
					t.Fatal("allocation does not converge")
				}
				allocs := checkedAllocate(t, a, now, nil)
				mustCheck(t, a)
				if len(allocs) == 0 {
					break
				}
				for _, al := range allocs {
					if n := need[al.FrameworkID]; al.Resources.Contains(n) {
						tasks[al.FrameworkID]++
						order = append(order, al.FrameworkID)
						a.Release(al.FrameworkID, al.Role, al.AgentID, al.Resources.Sub(n), 0, now)
					} else {
						a.Release(al.FrameworkID, al.Role, al.AgentID, al.Resources, time.Hour, now)
					}
					mustCheck(t, a)
				}
				now = now.Add(time.Second)
			}
			if diff := cmp.Diff(map[string]int{"A": 3, "B": 2}, tasks); diff != "" {
				t.Errorf("tasks (-want +got):\n%s", diff)
			}
			if order[0] != tt.wantFirstOffer {
				t.Errorf("first task went to %s, want %s", order[0], tt.wantFirstOffer)
			}
			if got, want := a.AgentAllocated("agent"), res("cpus:9;mem:14336"); !got.Equal(want) {
				t.Errorf("agent allocated %v, want %v", got, want)
			}
		})
	}
}

// TestHierarchicalRoles checks the role tree order with weights: one
// framework per role, six equal agents in one full pass, every offer kept.
func TestHierarchicalRoles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		weights map[string]float64
		want    map[string][]string // framework -> agents
	}{
		{
			name: "equal weights",
			want: map[string][]string{"db": {"a1", "a5"}, "ops": {"a2", "a4", "a6"}, "web": {"a3"}},
		},
		{
			name:    "eng weighs twice ops",
			weights: map[string]float64{"eng": 2},
			want:    map[string][]string{"db": {"a1", "a4"}, "ops": {"a2", "a5"}, "web": {"a3", "a6"}},
		},
		{
			name:    "weight of a child role",
			weights: map[string]float64{"eng/web": 3},
			// eng/web weighs 3 within eng, but eng against ops is 1:1.
			want: map[string][]string{"db": {"a1"}, "ops": {"a2", "a4", "a6"}, "web": {"a3", "a5"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Config{})
			for i := 1; i <= 6; i++ {
				a.AddAgent(fmt.Sprintf("a%d", i), res("cpus:1;mem:1024"))
			}
			a.AddFramework("web", []string{"eng/web"}, true)
			a.AddFramework("db", []string{"eng/db"}, true)
			a.AddFramework("ops", []string{"ops"}, true)
			for role, w := range tt.weights {
				a.SetWeight(role, w)
			}
			got := map[string][]string{}
			for _, o := range allocate(t, a, t0, nil) {
				got[o.Framework] = append(got[o.Framework], o.Agent)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("agents per framework (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRoleWithFrameworksAndChildren checks the virtual leaf: a role's own
// frameworks compete with its child roles by the role's own allocation.
func TestRoleWithFrameworksAndChildren(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	for i := 1; i <= 4; i++ {
		a.AddAgent(fmt.Sprintf("a%d", i), res("cpus:1;mem:1024"))
	}
	a.AddFramework("own", []string{"eng"}, true)
	a.AddFramework("child", []string{"eng/web"}, true)
	got := allocate(t, a, t0, nil)
	want := []offer{
		{"own", "eng", "a1", "cpus:1;mem:1024"}, // "." sorts before "web" at equal shares
		{"child", "eng/web", "a2", "cpus:1;mem:1024"},
		{"own", "eng", "a3", "cpus:1;mem:1024"},
		{"child", "eng/web", "a4", "cpus:1;mem:1024"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("offers (-want +got):\n%s", diff)
	}
	states := a.RoleStates()
	if len(states) != 2 || states[0].Name != "eng" || !states[0].Allocated.Equal(res("cpus:4;mem:4096")) ||
		!states[1].Allocated.Equal(res("cpus:2;mem:2048")) {
		t.Errorf("RoleStates = %+v", states)
	}
}

// TestFrameworksInsideRole checks the order of frameworks in one role:
// ascending dominant share, then id.
func TestFrameworksInsideRole(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.AddAgent("a2", res("cpus:4;mem:4096"))
	a.AddAgent("a3", res("cpus:4;mem:4096"))
	a.AddFramework("f2", nil, true)
	a.AddFramework("f1", nil, true)
	a.AddFramework("f3", nil, true)
	a.Claim("f1", "*", "a3", res("cpus:1"))
	got := allocate(t, a, t0, []string{"a1", "a2", "a3"})
	want := []offer{
		{"f2", "*", "a1", "cpus:4;mem:4096"},
		{"f3", "*", "a2", "cpus:4;mem:4096"},
		{"f1", "*", "a3", "cpus:3;mem:4096"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("offers (-want +got):\n%s", diff)
	}
}

func TestQuotaLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits map[string]string
		fws    map[string]string // framework -> role
		want   []offer
	}{
		{
			name:   "own limit clamps, unlimited scalars still offered",
			limits: map[string]string{"q": "cpus:3"},
			fws:    map[string]string{"f": "q"},
			want: []offer{
				{"f", "q", "a1", "cpus:2;mem:2048"},
				{"f", "q", "a2", "cpus:1;mem:2048"},
				{"f", "q", "a3", "mem:2048"},
				{"f", "q", "a4", "mem:2048"},
			},
		},
		{
			name:   "ancestor limit shared by children",
			limits: map[string]string{"eng": "cpus:3;mem:3072"},
			fws:    map[string]string{"x": "eng/a", "y": "eng/b", "z": "ops"},
			want: []offer{
				{"x", "eng/a", "a1", "cpus:2;mem:2048"},
				{"z", "ops", "a2", "cpus:2;mem:2048"},
				{"y", "eng/b", "a3", "cpus:1;mem:1024"},
				{"z", "ops", "a3", "cpus:1;mem:1024"},
				{"z", "ops", "a4", "cpus:2;mem:2048"},
			},
		},
		{
			name:   "tighter of child and ancestor",
			limits: map[string]string{"eng": "cpus:3;mem:3072", "eng/a": "cpus:0.5;mem:512"},
			fws:    map[string]string{"x": "eng/a"},
			want:   []offer{{"x", "eng/a", "a1", "cpus:0.5;mem:512"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Config{})
			for i := 1; i <= 4; i++ {
				a.AddAgent(fmt.Sprintf("a%d", i), res("cpus:2;mem:2048"))
			}
			for role, l := range tt.limits {
				a.SetQuotaLimit(role, res(l))
			}
			for fw, role := range tt.fws {
				a.AddFramework(fw, []string{role}, true)
			}
			got := allocate(t, a, t0, nil)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("offers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQuotaHeadroomReturnsOnRelease(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.SetQuotaLimit("q", res("cpus:1;mem:1024"))
	a.AddFramework("f", []string{"q"}, true)
	if diff := cmp.Diff([]offer{{"f", "q", "a1", "cpus:1;mem:1024"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("first pass (-want +got):\n%s", diff)
	}
	if got := allocate(t, a, t0, nil); got != nil {
		t.Fatalf("at the limit, got %v", got)
	}
	a.Release("f", "q", "a1", res("cpus:0.5;mem:512"), 0, t0)
	if diff := cmp.Diff([]offer{{"f", "q", "a1", "cpus:0.5;mem:512"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("after release (-want +got):\n%s", diff)
	}
	a.SetQuotaLimit("q", resources.Resources{})
	if diff := cmp.Diff([]offer{{"f", "q", "a1", "cpus:3;mem:3072"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("limit removed (-want +got):\n%s", diff)
	}
}

func TestFilters(t *testing.T) {
	t.Parallel()
	full := res("cpus:4;mem:4096;ports:[31000-31009]")
	t.Run("blocks until expiry", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", full)
		a.AddFramework("f", nil, true)
		o := allocate(t, a, t0, nil)
		if len(o) != 1 {
			t.Fatalf("got %v", o)
		}
		a.Release("f", "*", "a1", full, 10*time.Second, t0)
		mustCheck(t, a)
		if got := allocate(t, a, t0.Add(9*time.Second), nil); got != nil {
			t.Fatalf("filtered framework offered %v", got)
		}
		if got := allocate(t, a, t0.Add(10*time.Second), nil); len(got) != 1 || got[0].Resources != full.String() {
			t.Fatalf("after expiry got %v", got)
		}
	})
	t.Run("stops blocking once available grows beyond it", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", full)
		a.AddFramework("f", nil, true)
		allocate(t, a, t0, nil)
		task := res("cpus:1;mem:1024;ports:[31000-31000]")
		a.Release("f", "*", "a1", full.Sub(task), time.Hour, t0) // keeps the task
		if got := allocate(t, a, t0, nil); got != nil {
			t.Fatalf("filtered framework offered %v", got)
		}
		a.Release("f", "*", "a1", task, 0, t0) // the task ends
		mustCheck(t, a)
		if got := allocate(t, a, t0, nil); len(got) != 1 || got[0].Resources != full.String() {
			t.Fatalf("after the task ended got %v", got)
		}
	})
	t.Run("only the framework and role that declined", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", full)
		a.AddFramework("f", []string{"r1", "r2"}, true)
		a.AddFramework("g", []string{"r3"}, true)
		a.SetWeight("r1", 100) // r1 first while its share is 0
		o := allocate(t, a, t0, nil)
		if diff := cmp.Diff([]offer{{"f", "r1", "a1", full.String()}}, o); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		a.Release("f", "r1", "a1", full, time.Hour, t0)
		o = allocate(t, a, t0, nil)
		if diff := cmp.Diff([]offer{{"f", "r2", "a1", full.String()}}, o); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		a.Release("f", "r2", "a1", full, time.Hour, t0)
		o = allocate(t, a, t0, nil)
		if diff := cmp.Diff([]offer{{"g", "r3", "a1", full.String()}}, o); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
	t.Run("blocks a quota-clamped offer it contains", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", res("cpus:4;mem:4096"))
		a.SetQuotaLimit("q", res("cpus:1"))
		a.AddFramework("f", []string{"q"}, true)
		o := allocate(t, a, t0, nil)
		if diff := cmp.Diff([]offer{{"f", "q", "a1", "cpus:1;mem:4096"}}, o); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		a.Release("f", "q", "a1", res("cpus:1;mem:4096"), time.Hour, t0)
		if got := allocate(t, a, t0, nil); got != nil {
			t.Fatalf("filtered framework offered %v", got)
		}
	})
	t.Run("refuse zero installs nothing", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", full)
		a.AddFramework("f", nil, true)
		allocate(t, a, t0, nil)
		a.Release("f", "*", "a1", full, 0, t0)
		if got := allocate(t, a, t0, nil); len(got) != 1 {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("other agents unaffected", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", full)
		a.AddFramework("f", nil, true)
		allocate(t, a, t0, nil)
		a.Release("f", "*", "a1", full, time.Hour, t0)
		a.AddAgent("a2", full)
		o := allocate(t, a, t0, nil)
		if diff := cmp.Diff([]offer{{"f", "*", "a2", full.String()}}, o); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
}

func TestSuppressRevive(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.AddAgent("a2", res("cpus:4;mem:4096"))
	a.AddFramework("f", []string{"r1", "r2"}, true)

	a.Suppress("f", nil)
	if got := allocate(t, a, t0, nil); got != nil {
		t.Fatalf("suppressed framework offered %v", got)
	}
	a.Revive("f", []string{"r2"})
	got := allocate(t, a, t0, nil)
	if diff := cmp.Diff([]offer{{"f", "r2", "a1", "cpus:4;mem:4096"}, {"f", "r2", "a2", "cpus:4;mem:4096"}}, got); diff != "" {
		t.Fatalf("after reviving r2 (-want +got):\n%s", diff)
	}
	// Decline both with long filters, then Revive clears them.
	a.Release("f", "r2", "a1", res("cpus:4;mem:4096"), time.Hour, t0)
	a.Release("f", "r2", "a2", res("cpus:4;mem:4096"), time.Hour, t0)
	if got := allocate(t, a, t0, nil); got != nil {
		t.Fatalf("filtered, got %v", got)
	}
	a.Revive("f", []string{"r2"})
	mustCheck(t, a)
	if got := allocate(t, a, t0, nil); len(got) != 2 {
		t.Fatalf("revive did not clear filters: %v", got)
	}
	a.Suppress("f", []string{"r2"})
	a.Release("f", "r2", "a1", res("cpus:4;mem:4096"), 0, t0)
	if got := allocate(t, a, t0, nil); got != nil {
		t.Fatalf("r2 suppressed, r1 still suppressed, got %v", got)
	}
	a.Revive("f", nil)
	if diff := cmp.Diff([]offer{{"f", "r1", "a1", "cpus:4;mem:4096"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("after reviving all (-want +got):\n%s", diff)
	}
}

func TestInactive(t *testing.T) {
	t.Parallel()
	t.Run("framework", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", res("cpus:4;mem:4096"))
		a.AddAgent("a2", res("cpus:4;mem:4096"))
		a.AddFramework("f", nil, true)
		allocate(t, a, t0, []string{"a1"})
		a.DeactivateFramework("f")
		if got := allocate(t, a, t0, nil); got != nil {
			t.Fatalf("inactive framework offered %v", got)
		}
		if got := a.FrameworkAllocated("f"); !got.Equal(res("cpus:4;mem:4096")) {
			t.Fatalf("allocations not kept: %v", got)
		}
		a.ActivateFramework("f")
		if diff := cmp.Diff([]offer{{"f", "*", "a2", "cpus:4;mem:4096"}}, allocate(t, a, t0, nil)); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		a.AddFramework("g", nil, false)
		a.Release("f", "*", "a2", res("cpus:4;mem:4096"), time.Hour, t0)
		if got := allocate(t, a, t0, nil); got != nil {
			t.Fatalf("framework added inactive offered %v", got)
		}
	})
	t.Run("agent", func(t *testing.T) {
		a := New(Config{})
		a.AddAgent("a1", res("cpus:4;mem:4096"))
		a.AddAgent("a2", res("cpus:4;mem:4096"))
		a.AddFramework("f", nil, true)
		a.DeactivateAgent("a1")
		if diff := cmp.Diff([]offer{{"f", "*", "a2", "cpus:4;mem:4096"}}, allocate(t, a, t0, nil)); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		if got := a.ClusterTotal(); !got.Equal(res("cpus:8;mem:8192")) {
			t.Fatalf("inactive agent left the cluster total: %v", got)
		}
		a.ActivateAgent("a1")
		if diff := cmp.Diff([]offer{{"f", "*", "a1", "cpus:4;mem:4096"}}, allocate(t, a, t0, []string{"a1"})); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
}

func TestMinAllocatable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		min   resources.Resources
		agent string
		want  bool
	}{
		{"default: memory enough", resources.Resources{}, "cpus:0.005;mem:32", true},
		{"default: cpus enough", resources.Resources{}, "cpus:0.01", true},
		{"default: too little", resources.Resources{}, "cpus:0.009;mem:31;disk:100000;ports:[1-100]", false},
		{"custom cpus only", res("cpus:1"), "cpus:0.5;mem:100000", false},
		{"custom cpus only, enough", res("cpus:1"), "cpus:1", true},
		{"ports in the config are ignored", res("cpus:1;ports:[1-2]"), "cpus:1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(Config{MinAllocatable: tt.min})
			a.AddAgent("a1", res(tt.agent))
			a.AddFramework("f", nil, true)
			if got := len(allocate(t, a, t0, nil)) == 1; got != tt.want {
				t.Errorf("offered = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRemoveAgent(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.AddAgent("a2", res("cpus:2;mem:2048"))
	a.AddFramework("f", []string{"eng/web"}, true)
	allocate(t, a, t0, nil)
	a.Release("f", "eng/web", "a1", res("cpus:4;mem:4096"), time.Hour, t0)
	a.RemoveAgent("a1")
	mustCheck(t, a)
	if got := a.ClusterTotal(); !got.Equal(res("cpus:2;mem:2048")) {
		t.Errorf("cluster total %v", got)
	}
	if got := a.FrameworkAllocated("f"); !got.Equal(res("cpus:2;mem:2048")) {
		t.Errorf("framework allocated %v", got)
	}
	a.RemoveAgent("a2")
	mustCheck(t, a)
	if got := a.FrameworkAllocated("f"); !got.IsEmpty() {
		t.Errorf("framework allocated %v after its agents left", got)
	}
	// The same id comes back: no filter, no allocation survives.
	a.AddAgent("a1", res("cpus:1;mem:1024"))
	if diff := cmp.Diff([]offer{{"f", "eng/web", "a1", "cpus:1;mem:1024"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	a.RemoveAgent("nope") // ignored
	mustCheck(t, a)
}

func TestRemoveFramework(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.AddAgent("a2", res("cpus:4;mem:4096"))
	a.AddFramework("f", []string{"eng/web", "ops"}, true)
	a.SetWeight("ops", 2)
	allocate(t, a, t0, nil)
	a.Release("f", "ops", "a2", res("cpus:4;mem:4096"), time.Hour, t0)
	a.RemoveFramework("f")
	mustCheck(t, a)
	if got := a.AgentAllocated("a1"); !got.IsEmpty() {
		t.Errorf("agent still allocated %v", got)
	}
	var names []string
	for _, st := range a.RoleStates() {
		names = append(names, st.Name)
	}
	// eng and eng/web are gone; ops stays because of its weight.
	if diff := cmp.Diff([]string{"ops"}, names); diff != "" {
		t.Errorf("roles (-want +got):\n%s", diff)
	}
	// A new framework with the same id starts clean (no filters).
	a.AddFramework("f", []string{"ops"}, true)
	if got := allocate(t, a, t0, nil); len(got) != 2 {
		t.Errorf("got %v", got)
	}
}

func TestClaimBeforeAddFramework(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:8;mem:8192"))
	a.AddAgent("a2", res("cpus:8;mem:8192"))
	a.Claim("late", "r", "a1", res("cpus:6;mem:1024"))
	a.Claim("ghost", "r", "nowhere", res("cpus:1")) // unknown agent: ignored
	mustCheck(t, a)
	if got := a.FrameworkAllocated("late"); !got.Equal(res("cpus:6;mem:1024")) {
		t.Fatalf("claimed %v", got)
	}
	a.AddFramework("other", []string{"s"}, true)
	// "late" is not added: it gets nothing, but its share counts for r.
	got := allocate(t, a, t0, nil)
	want := []offer{
		{"other", "s", "a1", "cpus:2;mem:7168"},
		{"other", "s", "a2", "cpus:8;mem:8192"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	a.Release("other", "s", "a2", res("cpus:8;mem:8192"), 0, t0)
	a.AddFramework("late", []string{"r"}, true)
	if diff := cmp.Diff([]offer{{"late", "r", "a2", "cpus:8;mem:8192"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("after AddFramework (-want +got):\n%s", diff)
	}
	var r RoleState
	for _, st := range a.RoleStates() {
		if st.Name == "r" {
			r = st
		}
	}
	if !r.Allocated.Equal(res("cpus:14;mem:9216")) || !slices.Equal(r.Frameworks, []string{"late"}) {
		t.Errorf("role r = %+v", r)
	}
}

func TestReleaseMoreThanHeld(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096;ports:[1-10]"))
	a.AddFramework("f", nil, true)
	a.Claim("f", "*", "a1", res("cpus:1;mem:100;ports:[2-3]"))
	a.Release("f", "*", "a1", res("cpus:3;mem:50;ports:[1-5]"), 0, t0)
	mustCheck(t, a)
	if got, want := a.AgentAllocated("a1"), res("mem:50"); !got.Equal(want) {
		t.Errorf("allocated %v, want %v", got, want)
	}
	a.Release("f", "*", "a1", res("cpus:100;mem:100000"), 0, t0)
	a.Release("f", "nope", "a1", res("cpus:1"), time.Hour, t0)
	a.Release("nobody", "*", "a1", res("cpus:1"), time.Hour, t0)
	mustCheck(t, a)
	if got := a.AgentAllocated("a1"); !got.IsEmpty() {
		t.Errorf("allocated %v, want nothing", got)
	}
	if got := a.AgentAvailable("a1"); !got.Equal(res("cpus:4;mem:4096;ports:[1-10]")) {
		t.Errorf("available %v", got)
	}
}

func TestUpdateFrameworkRoles(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.AddAgent("a2", res("cpus:4;mem:4096"))
	a.AddFramework("f", []string{"old"}, true)
	allocate(t, a, t0, []string{"a1"})
	a.UpdateFrameworkRoles("f", []string{"new"})
	mustCheck(t, a)
	// Still accounted to "old" until released; offers go to "new".
	if diff := cmp.Diff([]offer{{"f", "new", "a2", "cpus:4;mem:4096"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	a.Release("f", "old", "a1", res("cpus:4;mem:4096"), time.Hour, t0)
	mustCheck(t, a)
	var names []string
	for _, st := range a.RoleStates() {
		names = append(names, st.Name)
	}
	if diff := cmp.Diff([]string{"new"}, names); diff != "" {
		t.Errorf("roles (-want +got):\n%s", diff)
	}
}

func TestUpdateAgentTotal(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096"))
	a.AddFramework("f", nil, true)
	a.Claim("f", "*", "a1", res("cpus:3"))
	a.UpdateAgentTotal("a1", res("cpus:2;mem:4096")) // over-committed in cpus
	mustCheck(t, a)
	if diff := cmp.Diff([]offer{{"f", "*", "a1", "mem:4096"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	a.AddAgent("a1", res("cpus:8;mem:4096")) // re-adding updates the total
	if diff := cmp.Diff([]offer{{"f", "*", "a1", "cpus:5"}}, allocate(t, a, t0, nil)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if got := a.ClusterTotal(); !got.Equal(res("cpus:8;mem:4096")) {
		t.Errorf("cluster total %v", got)
	}
}

// TestEventDrivenMatchesFullPass checks that passes over explicit agent
// lists give the same offers as a full pass over the same agents in the
// same order.
func TestEventDrivenMatchesFullPass(t *testing.T) {
	t.Parallel()
	build := func() *Allocator {
		a := New(Config{})
		for i := range 20 {
			a.AddAgent(fmt.Sprintf("a%02d", i), res(fmt.Sprintf("cpus:%d;mem:%d", 1+i%4, 1024*(1+i%3))))
		}
		for i := range 7 {
			a.AddFramework(fmt.Sprintf("f%d", i), []string{[]string{"eng/web", "eng/db", "ops", "*"}[i%4]}, true)
		}
		a.SetWeight("eng", 2)
		a.SetQuotaLimit("ops", res("cpus:5"))
		return a
	}
	full, event := build(), build()
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("a%02d", i))
	}
	for round := range 5 {
		now := t0.Add(time.Duration(round) * time.Second)
		got1 := allocate(t, full, now, nil)
		var got2 []offer
		for _, id := range ids {
			got2 = append(got2, allocate(t, event, now, []string{id})...)
		}
		if diff := cmp.Diff(got1, got2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round %d: full vs event-driven (-full +event):\n%s", round, diff)
		}
		// Decline every other offer with a filter, keep the rest.
		for i, o := range got1 {
			if i%2 == 0 {
				for _, a := range []*Allocator{full, event} {
					a.Release(o.Framework, o.Role, o.Agent, res(o.Resources), 3*time.Second, now)
				}
			}
		}
	}
}

func TestSeedShufflesDeterministically(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []string {
		a := New(Config{Seed: seed})
		for i := range 30 {
			a.AddAgent(fmt.Sprintf("a%02d", i), res("cpus:1;mem:1024"))
		}
		a.AddFramework("f", nil, true)
		var agents []string
		for _, o := range allocate(t, a, t0, nil) {
			agents = append(agents, o.Agent)
		}
		return agents
	}
	inOrder := run(0)
	if !slices.IsSorted(inOrder) || len(inOrder) != 30 {
		t.Fatalf("seed 0 must keep insertion order: %v", inOrder)
	}
	s1, s1again, s2 := run(1), run(1), run(2)
	if !slices.Equal(s1, s1again) {
		t.Errorf("same seed, different order:\n%v\n%v", s1, s1again)
	}
	if slices.IsSorted(s1) || slices.Equal(s1, s2) {
		t.Errorf("seeds do not shuffle: %v / %v", s1, s2)
	}
}

func TestRoleStates(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:10;mem:1000"))
	a.AddFramework("f", []string{"eng/web"}, true)
	a.AddFramework("g", []string{"eng/web", "*"}, true)
	a.SetWeight("eng", 2)
	a.SetQuotaLimit("ops", res("cpus:4"))
	a.Claim("f", "eng/web", "a1", res("cpus:5;mem:100"))
	got := a.RoleStates()
	want := []RoleState{
		{Name: "*", Weight: 1, Frameworks: []string{"g"}},
		{Name: "eng", Weight: 2, Allocated: res("cpus:5;mem:100"), Share: 0.25},
		{Name: "eng/web", Weight: 1, Allocated: res("cpus:5;mem:100"), Share: 0.5, Frameworks: []string{"f", "g"}},
		{Name: "ops", Weight: 1, QuotaLimit: res("cpus:4")},
	}
	opt := cmp.Comparer(func(x, y resources.Resources) bool { return x.Equal(y) })
	if diff := cmp.Diff(want, got, opt); diff != "" {
		t.Errorf("RoleStates (-want +got):\n%s", diff)
	}
}

func TestRoleNamesNormalized(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:1"))
	a.AddFramework("f", []string{"", "/eng/"}, true)
	var names []string
	for _, st := range a.RoleStates() {
		names = append(names, st.Name)
	}
	if got := strings.Join(names, ","); got != "*,eng" {
		t.Errorf("roles %s", got)
	}
}
