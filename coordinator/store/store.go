package store

import (
	"path/filepath"
	"time"

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

// Put returns a mutation that stores value under bucket/key.
func Put(bucket, key string, value []byte) Mutation { return kv.Put(bucket, key, value) }

// Delete returns a mutation that removes bucket/key.
func Delete(bucket, key string) Mutation { return kv.Delete(bucket, key) }

// OpenBolt opens (creating if needed) the registry file registry.db in dir.
// A second process opening the same file waits up to timeout, then fails:
// two coordinators must never share one work dir.
func OpenBolt(dir string, timeout time.Duration) (*kv.Bolt, error) {
	return kv.OpenBolt(filepath.Join(dir, "registry.db"), timeout)
}
