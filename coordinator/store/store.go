package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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
	// BucketProfiles holds the node profiles (#29), by name.
	BucketProfiles = "profiles"
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

// Registry file names in the coordinator's work dir.
const (
	// BoltFile is the registry, a bbolt file.
	BoltFile = "registry.db"
	// LogFile is the registry of the versions that kept it in an
	// append-only log, imported into BoltFile once by Open.
	LogFile = "registry.log"
	// ImportedLogFile is LogFile once imported, kept as a backup; an older
	// one is never overwritten (the next takes a suffix of its own).
	ImportedLogFile = "registry.log.imported"
	// ImportedBoltFile is the backup the log versions kept of the
	// registry.db they imported (older than their registry.log).
	ImportedBoltFile = "registry.db.imported"
	// ImportingBoltFile is a registry.db the log versions were importing
	// when they stopped.
	ImportingBoltFile = "registry.db.importing"

	// importTmpFile is BoltFile while an import writes it.
	importTmpFile = BoltFile + ".tmp"
	// importBucket holds, under the key LogFile, the SHA-256 of the
	// registry.log a registry.db was imported from: the mark that tells a
	// crash after the import from a registry.db of another origin.
	importBucket = "import"
)

// importBatch is the number of records per transaction of an import.
const importBatch = 1000

// Open opens (creating it and dir if needed) the registry registry.db in
// dir, a bbolt file (kv.Bolt, fail-stop: after a failed commit every write
// fails with ErrFailed until it is reopened). A second process opening the
// same file waits up to timeout, then fails: two coordinators must never
// share one work dir.
//
// Migration, under a lock on dir so that two coordinators started at once
// do not both import:
//   - A registry.log of a log version and no registry.db: the log is read
//     as that version recovered it (a torn last write dropped and logged;
//     other damage refuses it, changing nothing), its records written to a
//     new registry.db.tmp with the log's SHA-256, synced, renamed
//     registry.db, the directory synced; then registry.log is renamed
//     registry.log.imported (or, if an older backup has that name, a name
//     of its own), kept as a backup. A registry.db.imported beside it (the
//     log version's backup of the registry.db before it) is older and left
//     alone.
//   - registry.db and registry.log: if registry.db holds that log's
//     SHA-256, a crash came after the import, and the log is renamed as
//     above; otherwise each was written by a different version run on this
//     work dir, and Open refuses to guess which one holds the registry and
//     says how to choose, changing nothing.
//   - registry.db.importing (a log version stopped while importing a
//     registry.db): without registry.log, it is the registry and becomes
//     registry.db again; with it, the log is the registry and it is kept as
//     registry.db.imported; beside a registry.db, Open refuses.
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
	return kv.OpenBolt(filepath.Join(dir, BoltFile), kv.BoltOptions{LockTimeout: timeout, FailStop: true})
}

// migrate brings dir to a registry.db alone (see Open).
func migrate(dir string, timeout time.Duration, log *slog.Logger) error {
	has := func(name string) bool {
		_, err := os.Lstat(filepath.Join(dir, name))
		return err == nil
	}
	if !has(LogFile) && !has(ImportingBoltFile) {
		// Nothing to import: the common case, without the lock.
		if !has(BoltFile) && has(ImportedLogFile) {
			log.Warn("registry: registry.db is missing but registry.log.imported is here: starting with an empty registry",
				"path", filepath.Join(dir, BoltFile), "backup", filepath.Join(dir, ImportedLogFile))
		}
		return nil
	}
	unlock, err := lockDir(dir, timeout)
	if err != nil {
		return err
	}
	defer unlock()
	// Looked at again under the lock: another coordinator may have
	// imported while this one waited.
	if has(ImportingBoltFile) {
		switch {
		case has(BoltFile):
			return fmt.Errorf("registry: both %s and %s exist in %s: move one of them away", BoltFile, ImportingBoltFile, dir)
		case has(LogFile):
			backup, err := retire(dir, ImportingBoltFile, ImportedBoltFile)
			if err != nil {
				return err
			}
			log.Warn("registry: an import of registry.db by an earlier version was interrupted after its registry.log was in place; registry.log is imported",
				"backup", backup)
		default:
			if err := rename(dir, ImportingBoltFile, BoltFile); err != nil {
				return err
			}
			log.Warn("registry: an import of registry.db by an earlier version was interrupted before its registry.log was in place; using registry.db",
				"path", filepath.Join(dir, BoltFile))
		}
	}
	if !has(LogFile) {
		return nil
	}
	logPath := filepath.Join(dir, LogFile)
	f, err := os.Open(logPath)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	defer f.Close() // and its lock
	// A coordinator of the log version still running holds it.
	if err := filelock.Lock(f, timeout); err != nil {
		return fmt.Errorf("registry: import %s: %w", logPath, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("registry: read %s: %w", logPath, err)
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	if has(BoltFile) {
		if err := sameImport(dir, digest, timeout); err != nil {
			return err
		}
		backup, err := retire(dir, LogFile, ImportedLogFile)
		if err != nil {
			return err
		}
		log.Warn("registry: an import of registry.log was interrupted after registry.db was in place; using registry.db",
			"path", filepath.Join(dir, BoltFile), "backup", backup)
		return removeLogTmp(dir)
	}
	records, recovery, err := importLog(dir, data, digest)
	if err != nil {
		return fmt.Errorf("registry: import %s: %w", logPath, err)
	}
	if recovery.Torn != "" {
		log.Warn("registry: the torn tail of registry.log (a write that never completed) was not imported",
			"path", logPath, "offset", recovery.End, "bytes_dropped", int64(len(data))-recovery.End, "reason", recovery.Torn)
	}
	backup, err := retire(dir, LogFile, ImportedLogFile)
	if err != nil {
		return err
	}
	log.Info("registry: imported registry.log into registry.db; registry.log kept as a backup",
		"path", filepath.Join(dir, BoltFile), "records", records, "backup", backup)
	return removeLogTmp(dir)
}

// sameImport checks that the registry.db in dir was imported from the
// registry.log whose SHA-256 is digest, or says how to choose between them.
func sameImport(dir, digest string, timeout time.Duration) error {
	boltPath := filepath.Join(dir, BoltFile)
	db, err := kv.OpenBolt(boltPath, kv.BoltOptions{LockTimeout: timeout})
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	marks, err := db.Load(context.Background(), importBucket)
	if closeErr := db.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("registry: read %s: %w", boltPath, err)
	}
	if string(marks[LogFile]) == digest {
		return nil
	}
	modified := func(name string) string {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return "unknown"
		}
		return info.ModTime().UTC().Format(time.RFC3339)
	}
	older := ""
	if _, err := os.Lstat(filepath.Join(dir, ImportedBoltFile)); err == nil {
		older = fmt.Sprintf(" (%s is the %s that the log version imported when it made %s, older than both)", ImportedBoltFile, BoltFile, LogFile)
	}
	return fmt.Errorf("registry: both %s (modified %s) and %s (modified %s) exist in %s, and %s is not the import of this %s: "+
		"each was written by a different version of the coordinator run on this work dir. "+
		"To keep %s, move %s away (it is not read); to keep %s instead, move %s away (what was written to it is not read) "+
		"and %s is imported into a new %s%s",
		BoltFile, modified(BoltFile), LogFile, modified(LogFile), dir, BoltFile, LogFile,
		BoltFile, LogFile, LogFile, BoltFile, LogFile, BoltFile, older)
}

// importLog writes the records of the log data into a new registry.db in
// dir, with digest as its mark: written as registry.db.tmp, synced (every
// transaction is), renamed into place and the directory synced. It
// returns the number of records written.
func importLog(dir string, data []byte, digest string) (int, logRecovery, error) {
	live := map[string]map[string][]byte{}
	recovery, err := decodeLog(data, func(bucket, key, value []byte) {
		records := live[string(bucket)]
		if value == nil {
			delete(records, string(key))
			return
		}
		if records == nil {
			records = map[string][]byte{}
			live[string(bucket)] = records
		}
		records[string(key)] = value
	})
	if err != nil {
		return 0, logRecovery{}, err
	}
	tmpPath := filepath.Join(dir, importTmpFile)
	if err := os.Remove(tmpPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, logRecovery{}, err // an import a crash interrupted
	}
	records, err := writeRecords(tmpPath, live, digest)
	if err == nil {
		err = rename(dir, importTmpFile, BoltFile)
	}
	if err != nil {
		os.Remove(tmpPath)
		return 0, logRecovery{}, err
	}
	return records, recovery, nil
}

// writeRecords writes live, then the import mark, into a new bbolt file at
// path, in transactions of importBatch records.
func writeRecords(path string, live map[string]map[string][]byte, digest string) (int, error) {
	ctx := context.Background()
	db, err := kv.OpenBolt(path, kv.BoltOptions{FailStop: true})
	if err != nil {
		return 0, err
	}
	records := 0
	var batch []Mutation
	for _, bucket := range slices.Sorted(maps.Keys(live)) {
		for _, key := range slices.Sorted(maps.Keys(live[bucket])) {
			batch = append(batch, Put(bucket, key, live[bucket][key]))
			records++
			if len(batch) == importBatch {
				if err = db.Apply(ctx, batch...); err != nil {
					break
				}
				batch = batch[:0]
			}
		}
	}
	if err == nil {
		err = db.Apply(ctx, append(batch, Put(importBucket, LogFile, []byte(digest)))...)
	}
	if closeErr := db.Close(); err == nil {
		err = closeErr
	}
	return records, err
}

// retire renames from to backup in dir or, if an older backup has that
// name, to backup with a suffix of its own, syncs dir and returns the
// backup's path.
func retire(dir, from, backup string) (string, error) {
	if _, err := os.Lstat(filepath.Join(dir, backup)); err == nil {
		backup += "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	}
	if err := rename(dir, from, backup); err != nil {
		return "", fmt.Errorf("registry: keep %s as a backup: %w", from, err)
	}
	return filepath.Join(dir, backup), nil
}

// rename renames from to to in dir and syncs dir.
func rename(dir, from, to string) error {
	if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("registry: sync %s: %w", dir, err)
	}
	return nil
}

// removeLogTmp removes what a log version's compaction or import left when
// it was interrupted: the log it belonged to is imported.
func removeLogTmp(dir string) error {
	if err := os.Remove(filepath.Join(dir, LogFile+".tmp")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
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
		return nil, fmt.Errorf("registry: lock %s to import the registry: %w", dir, err)
	}
	return func() { d.Close() }, nil
}
