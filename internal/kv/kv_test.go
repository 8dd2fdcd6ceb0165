package kv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// opener opens a store of one kind at path.
type opener struct {
	name string
	open func(path string, timeout time.Duration) (Store, error)
}

// stores lists the kinds of Store whose behaviour the tests below share.
func stores() []opener {
	return []opener{
		{"bolt", func(path string, timeout time.Duration) (Store, error) { return OpenBolt(path, timeout) }},
		{"log", func(path string, timeout time.Duration) (Store, error) {
			return OpenLog(path, LogOptions{LockTimeout: timeout})
		}},
	}
}

// forEachStore runs test once per kind of Store, as a subtest.
func forEachStore(t *testing.T, test func(t *testing.T, open func(path string, timeout time.Duration) (Store, error))) {
	for _, o := range stores() {
		t.Run(o.name, func(t *testing.T) { test(t, o.open) })
	}
}

func TestStorePersistsAcrossReopen(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(string, time.Duration) (Store, error)) {
		dir := t.TempDir()
		ctx := context.Background()
		s, err := open(filepath.Join(dir, "test.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, Put("agents", "a1", []byte("one")), Put("agents", "a2", []byte("two"))); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, Delete("agents", "a1"), Put("weights", "eng", []byte("2"))); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = open(filepath.Join(dir, "test.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		agents, err := s.Load(ctx, "agents")
		if err != nil {
			t.Fatal(err)
		}
		if len(agents) != 1 || string(agents["a2"]) != "two" {
			t.Fatalf("agents after reopen = %q", agents)
		}
		empty, err := s.Load(ctx, "never-written")
		if err != nil || len(empty) != 0 {
			t.Fatalf("Load of missing bucket = %v, %v", empty, err)
		}
	})
}

func TestStoreConcurrentApply(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(string, time.Duration) (Store, error)) {
		s, err := open(filepath.Join(t.TempDir(), "test.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				if err := s.Apply(context.Background(), Put("agents", fmt.Sprint(i), []byte("x"))); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got, _ := s.Load(context.Background(), "agents")
		if len(got) != 200 {
			t.Fatalf("stored %d agents, want 200", len(got))
		}
	})
}

func TestStoreSecondOpenFailsClearly(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(string, time.Duration) (Store, error)) {
		dir := t.TempDir()
		s, err := open(filepath.Join(dir, "test.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = open(filepath.Join(dir, "test.db"), 50*time.Millisecond)
		if err == nil {
			t.Fatal("second open of a locked file succeeded")
		}
		if !strings.Contains(err.Error(), "locked by another process") {
			t.Fatalf("second open = %v, want it to say the file is locked by another process", err)
		}
	})
}

func TestStoreClosed(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(string, time.Duration) (Store, error)) {
		s, err := open(filepath.Join(t.TempDir(), "test.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := s.Apply(context.Background(), Put("agents", "a", []byte("b"))); err == nil {
			t.Fatal("Apply on closed store succeeded")
		}
	})
}

// TestStoreBadWriteFailsAlone checks that Apply calls committed together do
// not share a failure: the call whose mutation the store refuses (a key longer
// than bbolt allows, which Log refuses too) fails, every other one is durable.
func TestStoreBadWriteFailsAlone(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(string, time.Duration) (Store, error)) {
		s, err := open(filepath.Join(t.TempDir(), "test.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		tooLong := string(make([]byte, 40000)) // bbolt's MaxKeySize is 32768
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for i := range errs {
			wg.Go(func() {
				key := fmt.Sprint(i)
				if i == 25 {
					key = tooLong
				}
				errs[i] = s.Apply(context.Background(), Put("agents", key, []byte("x")))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if (err != nil) != (i == 25) {
				t.Errorf("Apply %d: %v", i, err)
			}
		}
		got, _ := s.Load(context.Background(), "agents")
		if len(got) != 49 {
			t.Fatalf("stored %d keys, want 49", len(got))
		}
	})
}

// TestStoreCloseCommitsWaitingWrites checks that writes under way when
// Close is called are committed or refused with ErrClosed, never lost after
// success, and that Apply after Close returns ErrClosed.
func TestStoreCloseCommitsWaitingWrites(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(string, time.Duration) (Store, error)) {
		path := filepath.Join(t.TempDir(), "test.db")
		s, err := open(path, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 100)
		for i := range errs {
			wg.Go(func() { errs[i] = s.Apply(context.Background(), Put("agents", fmt.Sprint(i), []byte("x"))) })
		}
		// Two Close calls at once: both wait for the writer, neither panics.
		closeErrs := make(chan error, 2)
		for range 2 {
			go func() { closeErrs <- s.Close() }()
		}
		for range 2 {
			if err := <-closeErrs; err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		if err := s.Apply(context.Background(), Put("agents", "late", []byte("x"))); !errors.Is(err, ErrClosed) {
			t.Fatalf("Apply after Close = %v, want ErrClosed", err)
		}
		s, err = open(path, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, _ := s.Load(context.Background(), "agents")
		for i, err := range errs {
			_, stored := got[fmt.Sprint(i)]
			switch {
			case err == nil && !stored:
				t.Errorf("Apply %d succeeded but its write is not in the file", i)
			case err != nil && !errors.Is(err, ErrClosed):
				t.Errorf("Apply %d = %v, want nil or ErrClosed", i, err)
			}
		}
	})
}

// TestBoltOpensFilesOfAnyPageSize: a file created before the page size
// changed (bbolt's 4 KB default) opens with its own and keeps its records.
func TestBoltOpensFilesOfAnyPageSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("agents"))
		if err != nil {
			return err
		}
		return b.Put([]byte("a1"), []byte("one"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := OpenBolt(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.db.Info().PageSize; got != 4096 {
		t.Errorf("page size of the reopened file = %d, want its own 4096", got)
	}
	if err := s.Apply(ctx, Put("agents", "a2", []byte("two"))); err != nil {
		t.Fatal(err)
	}
	agents, err := s.Load(ctx, "agents")
	if err != nil {
		t.Fatal(err)
	}
	if len(agents) != 2 || string(agents["a1"]) != "one" || string(agents["a2"]) != "two" {
		t.Fatalf("agents = %q", agents)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fresh, err := OpenBolt(filepath.Join(t.TempDir(), "new.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := fresh.db.Info().PageSize; got != pageSize {
		t.Errorf("page size of a new file = %d, want %d", got, pageSize)
	}
}
