// Package kv is the durable bucketed key-value storage under the
// coordinator's registry (coordinator/store) and the agent's checkpoint:
// a tiny Store contract (Apply mutations atomically, Load a bucket, Close)
// and its implementation on an embedded bbolt file (Bolt, OpenBolt).
//
// Values are opaque bytes; callers store protobuf-encoded records and own
// their bucket names. The contract is small so that another backend (etcd
// for a highly available coordinator) can sit behind it.
//
// Lifecycle: open once at start, share between goroutines (a Store is safe
// for concurrent use), Close at exit. Apply returns only after the mutations
// are durable (bbolt's fsync), so whatever is acknowledged after Apply
// survives a crash; concurrent Apply calls share one transaction and one
// fsync (the writer goroutine of group.go commits them; Close commits what
// is waiting and stops it). Errors: opening a file another process holds
// fails after the timeout with an error that says so; operations on a
// closed Store return ErrClosed; with BoltOptions.FailStop, every write
// after a failed commit returns ErrFailed until the file is reopened; other
// errors are the file's, wrapped with the bucket and key.
package kv
