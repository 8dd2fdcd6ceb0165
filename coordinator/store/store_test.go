package store

import (
	"context"
	"testing"
	"time"
)

// TestOpenBoltRegistryInWorkDir checks that the registry lives in one file
// of the work dir: it survives a reopen, and a second coordinator on the
// same work dir is refused.
func TestOpenBoltRegistryInWorkDir(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := OpenBolt(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, Put(BucketAgents, "a1", []byte("one")), Put(BucketWeights, "eng", []byte("2"))); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBolt(dir, 50*time.Millisecond); err == nil {
		t.Fatal("second open of a locked registry succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	agents, err := s.Load(ctx, BucketAgents)
	if err != nil || len(agents) != 1 || string(agents["a1"]) != "one" {
		t.Fatalf("agents after reopen = %q, %v", agents, err)
	}
}
