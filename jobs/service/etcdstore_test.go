package service

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/slackline/slackline/coordinator/leader"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/etcdtest"
	"github.com/slackline/slackline/jobs"
)

// TestEtcdStoreFencedAfterTermEnds: a store fenced on a leader's term
// writes while the term holds; once the term ended (its key deleted and its
// lease revoked) every write, the framework id included, fails with
// ErrFenced, calls OnFenced and changes nothing, while the next leader's
// store writes.
func TestEtcdStoreFencedAfterTermEnds(t *testing.T) {
	t.Parallel()
	client := etcdtest.Start(t, 1).Client(t)
	ctx := context.Background()
	const prefix = "/fence/jobs/"
	campaign := func(url string) *leader.Term {
		term, err := leader.NewElector(leader.ElectorConfig{Client: client, Prefix: prefix, URL: url}).Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return term
	}
	first := campaign("http://first")
	var fenced atomic.Int32
	old := NewEtcdStore(client, EtcdStoreOptions{Prefix: prefix, Fence: first.Fence, OnFenced: func() { fenced.Add(1) }})

	c := jobs.New(jobs.Config{})
	spec, err := jobs.ParseSpec([]byte("name: a\ncommand: x\nresources: cpus:1\ncompletions: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(spec, "alice", t0); err != nil {
		t.Fatal(err)
	}
	flush(t, old, c)
	if err := old.SetFrameworkID("fw-1"); err != nil {
		t.Fatal(err)
	}

	first.Resign(ctx)
	second := campaign("http://second")
	defer second.Resign(ctx)

	c.Offers([]*slacklinev1.Offer{offer("o1")}, t0)
	b, err := encode(c, c.TakeDirty())
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Write(b); !errors.Is(err, ErrFenced) {
		t.Fatalf("write after the term ended: %v, want ErrFenced", err)
	}
	if err := old.SetFrameworkID("fw-2"); !errors.Is(err, ErrFenced) {
		t.Fatalf("framework id after the term ended: %v, want ErrFenced", err)
	}
	if n := fenced.Load(); n != 2 {
		t.Errorf("OnFenced called %d times, want 2", n)
	}

	next := NewEtcdStore(client, EtcdStoreOptions{Prefix: prefix, Fence: second.Fence})
	loaded, err := next.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 1 || loaded[0].Indexes[0].State != jobs.IndexPending || loaded[0].Indexes[1].State != jobs.IndexPending {
		t.Fatalf("the deposed store's launch was written: %+v", loaded)
	}
	if id, err := next.FrameworkID(); err != nil || id != "fw-1" {
		t.Fatalf("framework id %q %v, want fw-1", id, err)
	}
	if err := next.Write(b); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	if loaded, err = next.Load(); err != nil || loaded[0].Indexes[0].State != jobs.IndexLaunched {
		t.Fatalf("after the new leader's write: %v %+v", err, loaded)
	}
}
