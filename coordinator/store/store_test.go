package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/internal/filelock"
	"github.com/slackline/slackline/internal/kv"
)

// TestOpenRegistryInWorkDir checks that the registry lives in one file of
// the work dir, registry.db: it survives a reopen, and a second
// coordinator on the same work dir is refused.
func TestOpenRegistryInWorkDir(t *testing.T) {
	t.Parallel()
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
	if names := dirNames(t, dir); !cmp.Equal(names, []string{BoltFile}) {
		t.Fatalf("work dir holds %v, want only %s", names, BoltFile)
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

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// goldenLog copies testdata/registry.log (written by the log version) into
// dir as registry.log and returns its bytes and the records that version
// loaded from it.
func goldenLog(t *testing.T, dir string) ([]byte, map[string]map[string]string) {
	t.Helper()
	data, err := os.ReadFile("testdata/registry.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, LogFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/registry.log.want.json")
	if err != nil {
		t.Fatal(err)
	}
	var loaded map[string]map[string][]byte
	if err := json.Unmarshal(raw, &loaded); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{}
	for b, records := range loaded {
		want[b] = map[string]string{}
		for k, v := range records {
			want[b][k] = string(v)
		}
	}
	return data, want
}

// bigLog writes a registry.log in dir with more records than one import
// transaction, and returns the records.
func bigLog(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	want := map[string]map[string]string{BucketFrameworks: {}, BucketAgents: {"a1": "one"}}
	var frames [][]Mutation
	for i := range importBatch + 10 {
		k, v := fmt.Sprintf("f%05d", i), fmt.Sprint("framework ", i)
		want[BucketFrameworks][k] = v
		frames = append(frames, []Mutation{Put(BucketFrameworks, k, []byte(v))})
	}
	frames = append(frames, []Mutation{Put(BucketAgents, "a1", []byte("one")), Put(BucketAgents, "a2", []byte("two"))}, []Mutation{Delete(BucketAgents, "a2")})
	if err := os.WriteFile(filepath.Join(dir, LogFile), encodeLog(frames...), 0o600); err != nil {
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

func openLogged(t *testing.T, dir string) (Store, *bytes.Buffer, error) {
	t.Helper()
	var logged bytes.Buffer
	s, err := Open(dir, time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, &logged, err
}

// present checks which of names are in dir.
func present(t *testing.T, dir string, names map[string]bool) {
	t.Helper()
	for name, want := range names {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v (%v)", name, err == nil, want, err)
		}
	}
}

// TestOpenImportsLog checks the migration from the log version: a
// registry.log it wrote (beside the registry.db.imported it kept when it
// was installed) is imported into registry.db with every record that
// version loaded from it, kept byte for byte as registry.log.imported, the
// older backup left alone; a reopen does not import again, and
// registry.db is what is written to from then on.
func TestOpenImportsLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, want := goldenLog(t, dir)
	if err := os.WriteFile(filepath.Join(dir, ImportedBoltFile), []byte("the log version's backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, LogFile+".tmp"), []byte("a compaction it never finished"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, logged, err := openLogged(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
		t.Fatalf("imported registry (-the log version loaded +registry.db):\n%s", diff)
	}
	if !strings.Contains(logged.String(), "imported registry.log into registry.db") || !strings.Contains(logged.String(), "records=51") {
		t.Errorf("logged %q, want the import and its records", logged.String())
	}
	if kept, err := os.ReadFile(filepath.Join(dir, ImportedLogFile)); err != nil || !bytes.Equal(kept, data) {
		t.Errorf("registry.log.imported is not the log as it was (%v)", err)
	}
	if kept, err := os.ReadFile(filepath.Join(dir, ImportedBoltFile)); err != nil || string(kept) != "the log version's backup" {
		t.Errorf("registry.db.imported was changed (%v)", err)
	}
	if names := dirNames(t, dir); !cmp.Equal(names, []string{BoltFile, ImportedBoltFile, ImportedLogFile}) {
		t.Errorf("work dir holds %v", names)
	}
	if err := s.Apply(context.Background(), Delete(BucketAgents, "agent-00")); err != nil {
		t.Fatal(err)
	}
	delete(want[BucketAgents], "agent-00")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, logged, err = openLogged(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
		t.Fatalf("after reopen (-want +got):\n%s", diff)
	}
	if logged.Len() != 0 {
		t.Errorf("reopen logged %q, want no second import", logged.String())
	}
}

// TestOpenImportsLogInBatches checks an import larger than one transaction.
func TestOpenImportsLogInBatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	want := bigLog(t, dir)
	s, _, err := openLogged(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
		t.Fatalf("imported registry (-want +got):\n%s", diff)
	}
}

// TestOpenImportsTornLog checks a registry.log whose last write never
// completed: it is imported without that write, as the log version would
// have recovered it, the bytes dropped are logged, and the log is kept as
// it was.
func TestOpenImportsTornLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	whole, last := smallLog()
	torn := whole[:last+frameHeaderSize+7]
	if err := os.WriteFile(filepath.Join(dir, LogFile), torn, 0o600); err != nil {
		t.Fatal(err)
	}
	s, logged, err := openLogged(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{BucketAgents: {"a2": "two"}, BucketWeights: {"eng": "2"}}
	if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
		t.Fatalf("imported registry (-want +got):\n%s", diff)
	}
	if say := fmt.Sprintf("offset=%d bytes_dropped=%d", last, frameHeaderSize+7); !strings.Contains(logged.String(), say) {
		t.Errorf("logged %q, want %q", logged.String(), say)
	}
	if kept, err := os.ReadFile(filepath.Join(dir, ImportedLogFile)); err != nil || !bytes.Equal(kept, torn) {
		t.Errorf("registry.log.imported is not the log as it was (%v)", err)
	}
}

// TestOpenRefusesDamagedLog checks that a registry.log damaged elsewhere
// than in its last write is not imported: Open fails naming the file and
// the offset, and the work dir is left as it was.
func TestOpenRefusesDamagedLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	damaged, last := smallLog()
	damaged[last-3] ^= 0x40
	if err := os.WriteFile(filepath.Join(dir, LogFile), damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := openLogged(t, dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, LogFile)) || !strings.Contains(err.Error(), "corrupt frame at offset") {
		t.Fatalf("Open of a damaged log = %v, want refused with the file and offset", err)
	}
	if names := dirNames(t, dir); !cmp.Equal(names, []string{LogFile}) {
		t.Errorf("work dir holds %v after the refusal, want only %s", names, LogFile)
	}
	if after, err := os.ReadFile(filepath.Join(dir, LogFile)); err != nil || !bytes.Equal(after, damaged) {
		t.Errorf("the refused log was changed (%v)", err)
	}
}

// TestOpenAfterInterruptedImport checks a crash at each step of an
// import: before registry.db is in place, the log is imported again over
// what the crash left; after it, registry.db (which holds the log's
// SHA-256) is used and the log kept as the backup. Either way nothing is
// lost and registry.log.imported is what is left.
func TestOpenAfterInterruptedImport(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		dbDone bool // the crash came after registry.db was renamed into place
	}{{"before registry.db was in place", false}, {"after registry.db was in place", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			want := bigLog(t, dir)
			if c.dbDone {
				s, _, err := openLogged(t, dir)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				// As if the crash came before the log was renamed.
				if err := os.Rename(filepath.Join(dir, ImportedLogFile), filepath.Join(dir, LogFile)); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(filepath.Join(dir, importTmpFile), []byte("half a registry.db"), 0o600); err != nil {
				t.Fatal(err)
			}
			s, logged, err := openLogged(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, load(t, s, want)); diff != "" {
				t.Fatalf("registry (-want +got):\n%s", diff)
			}
			if names := dirNames(t, dir); !cmp.Equal(names, []string{BoltFile, ImportedLogFile}) {
				t.Errorf("work dir holds %v", names)
			}
			if say := map[bool]string{false: "imported registry.log", true: "interrupted after registry.db was in place"}[c.dbDone]; !strings.Contains(logged.String(), say) {
				t.Errorf("logged %q, want %q", logged.String(), say)
			}
		})
	}
}

// TestOpenKeepsOlderLogBackup checks a second import (the log version run
// again on this work dir, which imported registry.db into a new log):
// the first registry.log.imported is kept, the second beside it.
func TestOpenKeepsOlderLogBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := encodeLog([]Mutation{Put(BucketAgents, "a1", []byte("first"))})
	second := encodeLog([]Mutation{Put(BucketAgents, "a1", []byte("second"))})
	if err := os.WriteFile(filepath.Join(dir, ImportedLogFile), first, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, LogFile), second, 0o600); err != nil {
		t.Fatal(err)
	}
	s, _, err := openLogged(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := load(t, s, map[string]map[string]string{BucketAgents: nil}); got[BucketAgents]["a1"] != "second" {
		t.Errorf("agents = %v, want the log's", got)
	}
	if kept, err := os.ReadFile(filepath.Join(dir, ImportedLogFile)); err != nil || !bytes.Equal(kept, first) {
		t.Errorf("the first backup was replaced (%v)", err)
	}
	backups, _ := filepath.Glob(filepath.Join(dir, ImportedLogFile+".*"))
	if len(backups) != 1 {
		t.Fatalf("backups of the second import: %v, want one beside the first", backups)
	}
	if kept, err := os.ReadFile(backups[0]); err != nil || !bytes.Equal(kept, second) {
		t.Errorf("the second backup is not the second log (%v)", err)
	}
}

// TestOpenRefusesAmbiguousRegistry checks a registry.db beside a
// registry.log that it was not imported from: one was written by another
// version run on this work dir (the version before the log, run again
// without moving the log away; or the log version run again after its log
// was imported and the log put back), so Open refuses, changes nothing and
// says how to choose; each choice it offers then works.
func TestOpenRefusesAmbiguousRegistry(t *testing.T) {
	t.Parallel()
	logged := encodeLog([]Mutation{Put(BucketAgents, "a1", []byte("in the log"))})
	for _, c := range []struct {
		name string
		// db writes the registry.db beside the log.
		db func(t *testing.T, dir string)
	}{
		{"registry.db of the version before the log", func(t *testing.T, dir string) {
			old, err := kv.OpenBolt(filepath.Join(dir, BoltFile), kv.BoltOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if err := old.Apply(context.Background(), Put(BucketAgents, "a1", []byte("in registry.db"))); err != nil {
				t.Fatal(err)
			}
		}},
		{"registry.db imported from another log", func(t *testing.T, dir string) {
			other := t.TempDir()
			if err := os.WriteFile(filepath.Join(other, LogFile), encodeLog([]Mutation{Put(BucketAgents, "a1", []byte("in registry.db"))}), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(other, time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(other, BoltFile), filepath.Join(dir, BoltFile)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, keep := range []string{BoltFile, LogFile} {
			t.Run(c.name+", keep "+keep, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, LogFile), logged, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, ImportedBoltFile), []byte("the log version's backup"), 0o600); err != nil {
					t.Fatal(err)
				}
				c.db(t, dir)
				before := dirNames(t, dir)
				_, _, err := openLogged(t, dir)
				if err == nil {
					t.Fatal("Open with a registry.db and a registry.log it was not imported from succeeded")
				}
				for _, say := range []string{"both registry.db", "registry.db is not the import of this registry.log",
					"To keep registry.db, move registry.log away", "to keep registry.log instead, move registry.db away",
					"registry.db.imported is the registry.db that the log version imported"} {
					if !strings.Contains(err.Error(), say) {
						t.Errorf("refusal %q does not say %q", err, say)
					}
				}
				if after := dirNames(t, dir); !cmp.Equal(after, before) {
					t.Errorf("work dir holds %v after the refusal, %v before", after, before)
				}

				away := map[string]string{BoltFile: LogFile, LogFile: BoltFile}[keep]
				if err := os.Rename(filepath.Join(dir, away), filepath.Join(t.TempDir(), away)); err != nil {
					t.Fatal(err)
				}
				s, _, err := openLogged(t, dir)
				if err != nil {
					t.Fatalf("Open once %s is moved away: %v", away, err)
				}
				want := map[string]string{BoltFile: "in registry.db", LogFile: "in the log"}[keep]
				if got := load(t, s, map[string]map[string]string{BucketAgents: nil}); got[BucketAgents]["a1"] != want {
					t.Errorf("agents = %v, want %q", got, want)
				}
			})
		}
	}
}

// TestOpenAfterLogVersionInterruptedImport checks the registry.db.importing
// that the log version left when it stopped while importing a registry.db:
// before its log was in place, that file is the registry again; after, the
// log is imported and the file kept as registry.db.imported (beside an
// older one); beside a registry.db, Open refuses.
func TestOpenAfterLogVersionInterruptedImport(t *testing.T) {
	t.Parallel()
	boltFile := func(t *testing.T, path, value string) {
		db, err := kv.OpenBolt(path, kv.BoltOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Apply(context.Background(), Put(BucketAgents, "a1", []byte(value))); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("before its log was in place", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		boltFile(t, filepath.Join(dir, ImportingBoltFile), "in registry.db.importing")
		if err := os.WriteFile(filepath.Join(dir, LogFile+".tmp"), []byte("half a log"), 0o600); err != nil {
			t.Fatal(err)
		}
		s, _, err := openLogged(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := load(t, s, map[string]map[string]string{BucketAgents: nil}); got[BucketAgents]["a1"] != "in registry.db.importing" {
			t.Errorf("agents = %v", got)
		}
		// The log's .tmp is left: only an import removes it.
		present(t, dir, map[string]bool{BoltFile: true, ImportingBoltFile: false})
	})
	t.Run("after its log was in place", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		boltFile(t, filepath.Join(dir, ImportingBoltFile), "in registry.db.importing")
		if err := os.WriteFile(filepath.Join(dir, ImportedBoltFile), []byte("older backup"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, LogFile), encodeLog([]Mutation{Put(BucketAgents, "a1", []byte("in the log"))}), 0o600); err != nil {
			t.Fatal(err)
		}
		s, _, err := openLogged(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := load(t, s, map[string]map[string]string{BucketAgents: nil}); got[BucketAgents]["a1"] != "in the log" {
			t.Errorf("agents = %v", got)
		}
		present(t, dir, map[string]bool{ImportingBoltFile: false, LogFile: false, ImportedLogFile: true})
		if kept, err := os.ReadFile(filepath.Join(dir, ImportedBoltFile)); err != nil || string(kept) != "older backup" {
			t.Errorf("the older registry.db.imported was replaced (%v)", err)
		}
		if backups, _ := filepath.Glob(filepath.Join(dir, ImportedBoltFile+".*")); len(backups) != 1 {
			t.Errorf("backups: %v, want registry.db.importing beside the older one", backups)
		}
	})
	t.Run("beside a registry.db", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		boltFile(t, filepath.Join(dir, ImportingBoltFile), "in registry.db.importing")
		boltFile(t, filepath.Join(dir, BoltFile), "in registry.db")
		if _, _, err := openLogged(t, dir); err == nil || !strings.Contains(err.Error(), "move one of them away") {
			t.Fatalf("Open = %v, want refused", err)
		}
		present(t, dir, map[string]bool{BoltFile: true, ImportingBoltFile: true})
	})
}

// TestOpenRefusesLockedLog checks that a registry.log still used by a
// running coordinator of the log version (which holds its lock) is not
// imported.
func TestOpenRefusesLockedLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bigLog(t, dir)
	held, err := os.Open(filepath.Join(dir, LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := filelock.Lock(held, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 50*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("Open while registry.log is in use = %v, want refused as locked", err)
	}
	if names := dirNames(t, dir); !cmp.Equal(names, []string{LogFile}) {
		t.Errorf("work dir holds %v, want only %s", names, LogFile)
	}
}

// TestOpenWaitsForAnotherImport checks two coordinators started at once on
// a work dir with a registry.log: the one that waited while the other
// imported opens registry.db (and its lock decides between them) instead
// of failing on files the import already moved.
func TestOpenWaitsForAnotherImport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	want := bigLog(t, dir)
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
	data, err := os.ReadFile(filepath.Join(dir, LogFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := importLog(dir, data, "digest"); err != nil {
		t.Fatal(err)
	}
	if _, err := retire(dir, LogFile, ImportedLogFile); err != nil {
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

// TestOpenWarnsOfMissingRegistry checks that a work dir holding only the
// backup of an imported log (registry.db moved away) starts empty and
// says so.
func TestOpenWarnsOfMissingRegistry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ImportedLogFile), encodeLog(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logged, err := openLogged(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "starting with an empty registry") {
		t.Errorf("logged %q, want a warning", logged.String())
	}
}
