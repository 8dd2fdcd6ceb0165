package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// TestFloodingFrameworkDoesNotStarveOthers: one framework floods Reconcile
// and Accept from many goroutines over its connection; another framework,
// on a connection of its own, still gets every call answered (Reconcile,
// Revive, an offer accepted and its task sent to the agent) while the
// flood goes on. The flooder is held to Limits.MaxConcurrentCallsPerCaller:
// its surplus calls wait their turn (counted in
// slackline_coordinator_limit_hits_total{limit="concurrent_calls"}) or are
// refused with ResourceExhausted, never failed otherwise. Nothing here
// depends on timing: the flood runs until the limit is seen hit and goes
// on until the other framework's calls are done, and those are checked for
// completion (within a minute: liveness), not for speed.
func TestFloodingFrameworkDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(t.TempDir())
	cfg.Limits.MaxConcurrentCallsPerCaller = 2
	// On the wall clock, beside a flood: the agent must not
	// be found silent however slow the machine (this test is about
	// fairness, not liveness).
	cfg.AgentTimeout = time.Hour
	tc := startCluster(t, cfg)
	flooder := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "flooder"})
	// The flooder takes no offers, so that the agent's go to the victim.
	if _, err := flooder.client.Suppress(context.Background(), call(flooder, &slacklinev1.SuppressRequest{FrameworkId: flooder.id})); err != nil {
		t.Fatal(err)
	}
	agent := tc.registerAgent("host", "cpus:1;mem:128")
	victim := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "victim"})
	// A caller is a connection (calls are not authenticated here): each
	// framework makes its calls over an HTTP/2 connection of its own.
	flooder.client = slacklinev1connect.NewSchedulerServiceClient(tc.h2cClient(), tc.url)
	victim.client = slacklinev1connect.NewSchedulerServiceClient(tc.h2cClient(), tc.url)
	go func() { // the flooder reads its events, so only the call limit holds it back
		for range flooder.events {
		}
	}()

	// Calls that keep the coordinator busy for a while (each answers or
	// looks up 500 tasks or offers), so that the flooder's calls overlap at
	// the coordinator rather than only in its connection.
	var unknownTasks []*slacklinev1.ReconcileTask
	var unknownOffers []string
	for i := range 500 {
		unknownTasks = append(unknownTasks, &slacklinev1.ReconcileTask{TaskId: fmt.Sprint("unknown-", i)})
		unknownOffers = append(unknownOffers, fmt.Sprint("no-such-offer-", i))
	}
	ctx, stopFlood := context.WithCancel(context.Background())
	var (
		flood             sync.WaitGroup
		answered, refused atomic.Int64
		unexpected        = make(chan error, 1)
	)
	// floodCallers goroutines: four times the flooder's limit, so that
	// its surplus always waits, without burning the CPU the package's
	// other parallel tests run on (64 made this test 9 s at load 40).
	for i := range floodCallers {
		flood.Go(func() {
			for ctx.Err() == nil {
				var err error
				if i%2 == 0 {
					_, err = flooder.client.Reconcile(ctx, call(flooder, &slacklinev1.ReconcileRequest{FrameworkId: flooder.id, Tasks: unknownTasks}))
				} else {
					// Offers that do not exist: answered, changing nothing.
					_, err = flooder.client.Accept(ctx, call(flooder, &slacklinev1.AcceptRequest{
						FrameworkId: flooder.id, OfferIds: unknownOffers}))
				}
				switch {
				case err == nil:
					answered.Add(1)
				case connect.CodeOf(err) == connect.CodeResourceExhausted:
					refused.Add(1)
				case ctx.Err() == nil:
					select {
					case unexpected <- err:
					default:
					}
				}
			}
		})
	}
	defer func() {
		stopFlood()
		flood.Wait()
	}()

	for waits := 0.0; waits == 0; waits = limitHitCount(t, tc.c, "concurrent_calls") {
		select {
		case err := <-unexpected:
			t.Fatalf("flooder's call failed: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	before := limitHitCount(t, tc.c, "concurrent_calls")

	// Starved calls would hang: a generous bound turns that into a failure
	// (it measures liveness, not speed). One minute was missed once at
	// load 58, in -count runs beside the package's other parallel tests:
	// the flooder's goroutines (64 then) re-encode 500-entry calls as fast as they
	// are refused, and the victim's 40 calls share the CPU with them.
	vctx, cancel := context.WithTimeout(context.Background(), victimCallsTimeout)
	defer cancel()
	victimStart := time.Now()
	for i := range 20 {
		if _, err := victim.client.Reconcile(vctx, call(victim, &slacklinev1.ReconcileRequest{FrameworkId: victim.id})); err != nil {
			t.Fatalf("victim's Reconcile %d after %v: %v (flooder meanwhile: %d calls answered, %d refused)", i, time.Since(victimStart), err, answered.Load(), refused.Load())
		}
		if _, err := victim.client.Revive(vctx, call(victim, &slacklinev1.ReviveRequest{FrameworkId: victim.id})); err != nil {
			t.Fatalf("victim's Revive %d after %v: %v (flooder meanwhile: %d calls answered, %d refused)", i, time.Since(victimStart), err, answered.Load(), refused.Load())
		}
	}
	t.Logf("the victim's 40 calls took %v beside the flood", time.Since(victimStart))
	offer := victim.next(func(ev *slacklinev1.Event) bool {
		offers := ev.GetOffers().GetOffers()
		return len(offers) > 0 && offers[0].GetAgentId() == agent.id
	}).GetOffers().GetOffers()[0]
	if err := launch(victim, offer, nil, taskInfo("t1", "cpus:0.5;mem:64")); err != nil {
		t.Fatalf("victim's Accept: %v", err)
	}
	if run := agent.nextCommand().GetRunTask(); run.GetTask().GetTaskId() != "t1" {
		t.Fatalf("agent got %v, want the victim's task t1", run)
	}

	// Whether new waits began during the victim's calls depends on
	// scheduling (the flooder's surplus may all be waiting already): only
	// logged. The flood was held at the limit before they started and goes
	// on until after they ended.
	t.Logf("concurrent_calls limit hits: %v before the victim's calls, %v after", before, limitHitCount(t, tc.c, "concurrent_calls"))
	stopFlood()
	flood.Wait()
	select {
	case err := <-unexpected:
		t.Fatalf("flooder's call failed: %v", err)
	default:
	}
	if answered.Load() == 0 {
		t.Errorf("none of the flooder's calls was answered (%d refused): waiting calls should get their turn", refused.Load())
	}
	t.Logf("flooder: %d calls answered, %d refused with ResourceExhausted", answered.Load(), refused.Load())
}

// victimCallsTimeout bounds the victim's calls beside the flood: they take
// well under a second on a quiet machine; the bound only ends a starved run.
const victimCallsTimeout = 5 * time.Minute

// floodCallers is how many goroutines make the flooder's calls.
const floodCallers = 8

// h2cClient returns a client of the cluster that speaks cleartext HTTP/2
// only: its calls share one connection, so the coordinator sees one
// caller.
func (tc *testCluster) h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: tc.listener.dial}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tc.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// limitHitCount reads slackline_coordinator_limit_hits_total{limit} from
// the coordinator's metrics registry.
func limitHitCount(t *testing.T, c *Coordinator, limit string) float64 {
	t.Helper()
	families, err := c.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "slackline_coordinator_limit_hits_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
