package coordinator

import (
	"testing"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// refusedWithoutTurn runs call, which must be refused with code while
// held (a turn of the scopes call would take) is held: call must refuse
// before asking for its turn. A call that asks first waits (the test
// fails, naming it, then releases the turn so that call returns).
func refusedWithoutTurn(t *testing.T, d *domain, what string, code connect.Code, held []scope, call func() error) {
	t.Helper()
	release := d.c.takeTurn(held...)
	waited := make(chan struct{}, 1)
	d.c.turns.mu.Lock()
	d.c.turns.waits = 0
	d.c.turns.onWait = func() {
		select {
		case waited <- struct{}{}:
		default:
		}
	}
	d.c.turns.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- call() }()
	var err error
	select {
	case err = <-done:
		release()
	case <-waited:
		t.Errorf("%s: asked for its turn (and waited for the one held) before it was refused", what)
		release()
		err = <-done
	}
	d.c.turns.mu.Lock()
	d.c.turns.onWait = nil
	d.c.turns.mu.Unlock()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	}
}

// TestUnauthorizedSubscriptionQueuesNoTurn: a failover to another
// principal's framework, and a new framework in a role its principal may
// not register in, are refused before they ask for a turn (of the
// framework's scope, of the principal's), so that a caller without the
// right queues nothing behind which the framework's own changes would wait.
// A failover asked for the framework's turn first (and waited, while the
// framework's teardown held it) before this test.
func TestUnauthorizedSubscriptionQueuesNoTurn(t *testing.T) {
	t.Parallel()
	d := newTrustDomain(t)
	fw, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "b", Roles: []string{"batch"}, FailoverTimeoutSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	id := fw.id()
	refusedWithoutTurn(t, d, "a failover by another principal", connect.CodePermissionDenied, []scope{scopeFramework(id)}, func() error {
		_, _, err := d.subscribeAs("other", &slacklinev1.FrameworkInfo{Id: id, Name: "evil", Roles: []string{"batch"}})
		return err
	})
	refusedWithoutTurn(t, d, "a new framework in a role not granted", connect.CodePermissionDenied, []scope{scopePrincipal("batch")}, func() error {
		_, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Name: "c", Roles: []string{"prod"}})
		return err
	})
	refusedWithoutTurn(t, d, "a failover to an unknown framework", connect.CodeNotFound, []scope{scopeFramework("nope")}, func() error {
		_, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Id: "nope", Name: "b", Roles: []string{"batch"}})
		return err
	})
	// The framework's own failover, authorized, takes its turn and is
	// admitted: still bound to batch.
	fw2, _, err := d.subscribeAs("batch", &slacklinev1.FrameworkInfo{Id: id, Name: "b", Roles: []string{"batch"}, FailoverTimeoutSeconds: 60})
	if err != nil || fw2.info.GetPrincipal() != "batch" {
		t.Fatalf("the framework's own failover: %v, principal %q; want admitted, bound to batch", err, fw2.info.GetPrincipal())
	}
}
