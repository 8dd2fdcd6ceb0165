// Package service is the job service's shell around the jobs core: a
// framework on the public API (frameworkapi) that feeds offers, status
// updates and time to the core and performs its effects, a Store that
// keeps every job and index (BoltStore, a file; EtcdStore, etcd fenced on
// a leader's term), the JobService Connect handler, /metrics, and Member,
// one replica of a highly available group.
//
// # Lifecycle
//
// New loads the store into a core; Handler serves JobService with the
// authorization of Config.Authz (a job belongs to the principal that
// submitted it: others see and cancel it only with view_jobs and
// cancel_jobs on its owner) and the jobs page at /ui/ (static files that
// call JobService with the caller's token); Run subscribes as the stored
// framework id (a failover: the coordinator kept its tasks for the
// failover timeout), reconciles the tasks the store says are launched, and
// runs until its context ends. A framework id the coordinator removed is
// forgotten and a new framework subscribes; reconciliation re-queues what
// was lost.
//
// # Durability
//
// The core hands out what each operation changed; the shell writes it
// (one bbolt transaction; with etcd, transactions fenced on the term)
// before the operation's effects leave the process:
// before launching (task ids are recorded before they run), before
// answering a submission or a cancellation, and before acknowledging status
// updates (the SDK's manual acknowledgements: an update applied but not
// written is re-sent by its agent after a SIGKILL). Updates are written in
// groups by a flusher goroutine, so that one fsync covers many. A batch
// whose write failed is written again with the next one.
//
// A launch whose Accept call failed is not re-queued: the core keeps it
// launched and the shell reconciles it (the coordinator may have launched
// it); tasks never sent (the store failed first) are re-queued at once.
//
// # High availability
//
// Member campaigns with coordinator/leader's Elector under
// <prefix>leader/; each term runs a new Service on an EtcdStore fenced on
// the term's key (a restart: load, subscribe as the stored framework id,
// reconcile), and ends it when the term ends. Followers refuse JobService
// calls with Unavailable naming the leader (protocol.LeaderHeader) and
// answer NOT_SERVING to health checks. A deposed leader's writes are
// refused by etcd, so it launches nothing unrecorded and acknowledges no
// update.
//
// # Locks
//
// mu guards the core and the acknowledgements waiting for a write; the
// persist lock orders writes. No RPC and no fsync happens under mu.
package service
