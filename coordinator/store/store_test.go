package store

import (
	"bytes"
	"context"
	"fmt"
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

// TestOpenAfterInterruptedImport checks a crash at each step of an import:
// before the log is in place, registry.db.importing is imported (again);
// after it, the log is used and the backup renamed. Either way nothing is
// lost and registry.db.imported is what is left.
func TestOpenAfterInterruptedImport(t *testing.T) {
	for _, c := range []struct {
		name     string
		logThere bool // the crash came after the log was renamed into place
	}{{"before the log was in place", false}, {"after the log was in place", true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			want := boltRegistry(t, dir)
			if c.logThere {
				s, err := Open(dir, time.Second, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Apply(context.Background(), Put(BucketAgents, "a1", []byte("since the import"))); err != nil {
					t.Fatal(err)
				}
				want[BucketAgents]["a1"] = "since the import"
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				// As if the crash came before the backup was renamed.
				if err := os.Rename(filepath.Join(dir, ImportedBoltFile), filepath.Join(dir, ImportingBoltFile)); err != nil {
					t.Fatal(err)
				}
			} else {
				// As if the crash came while the log was being written.
				if err := os.Rename(filepath.Join(dir, BoltFile), filepath.Join(dir, ImportingBoltFile)); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, LogFile+".tmp"), []byte("half a log"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logged bytes.Buffer
			s, err := Open(dir, time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
				t.Fatalf("registry (-want +got):\n%s", diff)
			}
			for name, present := range map[string]bool{BoltFile: false, ImportingBoltFile: false, ImportedBoltFile: true, LogFile + ".tmp": false} {
				if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != present {
					t.Errorf("%s: present %v, want %v (%v)", name, err == nil, present, err)
				}
			}
			if say := map[bool]string{false: "imported registry.db", true: "interrupted"}[c.logThere]; !strings.Contains(logged.String(), say) {
				t.Errorf("logged %q, want %q", logged.String(), say)
			}
		})
	}
}

// TestOpenRefusesBoltWrittenAfterImport checks an earlier version run again
// on a work dir already moved to the log: it writes a new registry.db, and
// Open refuses to choose between the two, changing nothing; once the
// operator moves the log away, registry.db is imported and the first
// backup is kept.
func TestOpenRefusesBoltWrittenAfterImport(t *testing.T) {
	dir := t.TempDir()
	boltRegistry(t, dir)
	s, err := Open(dir, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, ImportedBoltFile))
	if err != nil {
		t.Fatal(err)
	}
	old, err := OpenBolt(dir, time.Second) // the earlier version, run again
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Apply(context.Background(), Put(BucketAgents, "rollback", []byte("written by the earlier version"))); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir, time.Second, nil); err == nil || !strings.Contains(err.Error(), "both registry.log and registry.db exist") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open with a registry.db written after the import = %v, want refused", err)
	}
	for _, name := range []string{BoltFile, LogFile, ImportedBoltFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s after the refusal: %v", name, err)
		}
	}

	if err := os.Rename(filepath.Join(dir, LogFile), filepath.Join(dir, "registry.log.set-aside")); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	agents, err := s.Load(context.Background(), BucketAgents)
	if err != nil || string(agents["rollback"]) != "written by the earlier version" {
		t.Fatalf("agents = %q, %v; want registry.db imported", agents, err)
	}
	if kept, err := os.ReadFile(filepath.Join(dir, ImportedBoltFile)); err != nil || !bytes.Equal(kept, first) {
		t.Errorf("the first backup was replaced (%v)", err)
	}
	if second, _ := filepath.Glob(filepath.Join(dir, ImportedBoltFile+".*")); len(second) != 1 {
		t.Errorf("backups of the second import: %v, want one beside the first", second)
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

// TestOpenWaitsForAnotherImport checks two coordinators started at once on
// a work dir with a registry.db: the one that waited while the other
// imported opens the log (and its lock decides between them) instead of
// failing on files the import already moved.
func TestOpenWaitsForAnotherImport(t *testing.T) {
	dir := t.TempDir()
	want := boltRegistry(t, dir)
	unlock, err := lockDir(dir, time.Second) // the first coordinator, importing
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	var second Store
	go func() {
		var err error
		second, err = Open(dir, 10*time.Second, nil)
		opened <- err
	}()
	if err := takeBolt(filepath.Join(dir, BoltFile), filepath.Join(dir, ImportingBoltFile), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := importBolt(filepath.Join(dir, ImportingBoltFile), filepath.Join(dir, LogFile), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := retire(dir); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-opened; err != nil {
		t.Fatalf("the second Open: %v", err)
	}
	defer second.Close()
	if diff := cmp.Diff(want, load(t, second, want)); diff != "" {
		t.Fatalf("registry (-want +got):\n%s", diff)
	}
}
