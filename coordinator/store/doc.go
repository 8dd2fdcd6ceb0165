// Package store persists the coordinator's registry: the small set of state
// that must survive a coordinator restart or a leader change (agents,
// frameworks with their failover timeouts, role weights and quota, the
// maintenance schedule with the DOWN machines, the node profiles with their
// rollouts and history, and the coordinator's own secrets). Everything else (offers, allocations, tasks) is rebuilt from
// agents and frameworks when they re-register.
//
// The contract is internal/kv's Store (Apply mutations atomically, Load a
// bucket, Close), with these backends:
//
//   - bbolt (Open), the default: registry.db in the coordinator's work
//     dir, for one coordinator (kv.Bolt, new files with 8 KB pages). Apply
//     returns after fsync; concurrent calls share one transaction and one
//     fsync (group commit). It is fail-stop: after a commit failed on I/O
//     every write fails with ErrFailed until it is reopened (the
//     coordinator exits and its supervisor restarts it). Open imports the
//     registry.log of the versions that kept the registry in an
//     append-only log once (crash-safely; the log is kept as
//     registry.log.imported) and refuses, saying how to choose, a work dir
//     where registry.db and registry.log were written by different
//     versions (see Open). Only a reader of that log's format is left
//     (logformat.go), with a fuzz target.
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
// Errors: ErrClosed after Close; ErrFailed from a registry.db whose commit
// failed on I/O, until it is reopened; ErrFenced from a fenced etcd store
// whose leader was deposed; otherwise the backend's error wrapped with what was
// being done. An etcd Apply of more than MaxTxnOps mutations is split into
// fenced transactions, in order (see Etcd.Apply).
package store
