package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/slackline/slackline/internal/atomicfile"
	"github.com/slackline/slackline/internal/filelock"
	"github.com/slackline/slackline/internal/kv"
)

// Buckets used by the coordinator.
const (
	BucketAgents      = "agents"
	BucketFrameworks  = "frameworks"
	BucketWeights     = "weights"
	BucketQuotas      = "quotas"
	BucketMaintenance = "maintenance"
	// BucketSecrets holds the coordinator's own keys (the launch-proof key).
	BucketSecrets = "secrets"
)

// Store is durable bucketed key-value storage (see internal/kv).
type Store = kv.Store

// Mutation is one write: Value nil deletes Key from Bucket.
type Mutation = kv.Mutation

// ErrClosed is returned by operations on a closed store.
var ErrClosed = kv.ErrClosed

// ErrFailed is wrapped by the errors of a store that must be reopened (see
// kv.ErrFailed).
var ErrFailed = kv.ErrFailed

// Put returns a mutation that stores value under bucket/key.
func Put(bucket, key string, value []byte) Mutation { return kv.Put(bucket, key, value) }

// Delete returns a mutation that removes bucket/key.
func Delete(bucket, key string) Mutation { return kv.Delete(bucket, key) }

// OpenBolt opens (creating if needed) the bbolt registry file registry.db
// in dir, the registry of earlier versions (Open imports it into a log);
// kept as a backend for tests and benchmarks. A second process opening the
// same file waits up to timeout, then fails.
func OpenBolt(dir string, timeout time.Duration) (*kv.Bolt, error) {
	return kv.OpenBolt(filepath.Join(dir, BoltFile), timeout)
}

// Registry file names in the coordinator's work dir.
const (
	// LogFile is the registry: an append-only log (kv.Log).
	LogFile = "registry.log"
	// BoltFile is the registry of earlier versions, imported into LogFile
	// by Open: renamed ImportingBoltFile first, ImportedBoltFile once the
	// log is in place.
	BoltFile = "registry.db"
	// ImportingBoltFile is BoltFile while it is imported.
	ImportingBoltFile = "registry.db.importing"
	// ImportedBoltFile is BoltFile once imported, kept as a backup.
	ImportedBoltFile = "registry.db.imported"
)

// importBatch is the number of records per Apply when importing: frames of
// a few hundred KB rather than one of a whole bucket.
const importBatch = 1000

// Open opens (creating it and dir if needed) the registry log registry.log
// in dir. A second process opening the same file waits up to timeout, then
// fails: two coordinators must never share one work dir.
//
// Migration: when dir holds an earlier version's registry.db and no
// registry.log, registry.db is renamed registry.db.importing (once no
// earlier coordinator holds it), every bucket of it is copied into a new
// log (written as registry.log.tmp, synced, renamed into place, the
// directory synced), and it is renamed registry.db.imported, kept as a
// backup (an older backup is not overwritten). A crash at any point is
// taken up where it stopped. A registry.db beside a registry.log was
// written after the import (an earlier version run again on this work
// dir): Open refuses to guess which one holds the registry and says how
// to choose.
func Open(dir string, timeout time.Duration, log *slog.Logger) (Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	if err := migrate(dir, timeout, log); err != nil {
		return nil, err
	}
	return kv.OpenLog(filepath.Join(dir, LogFile), kv.LogOptions{LockTimeout: timeout, Logger: log})
}

// migrate imports registry.db into registry.log if needed. It holds a lock
// on dir throughout, so that two coordinators started at once on one work
// dir do not both import.
func migrate(dir string, timeout time.Duration, log *slog.Logger) error {
	logPath, boltPath, importing := filepath.Join(dir, LogFile), filepath.Join(dir, BoltFile), filepath.Join(dir, ImportingBoltFile)
	if !exists(boltPath) && !exists(importing) {
		return nil // nothing to import: the common case, without the lock
	}
	unlock, err := lockDir(dir, timeout)
	if err != nil {
		return err
	}
	defer unlock()
	switch {
	case !exists(boltPath) && !exists(importing):
		return nil // imported by another process while this one waited
	case exists(boltPath) && exists(logPath):
		return fmt.Errorf("registry: both %s and %s exist: %s was written after the registry moved to %s "+
			"(an earlier version of the coordinator run again on this work dir?). To keep the registry in %s, move %s away; "+
			"to use %s instead (what was written to the log since is lost), move %s away and it is imported again",
			LogFile, BoltFile, BoltFile, LogFile, LogFile, BoltFile, BoltFile, LogFile)
	case exists(boltPath):
		if exists(importing) {
			return fmt.Errorf("registry: both %s and %s exist: move one of them away", BoltFile, ImportingBoltFile)
		}
		if err := takeBolt(boltPath, importing, timeout); err != nil {
			return err
		}
	}
	records := -1 // the log was in place already
	if !exists(logPath) {
		if records, err = importBolt(importing, logPath, timeout); err != nil {
			return fmt.Errorf("import %s into %s: %w", importing, logPath, err)
		}
	}
	backup, err := retire(dir)
	if err != nil {
		return err
	}
	if records < 0 {
		log.Warn("registry: an import of registry.db was interrupted after registry.log was in place; using registry.log",
			"log", logPath, "backup", backup)
	} else {
		log.Info("registry: imported registry.db into registry.log; registry.db kept as a backup",
			"log", logPath, "records", records, "backup", backup)
	}
	return nil
}

// takeBolt renames registry.db to registry.db.importing once no other
// process holds it (an earlier coordinator still running), waiting up to
// timeout.
func takeBolt(boltPath, importing string, timeout time.Duration) error {
	f, err := os.Open(boltPath)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	defer f.Close() // and its lock
	if err := filelock.Lock(f, timeout); err != nil {
		return fmt.Errorf("registry: import %s: %w", boltPath, err)
	}
	if err := os.Rename(boltPath, importing); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(boltPath)); err != nil {
		return fmt.Errorf("registry: sync %s: %w", filepath.Dir(boltPath), err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// importBolt copies every bucket of the bbolt file into a new log at
// logPath, and returns the number of records copied.
func importBolt(boltPath, logPath string, timeout time.Duration) (int, error) {
	ctx := context.Background()
	old, err := kv.OpenBolt(boltPath, timeout)
	if err != nil {
		return 0, err
	}
	defer old.Close()
	tmpPath := logPath + ".tmp"
	if err := os.Remove(tmpPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	tmp, err := kv.OpenLog(tmpPath, kv.LogOptions{})
	if err != nil {
		return 0, err
	}
	records, err := copyBuckets(ctx, old, tmp)
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmpPath, logPath)
	}
	if err == nil {
		err = atomicfile.SyncDir(filepath.Dir(logPath))
	}
	if err != nil {
		os.Remove(tmpPath)
		return 0, err
	}
	return records, nil
}

// copyBuckets applies every record of from to to, in batches of
// importBatch; each Apply is synced.
func copyBuckets(ctx context.Context, from *kv.Bolt, to Store) (int, error) {
	buckets, err := from.Buckets(ctx)
	if err != nil {
		return 0, err
	}
	records := 0
	for _, bucket := range buckets {
		values, err := from.Load(ctx, bucket)
		if err != nil {
			return 0, err
		}
		var batch []Mutation
		for _, key := range slices.Sorted(maps.Keys(values)) {
			batch = append(batch, Put(bucket, key, values[key]))
			if len(batch) == importBatch {
				if err := to.Apply(ctx, batch...); err != nil {
					return 0, err
				}
				batch = batch[:0]
			}
		}
		if err := to.Apply(ctx, batch...); err != nil {
			return 0, err
		}
		records += len(values)
	}
	return records, nil
}

// retire renames registry.db.importing to registry.db.imported, or, if an
// older backup has that name, to a name of its own, syncs dir and returns
// the backup's path.
func retire(dir string) (string, error) {
	backup := filepath.Join(dir, ImportedBoltFile)
	if exists(backup) {
		backup += "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	}
	if err := os.Rename(filepath.Join(dir, ImportingBoltFile), backup); err != nil {
		return "", fmt.Errorf("registry: keep the imported registry.db as a backup: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return "", fmt.Errorf("registry: sync %s: %w", dir, err)
	}
	return backup, nil
}

// lockDir takes an exclusive flock on dir, retrying until timeout, and
// returns its release.
func lockDir(dir string, timeout time.Duration) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if err := filelock.Lock(d, timeout); err != nil {
		d.Close()
		return nil, fmt.Errorf("registry: lock %s to import registry.db: %w", dir, err)
	}
	return func() { d.Close() }, nil
}
