// Package store persists the coordinator's registry: the small set of state
// that must survive a coordinator restart or a leader change (agents,
// frameworks with their failover timeouts, role weights and quota, the
// maintenance schedule with the DOWN machines, and the coordinator's own
// secrets). Everything else (offers, allocations, tasks) is rebuilt from
// agents and frameworks when they re-register.
//
// The contract is internal/kv's Store (Apply mutations atomically, Load a
// bucket, Close), with these backends:
//
//   - a log (Open), the default: registry.log in the coordinator's work
//     dir, for one coordinator, an append-only file of checksummed frames
//     compacted as it grows (kv.Log). Apply returns after the fdatasync of
//     its frame; concurrent calls share one frame and one fdatasync. Load
//     reads the whole file: it is for recovery at start. Open imports an
//     earlier version's registry.db (bbolt) once, keeping it as
//     registry.db.imported.
//   - bbolt (OpenBolt): registry.db, the registry of earlier versions, kept
//     for tests and benchmarks. Apply returns after fsync.
//   - etcd (DialEtcd, NewEtcd), for a group of coordinators of which one
//     leads (coordinator/leader). Bucket b's key k is the etcd key
//     <prefix>registry/b/k. Apply is one etcd transaction and returns once
//     etcd acknowledged it, that is once a quorum of members persisted it;
//     Load is a linearizable read, so a new leader sees every write its
//     predecessor acknowledged. A store made with a Fence writes only while
//     the fence holds: each transaction is conditional on the leader key's
//     creation revision, so a deposed leader's writes fail with ErrFenced
//     (and call OnFenced) whatever its own clock believes.
//
// Values are opaque bytes; the coordinator stores protobuf-encoded records
// (slackline.v1 *Record messages).
//
// Lifecycle: open once at start, share between goroutines (implementations
// are safe for concurrent use), Close at exit. An etcd store does not own
// its client: the registry and the election share one, which the caller
// closes last. Apply returns only after the mutations are durable, so an
// RPC acknowledged after Apply is never lost across a crash or a failover.
//
// Errors: ErrClosed after Close; ErrFenced from a fenced etcd store whose
// leader was deposed; otherwise the backend's error wrapped with what was
// being done. An etcd Apply of more than MaxTxnOps mutations is split into
// fenced transactions, in order (see Etcd.Apply).
package store
