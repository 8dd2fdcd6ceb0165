package coordinator

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestSubscriptionWaitsForNoOther: a framework's failover waits for its
// framework's turn (held here as a teardown's would be, while its record
// is written); another framework subscribes meanwhile, on another
// subscriber goroutine. Subscriptions ran one at a time on one goroutine
// before: the second waited for the first's turn (this test saw it not
// done once every goroutine was blocked).
func TestSubscriptionWaitsForNoOther(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		d := newDomain(t)
		subscribe := func(info *slacklinev1.FrameworkInfo) (*framework, error) {
			info, err := normalizeFrameworkInfo(info)
			if err != nil {
				t.Fatal(err)
			}
			fw, _, err := d.c.subscribeOffStack(context.Background(), info)
			return fw, err
		}
		a, err := subscribe(&slacklinev1.FrameworkInfo{Name: "a", FailoverTimeoutSeconds: 60})
		if err != nil {
			t.Fatal(err)
		}
		release := d.c.takeTurn(scopeFramework(a.id()))
		failedOver := make(chan error, 1)
		go func() {
			_, err := subscribe(&slacklinev1.FrameworkInfo{Id: a.id(), Name: "a", FailoverTimeoutSeconds: 60})
			failedOver <- err
		}()
		synctest.Wait() // a's failover waits for its turn
		subscribed := make(chan error, 1)
		go func() {
			_, err := subscribe(&slacklinev1.FrameworkInfo{Name: "b"})
			subscribed <- err
		}()
		synctest.Wait()
		select {
		case err := <-subscribed:
			subscribed <- err // taken again below
		default:
			t.Error("b's subscription waits for a's turn")
		}
		select {
		case err := <-failedOver:
			t.Fatalf("a's failover returned (%v) while its framework's turn is held", err)
		default:
		}
		release()
		if err := <-failedOver; err != nil {
			t.Errorf("a's failover: %v", err)
		}
		if err := <-subscribed; err != nil {
			t.Errorf("b's subscription: %v", err)
		}
		time.Sleep(offStackIdle) // the subscriber goroutines end before the bubble does
	})
}
