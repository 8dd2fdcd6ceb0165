// Package kv is the durable bucketed key-value storage under the
// coordinator's registry (coordinator/store) and the agent's checkpoint:
// a tiny Store contract (Apply mutations atomically, Load a bucket, Close)
// and two implementations: Log (OpenLog), an append-only file of
// checksummed frames for the coordinator's registry, written record by
// record and read only at recovery; and Bolt (OpenBolt), an embedded bbolt
// file for the agent's checkpoint.
//
// Values are opaque bytes; callers store protobuf-encoded records and own
// their bucket names. The contract is small so that another backend (etcd
// for a highly available coordinator) can sit behind it.
//
// Lifecycle: open once at start, share between goroutines (a Store is safe
// for concurrent use), Close at exit. Apply returns only after the mutations
// are durable (fsync for bbolt, fdatasync of its frame for a Log), so
// whatever is acknowledged after Apply survives a crash; concurrent Apply
// calls share one transaction or frame and one sync (both stores' writer
// goroutine, group.go, commits them; Close commits what is waiting and stops
// it). Errors: opening a file another process holds fails after the timeout
// with an error that says so; operations on a closed Store return
// ErrClosed; a Log refuses a damaged file (other than a torn last write,
// which it truncates) with the file and offset; other errors are the
// file's, wrapped with the bucket and key.
package kv
