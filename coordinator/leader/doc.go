// Package leader runs coordinators as a highly available group on etcd:
// one member leads and runs the coordinator, the others follow and send
// clients to it, and a leader that may have lost its lease stops acting
// before another can be elected.
//
// # Place in the data flow
//
// cmd/slackline-coordinator with --etcd-endpoints builds a Member instead
// of a bare coordinator.Coordinator and serves Member.Handler. Clients
// (agents, frameworks, slacklinectl) reach any member; the leader answers,
// the others answer Unavailable with the leader's URL in the
// Slackline-Leader header (protocol.LeaderHeader), which
// internal/leaderclient follows. Registry writes go to etcd through a
// store fenced on the leader's term (coordinator/store.Etcd).
//
// # Election and terms
//
// Elector.Campaign grants a lease (the lease TTL, --lease-ttl), campaigns
// with clientv3/concurrency's Election and returns a Term once this member
// leads. A term ends, for good, when:
//
//   - the lease's local deadline passes. The deadline is sent + TTL -
//     margin, with sent the time a keepalive request that etcd answered
//     was sent, so it is never later than etcd's own expiry, however late
//     the answer arrives (measuring from the answer is the trap of etcd
//     issue 10082 and tikv/pd's early leader lease);
//   - a registry write finds the fence broken (store.ErrFenced): the
//     leader key is gone or belongs to another term;
//   - the member resigns (Run's context ended).
//
// A campaign runs under the lease's context, so a campaign whose lease
// expired while it waited is aborted instead of winning with a deleted
// key (etcd issue 10082); after winning it checks that its key still
// exists with its creation revision and is the election's first.
//
// # Fencing: what a deposed leader cannot do
//
// Every registry write is an etcd transaction conditional on the leader
// key's creation revision (store.Fence): once the lease expired, etcd
// refuses the write, whatever the deposed process believes. Everything
// else a leader does reaches others through its HTTP responses (offers
// and events on Subscribe streams, commands on agents' Connect streams,
// answers); Member.Handler checks the term before every write of a
// response (gatedWriter) and ends every request with the term. A process
// that was paused past its lease (GC, SIGSTOP, a partition) and resumes
// may run any goroutine first; the check does not depend on its timers
// having run. What remains is the window between the check and the bytes
// leaving the process, microseconds against a lease of seconds.
//
// # Terms are restarts
//
// Each term runs a fresh coordinator.Coordinator (coordinator.New then
// Run) on the fenced store, with its own metrics registry: it recovers the
// registry exactly as after a restart (agents RECOVERING until they
// re-register within the agent re-register timeout, frameworks
// DISCONNECTED until they resubscribe within their failover timeout), and
// is dropped when the term ends. Member.Run then campaigns again.
// Terms is that loop, the term-gated handler and the leader metrics,
// whatever a term serves: the job service's replicas (jobs/service.Member)
// run their terms on it too.
//
// # Locks and ownership
//
// A Member holds no mutex: the current term is an atomic pointer, the
// lease clock has one small mutex (Term.Valid is called for every write
// of a response). The etcd client is the caller's; the member and the
// registry share it.
//
// # Errors
//
// Campaign returns etcd's errors wrapped, or ErrLeaseExpired. Run retries
// failed campaigns and failed recoveries with backoff and returns nil
// when its context ends. A term's context ends with a cause:
// ErrLeaseExpired, store.ErrFenced, or a resignation. Requests in flight
// when a term ends are cancelled with ErrNotLeader.
package leader
