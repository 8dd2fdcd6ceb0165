package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// failingStore is the registry with a switch that makes its writes
// fail as after a failed fsync (a real one cannot be caused here).
type failingStore struct {
	store.Store
	failed atomic.Bool
}

func (s *failingStore) Apply(ctx context.Context, m ...store.Mutation) error {
	if s.failed.Load() {
		return fmt.Errorf("commit to registry.db: input/output error: %w", store.ErrFailed)
	}
	return s.Store.Apply(ctx, m...)
}

// TestFailedRegistryStopsCoordinator checks that a registry that can take
// no more writes until it is reopened stops the coordinator (Run returns
// the error, so the process exits and its supervisor restarts it) after
// refusing the write with Unavailable, and that a restart on the same
// work dir recovers what was acknowledged before.
func TestFailedRegistryStopsCoordinator(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		log, err := store.Open(dir, time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := &failingStore{Store: log}
		cfg := fastConfig(dir)
		cfg.Store = st
		tc := startPipeCluster(t, cfg)
		before := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "before", FailoverTimeoutSeconds: 60})

		st.failed.Store(true)
		if _, err := tc.trySubscribe(&slacklinev1.FrameworkInfo{Name: "after"}); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("subscribe with a failed registry = %v, want unavailable", err)
		}
		select {
		case err := <-tc.done:
			if !errors.Is(err, store.ErrFailed) {
				t.Fatalf("Run returned %v, want the registry's failure", err)
			}
			tc.done <- nil // for tc.stop
		case <-time.After(10 * time.Second):
			t.Fatal("the coordinator kept running on a failed registry")
		}
		tc.stop()
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}

		restarted := startPipeCluster(t, fastConfig(dir))
		resp, err := restarted.operator.GetFrameworks(context.Background(), connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, fw := range resp.Msg.GetFrameworks() {
			names = append(names, fw.GetInfo().GetName())
			if fw.GetInfo().GetId() != before.id {
				t.Errorf("recovered framework %s (%s), want only %s", fw.GetInfo().GetId(), fw.GetInfo().GetName(), before.id)
			}
		}
		if len(names) != 1 {
			t.Fatalf("frameworks after the restart: %v, want [before]", names)
		}
	})
}
