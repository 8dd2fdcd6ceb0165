package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestOpenRegistryInWorkDir checks that the registry lives in one file of
// the work dir, registry.log: it survives a reopen, and a second
// coordinator on the same work dir is refused.
func TestOpenRegistryInWorkDir(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, Put(BucketAgents, "a1", []byte("one")), Put(BucketWeights, "eng", []byte("2"))); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 50*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second open of a locked registry = %v, want refused as locked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, LogFile)); err != nil {
		t.Fatalf("registry file: %v", err)
	}
	s, err = Open(dir, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	agents, err := s.Load(ctx, BucketAgents)
	if err != nil || len(agents) != 1 || string(agents["a1"]) != "one" {
		t.Fatalf("agents after reopen = %q, %v", agents, err)
	}
}

// boltRegistry writes an earlier version's registry.db in dir with records
// in several buckets (more than one import batch in one) and returns them.
func boltRegistry(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	want := map[string]map[string]string{
		BucketAgents:     {"a1": "one", "a2": "two"},
		BucketWeights:    {"eng/web": "2"},
		BucketSecrets:    {"launch-key": "\x00\x01secret"},
		BucketFrameworks: {},
	}
	var ms []Mutation
	for b, records := range want {
		for k, v := range records {
			ms = append(ms, Put(b, k, []byte(v)))
		}
	}
	for i := range importBatch + 10 {
		k, v := fmt.Sprintf("f%05d", i), fmt.Sprint("framework ", i)
		want[BucketFrameworks][k] = v
		ms = append(ms, Put(BucketFrameworks, k, []byte(v)))
	}
	old, err := OpenBolt(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Apply(context.Background(), ms...); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

func load(t *testing.T, s Store, buckets map[string]map[string]string) map[string]map[string]string {
	t.Helper()
	got := map[string]map[string]string{}
	for b := range buckets {
		records, err := s.Load(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		got[b] = map[string]string{}
		for k, v := range records {
			got[b][k] = string(v)
		}
	}
	return got
}

// TestOpenImportsBoltRegistry checks the migration from registry.db: every
// bucket is in the log, registry.db is kept as registry.db.imported, a
// reopen does not import again, and the log is what is written to from then
// on.
func TestOpenImportsBoltRegistry(t *testing.T) {
	dir := t.TempDir()
	want := boltRegistry(t, dir)
	var logged bytes.Buffer
	s, err := Open(dir, time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
		t.Fatalf("imported registry (-want +got):\n%s", diff)
	}
	if !strings.Contains(logged.String(), "imported registry.db") || !strings.Contains(logged.String(), fmt.Sprint("records=", importBatch+14)) {
		t.Errorf("logged %q, want the import and its records", logged.String())
	}
	for name, present := range map[string]bool{BoltFile: false, ImportedBoltFile: true, LogFile: true, LogFile + ".tmp": false} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != present {
			t.Errorf("%s: present %v, want %v (%v)", name, err == nil, present, err)
		}
	}
	if err := s.Apply(context.Background(), Delete(BucketAgents, "a1")); err != nil {
		t.Fatal(err)
	}
	delete(want[BucketAgents], "a1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	logged.Reset()
	s, err = Open(dir, time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
		t.Fatalf("after reopen (-want +got):\n%s", diff)
	}
	if logged.Len() != 0 {
		t.Errorf("reopen logged %q, want no second import", logged.String())
	}
}

// TestOpenAfterInterruptedImport checks the crash between the two renames
// of an import: with registry.log and registry.db both present, the log is
// used and registry.db is renamed, not imported again.
func TestOpenAfterInterruptedImport(t *testing.T) {
	dir := t.TempDir()
	boltRegistry(t, dir)
	s, err := Open(dir, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(context.Background(), Put(BucketAgents, "a1", []byte("since the import"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// As if the crash came before registry.db was renamed.
	if err := os.Rename(filepath.Join(dir, ImportedBoltFile), filepath.Join(dir, BoltFile)); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	s, err = Open(dir, time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	agents, err := s.Load(context.Background(), BucketAgents)
	if err != nil || string(agents["a1"]) != "since the import" {
		t.Fatalf("agents = %q, %v; want the log's record", agents, err)
	}
	if _, err := os.Stat(filepath.Join(dir, BoltFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("registry.db still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ImportedBoltFile)); err != nil {
		t.Errorf("backup: %v", err)
	}
	if !strings.Contains(logged.String(), "both exist") {
		t.Errorf("logged %q, want the interrupted import said", logged.String())
	}
}

// TestOpenRefusesLockedBoltRegistry checks that a registry.db still used
// by a running coordinator of an earlier version is not imported.
func TestOpenRefusesLockedBoltRegistry(t *testing.T) {
	dir := t.TempDir()
	boltRegistry(t, dir)
	old, err := OpenBolt(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if s, err := Open(dir, 50*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open while registry.db is in use = %v, want refused as locked", err)
	}
	for name, present := range map[string]bool{BoltFile: true, LogFile: false, LogFile + ".tmp": false} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != present {
			t.Errorf("%s: present %v, want %v (%v)", name, err == nil, present, err)
		}
	}
}
