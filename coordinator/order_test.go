package coordinator

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/maintenance"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/protocol"
)

// gateStore is a memStore that holds one write, the first that matches
// hold, until release is closed: held is closed when it arrives. The
// other writes go through.
type gateStore struct {
	*memStore
	mu      sync.Mutex
	hold    func([]store.Mutation) bool
	held    chan struct{}
	release chan struct{}
}

func newGateStore(hold func([]store.Mutation) bool) *gateStore {
	return &gateStore{memStore: newMemStore(), hold: hold, held: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateStore) Apply(ctx context.Context, mutations ...store.Mutation) error {
	g.mu.Lock()
	hold := g.hold != nil && g.hold(mutations)
	if hold {
		g.hold = nil
	}
	g.mu.Unlock()
	if hold {
		close(g.held)
		<-g.release
	}
	return g.memStore.Apply(ctx, mutations...)
}

// arm makes the next write that matches hold wait for release.
func (g *gateStore) arm(hold func([]store.Mutation) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = hold
}

// writesTo reports whether a write touches bucket.
func writesTo(bucket string) func([]store.Mutation) bool {
	return func(ms []store.Mutation) bool {
		for _, m := range ms {
			if m.Bucket == bucket {
				return true
			}
		}
		return false
	}
}

// newGatedDomain is a domain on a gateStore with a logical clock.
func newGatedDomain(t *testing.T) (*domain, *gateStore, *clock) {
	t.Helper()
	st := newGateStore(nil)
	clk := &clock{now: testNow}
	c, err := New(Config{Store: st, Logger: testLogger(), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &domain{t: t, c: c, st: st.memStore}, st, clk
}

// race runs first until its write is held by st, then second until it
// either finished (no ordering: it overtook first) or waits for first's
// turn; then it releases first's write and waits for both.
func race(t *testing.T, c *Coordinator, st *gateStore, first, second func()) {
	t.Helper()
	waiting := make(chan struct{}, 1)
	c.turns.mu.Lock()
	c.turns.onWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	c.turns.mu.Unlock()
	firstDone, secondDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(firstDone); first() }()
	<-st.held
	go func() { defer close(secondDone); second() }()
	select {
	case <-waiting:
	case <-secondDone:
	}
	close(st.release)
	<-firstDone
	<-secondDone
}

// restart returns a coordinator recovered from d's registry.
func restart(t *testing.T, d *domain, clk *clock) *Coordinator {
	t.Helper()
	c, err := New(Config{Store: d.st, Logger: testLogger(), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTeardownDuringFailoverWrite: a framework past its failover timeout
// fails over while the tick would tear it down. The failover's record is
// being written when the tick runs: the tick waits for the failover's
// turn, finds the framework connected again and keeps it, and a restart
// finds it as memory has it. Without turns (persistMu removed and
// nothing in its place) the tick tears it down in memory and writes its
// completed record, then the failover's record overwrites it: a restart
// would revive a framework that memory tore down.
func TestTeardownDuringFailoverWrite(t *testing.T) {
	t.Parallel()
	d, st, clk := newGatedDomain(t)
	fw, sub, err := d.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 10})
	if err != nil {
		t.Fatal(err)
	}
	id := fw.id()
	d.c.subscriptionEnded(fw, sub)
	clk.advance(11 * time.Second)
	st.arm(writesTo(store.BucketFrameworks))
	var failoverErr error
	race(t, d.c, st,
		func() {
			_, _, failoverErr = d.subscribe(&slacklinev1.FrameworkInfo{Id: id, Name: "fw", FailoverTimeoutSeconds: 10})
		},
		func() { d.c.checkTimeouts(context.Background()) })
	live := d.framework(id).state
	if recorded := d.frameworkRecord(id).GetCompleted(); recorded != (live == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED) {
		t.Fatalf("memory has the framework %v, the registry's record has completed=%v", live, recorded)
	}
	if failoverErr != nil || live != slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
		t.Fatalf("failover: err %v, framework %v; want it connected (it asked before the tick decided)", failoverErr, live)
	}
	r := restart(t, d, clk)
	if got := r.frameworks[id]; got == nil || got.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
		t.Fatalf("after a restart: %v, want the framework known and not torn down", got)
	}
}

// teardown calls the Teardown handler for the framework with the stream
// id of sub.
func teardown(c *Coordinator, id string, sub *subscription) error {
	req := connect.NewRequest(&slacklinev1.TeardownRequest{FrameworkId: id})
	req.Header().Set(protocol.StreamIDHeader, sub.id)
	_, err := (schedulerService{c}).Teardown(context.Background(), req)
	return err
}

// TestTeardownDuringSubscriptionWrite: the framework's Teardown, sent on
// its current stream, arrives while a failover's record (a new stream) is
// being written. Authorized (its stream is still the current one), it
// waits for the failover's turn, then finds its stream superseded and is
// refused: memory and the registry both have the framework connected.
// Without the framework's turn it would tear the framework down in memory
// and write its completed record, then the failover's record would
// overwrite it. A Teardown on the new stream then tears it down, in memory
// and in the registry (and so after a restart).
func TestTeardownDuringSubscriptionWrite(t *testing.T) {
	t.Parallel()
	d, st, clk := newGatedDomain(t)
	fw, sub, err := d.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 10})
	if err != nil {
		t.Fatal(err)
	}
	id := fw.id()
	st.arm(writesTo(store.BucketFrameworks))
	var newSub *subscription
	var teardownErr error
	race(t, d.c, st,
		func() {
			_, newSub, err = d.subscribe(&slacklinev1.FrameworkInfo{Id: id, Name: "fw", FailoverTimeoutSeconds: 10})
		},
		func() { teardownErr = teardown(d.c, id, sub) })
	if recorded, live := d.frameworkRecord(id).GetCompleted(), d.framework(id).state; recorded != (live == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED) {
		t.Fatalf("memory has the framework %v, the registry's record has completed=%v", live, recorded)
	}
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	if connect.CodeOf(teardownErr) != connect.CodePermissionDenied || d.framework(id).state != slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
		t.Fatalf("teardown on the superseded stream: %v, framework %v; want it refused and the framework connected", teardownErr, d.framework(id).state)
	}
	if err := teardown(d.c, id, newSub); err != nil {
		t.Fatal(err)
	}
	if d.framework(id).state != slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED || !d.frameworkRecord(id).GetCompleted() {
		t.Fatalf("framework %v, record completed %v: want both torn down", d.framework(id).state, d.frameworkRecord(id).GetCompleted())
	}
	if got := restart(t, d, clk).frameworks[id]; got == nil || got.state != slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
		t.Fatalf("after a restart: %v, want the framework torn down", got)
	}
}

// TestConcurrentWeightUpdates: two weight updates of one role, the
// first's record held in its write while the second asks: both end, in
// memory and in the registry (and so after a restart), with the weight
// asked last.
func TestConcurrentWeightUpdates(t *testing.T) {
	t.Parallel()
	d, st, clk := newGatedDomain(t)
	if _, _, err := d.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", Roles: []string{"r"}}); err != nil {
		t.Fatal(err)
	}
	weight := func(c *Coordinator) float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, rs := range c.core.Allocator().RoleStates() {
			if rs.Name == "r" {
				return rs.Weight
			}
		}
		return 0
	}
	st.arm(writesTo(store.BucketWeights))
	var errs [2]error
	race(t, d.c, st,
		func() {
			errs[0] = d.c.updateRoles(context.Background(), "weights", []core.RoleConfig{{Role: "r", Weight: 2}})
		},
		func() {
			errs[1] = d.c.updateRoles(context.Background(), "weights", []core.RoleConfig{{Role: "r", Weight: 3}})
		})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	raw, _ := d.st.Load(context.Background(), store.BucketWeights)
	if got := weight(d.c); got != 3 || string(raw["r"]) != strconv.Itoa(3) {
		t.Fatalf("weight %v in memory, %q in the registry; want 3 in both", got, raw["r"])
	}
	if got := weight(restart(t, d, clk)); got != 3 {
		t.Fatalf("weight %v after a restart, want 3", got)
	}
}

// TestAnswerDuringScheduleChange: an inverse-offer answer
// (answerInverseOffers, as AcceptInverseOffers calls it) made while a
// schedule change's record is written is kept: it waits for the change's
// turn (the maintenance state's scope), so the transition, made from the
// state before the answer, is not installed over it.
func TestAnswerDuringScheduleChange(t *testing.T) {
	t.Parallel()
	d, st, clk := newGatedDomain(t)
	d.mustRegister(registerRequest("", "host-a", "cpus:4;mem:4096"))
	fwID, sub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw"})
	d.allocate() // an offer on host-a: fw uses it
	window := machineWindow(clk.Now().Add(time.Hour), time.Hour, "host-a")
	if err := d.updateSchedule(window); err != nil {
		t.Fatal(err)
	}
	d.allocate()
	var inverse string
	for _, ev := range events(sub) {
		for _, io := range ev.GetOffers().GetInverseOffers() {
			inverse = io.GetId()
		}
	}
	if inverse == "" {
		t.Fatal("no inverse offer for host-a")
	}
	header := http.Header{}
	header.Set(protocol.StreamIDHeader, sub.id)
	st.arm(writesTo(store.BucketMaintenance))
	var answerErr error
	race(t, d.c, st,
		func() {
			if err := d.updateSchedule(window, machineWindow(clk.Now(), time.Hour, "host-b")); err != nil {
				t.Error(err)
			}
		},
		func() {
			answerErr = d.c.answerInverseOffers(context.Background(), header, fwID, []string{inverse}, nil, maintenance.StatusAccept)
		})
	if answerErr != nil {
		t.Fatalf("accept: %v", answerErr)
	}
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if _, ok := d.c.core.Maintenance().Answers(maintenance.Machine{Hostname: "host-a"})[fwID]; !ok || len(d.c.core.Maintenance().Machines()) != 2 {
		t.Fatalf("answers %v, machines %v: want the answer kept and both machines scheduled", d.c.core.Maintenance().Answers(maintenance.Machine{Hostname: "host-a"}), d.c.core.Maintenance().Machines())
	}
}

// TestTurnsOrder: turns of one scope run in the order asked, turns of
// other scopes do not wait for them, and a turn of every scope waits for
// all and is waited for by all.
func TestTurnsOrder(t *testing.T) {
	t.Parallel()
	c := newDomain(t).c
	waited := make(chan struct{}, 3)
	c.turns.mu.Lock()
	c.turns.onWait = func() { waited <- struct{}{} }
	c.turns.mu.Unlock()
	a1 := c.takeTurn(scopeRoles)
	p1 := c.takeTurn(scopeProfiles) // another scope: no wait
	if len(waited) != 0 {
		t.Fatal("a turn of another scope waited")
	}
	got := make(chan string, 3)
	a2Done, allDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a2Done)
		done := c.takeTurn(scopeRoles)
		got <- "a2"
		done()
	}()
	<-waited // a2 asked, behind a1
	go func() {
		defer close(allDone)
		done := c.takeTurn() // every scope: behind a2 and p1
		got <- "all"
		done()
	}()
	<-waited
	got <- "a1"
	a1()
	<-a2Done
	select {
	case <-allDone:
		t.Fatal("the turn of every scope ran while a turn of profiles was held")
	default:
	}
	p1()
	<-allDone
	if first, second, third := <-got, <-got, <-got; first != "a1" || second != "a2" || third != "all" {
		t.Fatalf("order %s %s %s, want a1 a2 all", first, second, third)
	}
	// A turn asked after the turn of every scope follows it.
	c.takeTurn(scopeRoles)()
	c.turns.mu.Lock()
	defer c.turns.mu.Unlock()
	if len(c.turns.last) != 0 || c.turns.all != nil || c.turns.waits != 2 {
		t.Fatalf("turns left after all ended: %v %v, waits %d (want 2)", c.turns.last, c.turns.all, c.turns.waits)
	}
}

// TestPanicInTurnCrashes: a turn holder that panics while it holds c.mu
// (several lock mu without a deferred unlock) unwinds through its
// deferred done, so the panic reaches the goroutine's top and crashes the
// process. Ending a turn took c.mu before: the deferred done blocked on
// the mu its own goroutine held and the panic never propagated (this test
// hung on that code).
func TestPanicInTurnCrashes(t *testing.T) {
	t.Parallel()
	c := newDomain(t).c
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		defer c.takeTurn(scopeRoles)()
		c.mu.Lock()
		panic("boom")
	}()
	if got := <-recovered; got != "boom" {
		t.Fatalf("recovered %v, want the turn holder's panic", got)
	}
	// The turn ended: another of its scope runs.
	c.takeTurn(scopeRoles)()
}

// TestTurnSameScopeTwice: asking one scope twice in one takeTurn call is
// a bug that panics; it waited for its own channel, forever, before.
func TestTurnSameScopeTwice(t *testing.T) {
	t.Parallel()
	c := newDomain(t).c
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		c.takeTurn(scopeMaintenance, scopeFramework("f"), scopeMaintenance)()
	}()
	if got, _ := (<-recovered).(string); !strings.Contains(got, `scope "maintenance"`) {
		t.Fatalf("recovered %q, want a panic naming the scope asked twice", got)
	}
	c.takeTurn(scopeMaintenance)() // nothing left held
}

// TestPrincipalLimitRace: two new frameworks of one principal, one naming
// it and one leaving the principal empty, the first's record held in its
// write while the second asks: with MaxFrameworksPerPrincipal 1 one is
// refused. Both take the turn of the principal they will be bound to (the
// caller's); the one leaving it empty took the turn "principal/" before,
// checked the same count concurrently, and both were admitted.
func TestPrincipalLimitRace(t *testing.T) {
	t.Parallel()
	pol, err := auth.ParsePolicy([]byte(insiderPolicy))
	if err != nil {
		t.Fatal(err)
	}
	st := newGateStore(nil)
	c, err := New(Config{Store: st, Logger: testLogger(), Now: (&clock{now: testNow}).Now, Authz: auth.New(pol),
		Limits: Limits{MaxFrameworksPerPrincipal: 1}})
	if err != nil {
		t.Fatal(err)
	}
	d := &domain{t: t, c: c, st: st.memStore}
	st.arm(writesTo(store.BucketFrameworks))
	var errs [2]error
	race(t, c, st,
		func() {
			_, _, errs[0] = d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "a", Principal: "batch", Roles: []string{"batch"}})
		},
		func() {
			_, _, errs[1] = d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}})
		})
	admitted := 0
	c.mu.Lock()
	for _, fw := range c.frameworks {
		if fw.info.GetPrincipal() == "batch" && fw.state != slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
			admitted++
		}
	}
	c.mu.Unlock()
	if admitted != 1 || (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("%d frameworks of principal batch admitted (limit 1), errors %v", admitted, errs)
	}
}

// TestAutoDownDecidesInItsTurn: a machine ready for automatic DOWN (its
// window started, nobody uses it) whose window an operator pushes out
// while autoDown waits for the maintenance state's turn stays DRAINING:
// autoDown decides again in its turn. It decided before its turn and
// took the machine DOWN from the newer state before.
func TestAutoDownDecidesInItsTurn(t *testing.T) {
	t.Parallel()
	d, _, clk := newGatedDomain(t)
	if err := d.updateSchedule(machineWindow(clk.Now().Add(-time.Minute), time.Hour, "host-a")); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	d.c.turns.mu.Lock()
	d.c.turns.onWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	d.c.turns.mu.Unlock()
	hold := d.c.takeTurn(scopeMaintenance)
	autoDone := make(chan struct{})
	go func() { defer close(autoDone); d.c.autoDown(context.Background()) }()
	<-waiting // autoDown found host-a ready and waits for its turn
	later := machineWindow(clk.Now().Add(time.Hour), time.Hour, "host-a")
	if err := d.c.changeMaintenanceInTurn(context.Background(), "test", func() transition {
		return transitionWith((*maintenance.State).UpdateSchedule, scheduleOf(later))
	}); err != nil {
		t.Fatal(err)
	}
	hold()
	<-autoDone
	if got := d.mode("host-a"); got != slacklinev1.MachineMode_MACHINE_MODE_DRAINING {
		t.Fatalf("host-a %v after its window was pushed out, want DRAINING", got)
	}
}

// TestUnauthorizedQueuesNoTurn: a Teardown or an inverse-offer answer from
// a caller not authorized for the framework (a stream id that is not its
// current one) is refused without taking a turn, while the maintenance
// state's turn is held. Both asked their turns first before and so
// waited (this test hung on that code).
func TestUnauthorizedQueuesNoTurn(t *testing.T) {
	t.Parallel()
	d, _, _ := newGatedDomain(t)
	id, _ := d.connectFramework(&slacklinev1.FrameworkInfo{Name: "fw"})
	hold := d.c.takeTurn(scopeMaintenance)
	defer hold()
	stranger := &subscription{outbox: newOutbox[*slacklinev1.Event]()}
	if err := teardown(d.c, id, stranger); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("teardown on another stream: %v, want PermissionDenied", err)
	}
	header := http.Header{}
	header.Set(protocol.StreamIDHeader, stranger.id)
	if err := d.c.answerInverseOffers(context.Background(), header, id, []string{"I1"}, nil, maintenance.StatusAccept); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("answer on another stream: %v, want PermissionDenied", err)
	}
	d.c.turns.mu.Lock()
	defer d.c.turns.mu.Unlock()
	if d.c.turns.waits != 0 {
		t.Fatalf("%d turns waited, want none", d.c.turns.waits)
	}
}
