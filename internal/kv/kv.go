package kv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrClosed is returned by operations on a closed store.
var ErrClosed = errors.New("store closed")

// ErrFailed is wrapped by the errors of a store that can take no more
// writes until it is reopened: after a failed fsync the kernel may have
// dropped the pages written, so nothing after can be acknowledged; a
// reopen recovers the file as after a crash. A process should exit (its
// supervisor restarts it), as etcd and PostgreSQL do.
var ErrFailed = errors.New("the store failed: no more writes until it is reopened")

// Mutation is one write: Value nil deletes Key from Bucket.
type Mutation struct {
	Bucket string
	Key    string
	Value  []byte
}

// Put returns a mutation that stores value under bucket/key.
func Put(bucket, key string, value []byte) Mutation { return Mutation{bucket, key, value} }

// Delete returns a mutation that removes bucket/key.
func Delete(bucket, key string) Mutation { return Mutation{Bucket: bucket, Key: key} }

// Store is durable bucketed key-value storage. Implementations are safe
// for concurrent use.
type Store interface {
	// Apply writes the mutations atomically and durably.
	Apply(ctx context.Context, mutations ...Mutation) error
	// Load returns every key and value of a bucket (empty when it does not exist).
	Load(ctx context.Context, bucket string) (map[string][]byte, error)
	// Close releases the store.
	Close() error
}

// Bolt is a Store in a bbolt file. Its writes are group-committed: one
// long-lived writer goroutine commits, in one transaction and one fsync,
// every Apply that arrived while the previous commit ran (see Apply).
type Bolt struct {
	db       *bolt.DB
	group    *group
	failStop bool
	// failed is set, with FailStop, by the commit that failed; only the
	// writer goroutine reads and writes it.
	failed error
}

// pageSize is the page size of new files. bbolt allocates a page-sized
// buffer for the meta page of every commit and for each page it writes. At
// the 4 KB default these buffers share the heap's 4 KB size class with
// long-lived buffers (every HTTP connection holds two bufio buffers of that
// size), so a commit's garbage leaves half-empty spans behind it; at 8 KB
// each buffer has a span of its own, freed whole. Measured with
// scripts/bench/idle (one registry commit per subscription): 0.8-1 KB less
// coordinator RSS per idle subscription. Commits write more bytes but no
// more often, and a registry holds more records per leaf.
const pageSize = 8192

// BoltOptions configures OpenBolt. The zero value is usable.
type BoltOptions struct {
	// LockTimeout is how long to wait for another process's lock on the
	// file before failing; zero tries once.
	LockTimeout time.Duration
	// FailStop makes a commit that failed other than by a refused
	// mutation (an I/O error, a failed fsync) the store's last: every
	// later Apply fails with ErrFailed until the file is reopened. After a
	// failed fsync the kernel may have dropped or kept the pages written,
	// and bbolt may go on from a meta page that is not durable, so
	// nothing after can be acknowledged safely (etcd stops its process on
	// a failed backend commit). For the coordinator's registry, whose
	// process exits on ErrFailed; the agent's checkpoint retries instead.
	FailStop bool
}

// OpenBolt opens (creating it and its directory if needed) a bbolt file at
// path. A second process opening the same file waits up to
// opts.LockTimeout for the first one's lock, then fails: two processes
// must never share one file.
func OpenBolt(path string, opts BoltOptions) (*Bolt, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	// The freelist is not written at each commit (bbolt rebuilds it by
	// scanning the file when it opens one, fast at the sizes of a registry
	// or a checkpoint), and is kept as a map: a commit allocates and writes
	// less. New files use pageSize pages; a file keeps the page size
	// it was created with.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, PageSize: pageSize})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: locked by another process (is another process using this --work-dir?)", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	b := &Bolt{db: db, failStop: opts.FailStop}
	b.group = newGroup(b.update)
	return b, nil
}

// Apply implements Store. Calls that arrive while a commit is under way
// wait for the next one and share it: one transaction and one fsync for all
// of them, which keeps thousands of agents registering at once cheap, and a
// lone write is committed at once. If a shared transaction fails, each
// call's mutations are committed again on their own, so that one call's bad
// write fails that call alone.
//
// The writes run on the writer goroutine, not the caller's: bbolt's commit
// is deep and allocates, and a caller that lives on (a stream's handler)
// would keep the stack it grew to.
func (b *Bolt) Apply(ctx context.Context, mutations ...Mutation) error {
	return b.group.apply(ctx, mutations)
}

// update commits writes in one transaction. It runs on the writer
// goroutine.
func (b *Bolt) update(writes [][]Mutation) error {
	if b.failed != nil {
		return b.failed
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		for _, mutations := range writes {
			for _, m := range mutations {
				bucket, err := tx.CreateBucketIfNotExists([]byte(m.Bucket))
				if err != nil {
					return &writeError{fmt.Errorf("bucket %s: %w", m.Bucket, err)}
				}
				if m.Value == nil {
					err = bucket.Delete([]byte(m.Key))
				} else {
					err = bucket.Put([]byte(m.Key), m.Value)
				}
				if err != nil {
					return &writeError{fmt.Errorf("write %s/%s: %w", m.Bucket, m.Key, err)}
				}
			}
		}
		return nil
	})
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	if _, refused := errors.AsType[*writeError](err); err != nil && !refused && b.failStop {
		b.failed = fmt.Errorf("commit to %s: %w: %w", b.db.Path(), err, ErrFailed)
		return b.failed
	}
	return err
}

// Load implements Store.
func (b *Bolt) Load(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	err := b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(bucket))
		if bk == nil {
			return nil
		}
		return bk.ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return nil, ErrClosed
	}
	return out, err
}

// Close implements Store. Writes already waiting are committed first; an
// Apply after Close returns ErrClosed. Every call waits for that.
func (b *Bolt) Close() error {
	b.group.close()
	return b.db.Close()
}
