package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/internal/etcdtest"
)

// backend opens a store and, for reopen, a second store on the same data
// (after the first was closed).
type backend struct {
	name string
	open func(t *testing.T) (open func() Store)
}

func backends() []backend {
	return []backend{
		{"bolt", func(t *testing.T) func() Store {
			dir := t.TempDir()
			return func() Store {
				s, err := Open(dir, time.Second, nil)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}},
		{"etcd", func(t *testing.T) func() Store {
			client := etcdtest.Shared(t).Client(t)
			prefix := etcdtest.Prefix(t)
			return func() Store { return NewEtcd(client, EtcdOptions{Prefix: prefix}) }
		}},
	}
}

// TestStoreContract runs the Store contract the coordinator relies on
// against every backend: atomic batches survive a reopen, deletes, empty
// buckets, concurrent writers, last write of a key wins within a batch,
// batches beyond one etcd transaction, and ErrClosed.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			open := b.open(t)
			ctx := context.Background()

			s := open()
			if err := s.Apply(ctx, Put(BucketAgents, "a1", []byte("one")), Put(BucketAgents, "a2", []byte("two"))); err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(ctx, Delete(BucketAgents, "a1"), Put(BucketWeights, "eng/web", []byte("2"))); err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(ctx, Put(BucketQuotas, "r", []byte("first")), Put(BucketQuotas, "r", []byte("last"))); err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(ctx); err != nil {
				t.Fatalf("empty Apply: %v", err)
			}
			var many []Mutation
			for i := range 300 {
				many = append(many, Put(BucketFrameworks, fmt.Sprintf("f%03d", i), []byte{byte(i)}))
			}
			if err := s.Apply(ctx, many...); err != nil {
				t.Fatalf("Apply of 300 mutations: %v", err)
			}
			var wg sync.WaitGroup
			for i := range 50 {
				wg.Go(func() {
					if err := s.Apply(ctx, Put(BucketMaintenance, fmt.Sprint(i), []byte("x"))); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(ctx, Put(BucketAgents, "a3", []byte("x"))); !errors.Is(err, ErrClosed) {
				t.Fatalf("Apply after Close = %v, want ErrClosed", err)
			}

			s = open()
			defer s.Close()
			want := map[string]map[string]string{
				BucketAgents:  {"a2": "two"},
				BucketWeights: {"eng/web": "2"},
				BucketQuotas:  {"r": "last"},
				"never":       {},
			}
			for bucket, kv := range want {
				got, err := s.Load(ctx, bucket)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(kv) {
					t.Errorf("bucket %s = %q, want %q", bucket, got, kv)
				}
				for k, v := range kv {
					if string(got[k]) != v {
						t.Errorf("bucket %s key %s = %q, want %q", bucket, k, got[k], v)
					}
				}
			}
			if got, _ := s.Load(ctx, BucketFrameworks); len(got) != 300 || got["f299"][0] != byte(299%256) {
				t.Errorf("frameworks: %d keys, want 300", len(got))
			}
			if got, _ := s.Load(ctx, BucketMaintenance); len(got) != 50 {
				t.Errorf("concurrent writes: %d keys, want 50", len(got))
			}
		})
	}
}

// TestEtcdFence checks that a fenced store writes only while its fence's
// key exists with the fence's creation revision: once the leader's lease
// is revoked its writes fail with ErrFenced and call OnFenced, and a key
// created again (another leader's) does not revive them.
func TestEtcdFence(t *testing.T) {
	client := etcdtest.Shared(t).Client(t)
	p := etcdtest.Prefix(t)
	ctx := context.Background()
	lease, err := client.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	put, err := client.Put(ctx, p+"leader/me", "http://me", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	fenced := 0
	s := NewEtcd(client, EtcdOptions{Prefix: p, Fence: Fence{Key: p + "leader/me", Revision: put.Header.Revision}, OnFenced: func() { fenced++ }})
	if err := s.Apply(ctx, Put(BucketAgents, "a", []byte("leader"))); err != nil {
		t.Fatalf("write under a valid fence: %v", err)
	}
	if _, err := client.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, Put(BucketAgents, "a", []byte("deposed"))); !errors.Is(err, ErrFenced) {
		t.Fatalf("write after the lease ended = %v, want ErrFenced", err)
	}
	if _, err := client.Put(ctx, p+"leader/me", "http://other"); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, Put(BucketAgents, "a", []byte("deposed"))); !errors.Is(err, ErrFenced) {
		t.Fatalf("write after the key was created again = %v, want ErrFenced", err)
	}
	if fenced != 2 {
		t.Errorf("OnFenced called %d times, want 2", fenced)
	}
	got, _ := s.Load(ctx, BucketAgents)
	if string(got["a"]) != "leader" {
		t.Fatalf("stored %q, want the leader's write only", got["a"])
	}

	// A store whose context ended fails at once instead of waiting.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	s = NewEtcd(client, EtcdOptions{Prefix: p, Context: ended})
	if err := s.Apply(ctx, Put(BucketAgents, "b", []byte("x"))); err == nil {
		t.Fatal("Apply on a store whose context ended succeeded")
	}
}
