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

// Bolt is a Store in a bbolt file.
type Bolt struct {
	db *bolt.DB
}

// OpenBolt opens (creating it and its directory if needed) a bbolt file at
// path. A second process opening the same file waits up to timeout for the
// first one's lock, then fails: two processes must never share one file.
func OpenBolt(path string, timeout time.Duration) (*Bolt, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: locked by another process (is another process using this --work-dir?)", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// bbolt waits up to MaxBatchDelay (10 ms by default) for concurrent
	// writers to join a batch; 1 ms keeps the coalescing under load without
	// adding 10 ms to every lone write.
	db.MaxBatchDelay = time.Millisecond
	return &Bolt{db: db}, nil
}

// Apply implements Store. Concurrent calls are coalesced into one
// transaction and one fsync (bbolt's Batch), which keeps thousands of agents
// registering at once cheap.
func (b *Bolt) Apply(ctx context.Context, mutations ...Mutation) error {
	if len(mutations) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := b.db.Batch(func(tx *bolt.Tx) error {
		for _, m := range mutations {
			bucket, err := tx.CreateBucketIfNotExists([]byte(m.Bucket))
			if err != nil {
				return fmt.Errorf("bucket %s: %w", m.Bucket, err)
			}
			if m.Value == nil {
				err = bucket.Delete([]byte(m.Key))
			} else {
				err = bucket.Put([]byte(m.Key), m.Value)
			}
			if err != nil {
				return fmt.Errorf("write %s/%s: %w", m.Bucket, m.Key, err)
			}
		}
		return nil
	})
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return ErrClosed
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

// Close implements Store.
func (b *Bolt) Close() error { return b.db.Close() }
