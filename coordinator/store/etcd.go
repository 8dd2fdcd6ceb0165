package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ErrFenced is returned by Apply on a fenced Etcd store once the fence no
// longer holds: the leader key it names is gone (the lease expired or was
// revoked) or was created again by another leader. Nothing was written.
var ErrFenced = errors.New("store fenced: this coordinator is no longer the leader")

// Defaults of an Etcd store.
const (
	// DefaultEtcdPrefix is the key prefix under which a coordinator group
	// keeps its registry and its election.
	DefaultEtcdPrefix = "/slackline/"
	// DefaultMaxTxnOps is etcd's default --max-txn-ops: the most mutations
	// one transaction carries (the fence's compare is not counted).
	DefaultMaxTxnOps = 128
	// DefaultRequestTimeout bounds one etcd request.
	DefaultRequestTimeout = 10 * time.Second
)

// EtcdConfig says how to reach an etcd cluster.
type EtcdConfig struct {
	// Endpoints are the client URLs of the etcd members.
	Endpoints []string
	// TLS, when set, is used for every endpoint (a CA to trust and, for
	// etcd's --client-cert-auth, a client certificate).
	TLS *tls.Config
	// DialTimeout bounds the first connection (default 5 s).
	DialTimeout time.Duration
}

// DialEtcd connects to etcd. The client is the caller's: the registry
// (NewEtcd) and the election (coordinator/leader) share it, and the caller
// closes it last.
func DialEtcd(cfg EtcdConfig) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		DialTimeout: cfg.DialTimeout,
		// Keepalive pings find a dead connection in seconds, not at the
		// next request's timeout.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return client, nil
}

// Fence makes writes conditional on leadership: Key is the key the
// leader holds in etcd (bound to its lease) and Revision that key's
// creation revision. While the key exists with that creation revision the
// writer is the leader; once its lease expires the key is deleted, and no
// later key can have the same creation revision.
type Fence struct {
	Key      string
	Revision int64
}

// Commit runs ops in one transaction on client, conditional on f when it
// is set (an unset fence commits unconditionally). held is false, with no
// error, when the fence no longer holds and nothing was written.
func (f Fence) Commit(ctx context.Context, client *clientv3.Client, ops []clientv3.Op) (held bool, err error) {
	txn := client.Txn(ctx)
	if f.Key != "" {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Revision))
	}
	resp, err := txn.Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// EtcdOptions configure an Etcd store.
type EtcdOptions struct {
	// Prefix is the key prefix of the coordinator group (DefaultEtcdPrefix).
	Prefix string
	// Fence, when set, makes every Apply a transaction conditional on it.
	// Unfenced stores are for a single writer (tests, tools); coordinators
	// in a group write only through fenced ones.
	Fence Fence
	// OnFenced is called (once per failed Apply) when the fence no longer
	// holds, so the owner can stop acting as leader at once.
	OnFenced func()
	// Context, when set, bounds every request (a leader's term): requests
	// still waiting when it ends fail.
	Context context.Context
	// MaxTxnOps is the most mutations one transaction carries
	// (DefaultMaxTxnOps; etcd's --max-txn-ops).
	MaxTxnOps int
	// RequestTimeout bounds each request (DefaultRequestTimeout).
	RequestTimeout time.Duration
}

// Etcd is a Store whose buckets are key ranges in etcd:
// <prefix>registry/<bucket>/<key>. Apply returns once etcd acknowledged
// the transaction, that is once a quorum of members persisted it (the
// durable-before-reply promise of the bbolt store, replicated). Close
// releases the store, not the client.
type Etcd struct {
	client *clientv3.Client
	opts   EtcdOptions
	closed atomic.Bool
}

// NewEtcd returns a Store on an etcd client (see DialEtcd).
func NewEtcd(client *clientv3.Client, opts EtcdOptions) *Etcd {
	if opts.Prefix == "" {
		opts.Prefix = DefaultEtcdPrefix
	}
	if opts.MaxTxnOps <= 0 {
		opts.MaxTxnOps = DefaultMaxTxnOps
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	return &Etcd{client: client, opts: opts}
}

// RegistryPrefix returns the key prefix of the registry in etcd.
func (e *Etcd) RegistryPrefix() string { return e.opts.Prefix + "registry/" }

func (e *Etcd) key(bucket, key string) string { return e.RegistryPrefix() + bucket + "/" + key }

// request returns the context of one request: the caller's, ended by the
// store's context and the request timeout too.
func (e *Etcd) request(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	stop := context.AfterFunc(e.opts.Context, cancel)
	return ctx, func() { stop(); cancel() }
}

// Apply implements Store. Mutations are one transaction, conditional on
// the fence when there is one. More than MaxTxnOps mutations (after
// keeping only the last mutation of each key) are written as several
// transactions, in order, each fenced: a failure may leave a prefix of
// them applied. The coordinator writes that many only as independent
// per-agent records.
func (e *Etcd) Apply(ctx context.Context, mutations ...Mutation) error {
	if e.closed.Load() {
		return ErrClosed
	}
	ops := e.ops(mutations)
	for len(ops) > 0 {
		n := min(len(ops), e.opts.MaxTxnOps)
		if err := e.commit(ctx, ops[:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// ops turns mutations into etcd operations. etcd refuses a transaction
// that names a key twice; the last mutation of a key wins, as in bbolt.
func (e *Etcd) ops(mutations []Mutation) []clientv3.Op {
	last := make(map[string]int, len(mutations))
	for i, m := range mutations {
		last[e.key(m.Bucket, m.Key)] = i
	}
	ops := make([]clientv3.Op, 0, len(last))
	for i, m := range mutations {
		key := e.key(m.Bucket, m.Key)
		if last[key] != i {
			continue
		}
		if m.Value == nil {
			ops = append(ops, clientv3.OpDelete(key))
		} else {
			ops = append(ops, clientv3.OpPut(key, string(m.Value)))
		}
	}
	return ops
}

func (e *Etcd) commit(ctx context.Context, ops []clientv3.Op) error {
	ctx, cancel := e.request(ctx)
	defer cancel()
	held, err := e.opts.Fence.Commit(ctx, e.client, ops)
	if err != nil {
		return fmt.Errorf("etcd transaction: %w", err)
	}
	if !held {
		if e.opts.OnFenced != nil {
			e.opts.OnFenced()
		}
		return ErrFenced
	}
	return nil
}

// Load implements Store with a linearizable read: it sees every write
// acknowledged before it, by this coordinator or an earlier leader.
func (e *Etcd) Load(ctx context.Context, bucket string) (map[string][]byte, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	ctx, cancel := e.request(ctx)
	defer cancel()
	prefix := e.RegistryPrefix() + bucket + "/"
	resp, err := e.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd load %s: %w", bucket, err)
	}
	out := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = kv.Value
	}
	return out, nil
}

// Close implements Store: later calls fail with ErrClosed. The client
// stays open (it is the caller's).
func (e *Etcd) Close() error {
	e.closed.Store(true)
	return nil
}
