// Package store persists the coordinator's registry: the small set of state
// that must survive a coordinator restart (agents, frameworks with their
// failover timeouts, role weights and quota, and the maintenance
// schedule with the DOWN machines). Everything else (offers, allocations, tasks) is rebuilt from
// agents and frameworks when they re-register.
//
// The storage itself is internal/kv, shared with the agent's checkpoint: a
// tiny bucketed key-value contract so that the embedded bbolt file (the
// default, see OpenBolt) and an etcd backend for high availability can sit
// behind it. This package adds what is the coordinator's: the bucket names
// and the registry file in the work dir. Values are opaque bytes; the
// coordinator stores protobuf-encoded records (slackline.v1 *Record messages).
//
// Lifecycle: open once at start, share between goroutines (implementations
// are safe for concurrent use), Close at exit. Apply returns only after the
// mutations are durable (fsync for bbolt), so an RPC acknowledged after Apply
// is never lost across a crash.
package store
