package kv

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestBoltPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := OpenBolt(filepath.Join(dir, "test.db"), time.Second)
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
	s, err = OpenBolt(filepath.Join(dir, "test.db"), time.Second)
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
}

func TestBoltConcurrentApply(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "test.db"), time.Second)
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
}

func TestBoltSecondOpenFailsClearly(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBolt(filepath.Join(dir, "test.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := OpenBolt(filepath.Join(dir, "test.db"), 50*time.Millisecond); err == nil {
		t.Fatal("second open of a locked file succeeded")
	}
}

func TestBoltClosed(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "test.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Apply(context.Background(), Put("agents", "a", []byte("b"))); err == nil {
		t.Fatal("Apply on closed store succeeded")
	}
}
