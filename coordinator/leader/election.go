package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/internal/backoff"
)

// errStaleCampaign is a campaign that returned after its own key was gone
// (its lease expired while it waited: etcd issue 10082).
var errStaleCampaign = errors.New("campaign won after its lease ended")

// Elector campaigns for leadership of a coordinator group and observes
// who leads. Campaign and Observe may run concurrently; Leader is safe
// from any goroutine.
type Elector struct {
	client *clientv3.Client
	// prefix of the election's keys, without the trailing "/" that
	// concurrency.Election adds.
	prefix string
	url    string
	ttl    time.Duration
	margin time.Duration
	log    *slog.Logger
	leader atomic.Pointer[string]
}

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	// Client is the etcd client (store.DialEtcd).
	Client *clientv3.Client
	// Prefix is the group's key prefix (store.DefaultEtcdPrefix); the
	// election's keys are <Prefix>leader/<lease id>.
	Prefix string
	// URL is this member's advertised URL, the value of its election key.
	URL string
	// TTL is the lease's time to live (DefaultTTL; etcd rounds to whole
	// seconds and raises it to its minimum).
	TTL time.Duration
	// Margin is taken off the local deadline to absorb clock-rate
	// differences (default TTL/10, at most 500 ms).
	Margin time.Duration
	Logger *slog.Logger
}

// DefaultTTL is the default leader lease TTL.
const DefaultTTL = 10 * time.Second

// NewElector returns an Elector.
func NewElector(cfg ElectorConfig) *Elector {
	if cfg.Prefix == "" {
		cfg.Prefix = store.DefaultEtcdPrefix
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Margin <= 0 {
		cfg.Margin = min(cfg.TTL/10, 500*time.Millisecond)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Elector{client: cfg.Client, prefix: cfg.Prefix + "leader", url: cfg.URL, ttl: cfg.TTL, margin: cfg.Margin, log: cfg.Logger}
	e.leader.Store(new(string))
	return e
}

// Leader returns the advertised URL of the current leader as last
// observed ("" while none is known).
func (e *Elector) Leader() string { return *e.leader.Load() }

// Term is one period of leadership. It ends when its lease's local
// deadline passes, when End is called (a write found the fence broken),
// or after Resign; it never resumes.
type Term struct {
	// Fence makes registry writes conditional on this term (store.Fence).
	Fence    store.Fence
	lease    *lease
	session  *concurrency.Session
	election *concurrency.Election
	done     chan struct{}
	// release revokes the lease (best effort).
	release func()
}

// Context ends with the term; its cause says why (ErrLeaseExpired, ...).
func (t *Term) Context() context.Context { return t.lease.ctx }

// Valid reports whether the term certainly still holds now: its lease's
// local deadline has not passed and it was not ended. A leader checks it
// before every byte it sends, so that a process that was paused does not
// act before its timers have run.
func (t *Term) Valid() bool { return t.lease.valid(time.Now()) }

// End ends the term now with cause (store.ErrFenced when a write found
// another leader).
func (t *Term) End(cause error) { t.lease.expire(cause) }

// Resign ends the term and, if the lease still holds, deletes the leader
// key and revokes the lease so that another member takes over at once
// instead of after the TTL.
func (t *Term) Resign(ctx context.Context) {
	if t.Valid() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = t.election.Resign(ctx)
	}
	t.End(errors.New("resigned"))
	<-t.done
	t.release()
}

// Campaign blocks until this member leads or ctx ends. Each attempt
// grants a new lease whose clock the term keeps (see lease), campaigns
// with concurrency.Election under a context that ends with the lease (a
// campaign outliving its session would otherwise win with a deleted key:
// etcd issue 10082), and checks after winning that its key still exists
// with its creation revision and is the first of the election.
func (e *Elector) Campaign(ctx context.Context) (*Term, error) {
	sent := time.Now()
	grant, err := e.client.Grant(ctx, int64((e.ttl+time.Second-1)/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	l := newLease(ctx, grant.ID, time.Duration(grant.TTL)*time.Second, e.margin, sent)
	t := &Term{lease: l, done: make(chan struct{}), release: func() {
		// The session's own Close would revoke under the lease's context,
		// which has ended by now.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = e.client.Revoke(ctx, grant.ID)
	}}
	go func() {
		defer close(t.done)
		l.run(e.client)
	}()
	fail := func(err error) (*Term, error) {
		l.expire(err)
		<-t.done
		t.release()
		return nil, err
	}
	t.session, err = concurrency.NewSession(e.client, concurrency.WithLease(grant.ID), concurrency.WithContext(l.ctx))
	if err != nil {
		return fail(fmt.Errorf("session: %w", err))
	}
	t.election = concurrency.NewElection(t.session, e.prefix)
	if err := t.election.Campaign(l.ctx, e.url); err != nil {
		if cause := context.Cause(l.ctx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		return fail(fmt.Errorf("campaign: %w", err))
	}
	key, rev := t.election.Key(), t.election.Rev()
	resp, err := e.client.Txn(l.ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpGet(e.prefix+"/", clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		return fail(fmt.Errorf("check campaign: %w", err))
	}
	if !resp.Succeeded || len(resp.Responses) == 0 || len(resp.Responses[0].GetResponseRange().Kvs) == 0 ||
		string(resp.Responses[0].GetResponseRange().Kvs[0].Key) != key {
		return fail(errStaleCampaign)
	}
	if !t.Valid() {
		return fail(ErrLeaseExpired)
	}
	t.Fence = store.Fence{Key: key, Revision: rev}
	e.setLeader(e.url)
	return t, nil
}

func (e *Elector) setLeader(url string) {
	if old := e.Leader(); old != url {
		e.leader.Store(&url)
		e.log.Info("leader observed", "leader", url, "previous", old)
	}
}

// Observe keeps Leader up to date until ctx ends: the leader is the
// election key with the lowest creation revision, read and then watched.
func (e *Elector) Observe(ctx context.Context) {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		resp, err := e.client.Get(ctx, e.prefix+"/", clientv3.WithFirstCreate()...)
		if err != nil {
			retry.Wait(ctx)
			continue
		}
		retry.Reset()
		leader := ""
		if len(resp.Kvs) > 0 {
			leader = string(resp.Kvs[0].Value)
		}
		e.setLeader(leader)
		// Any change under the prefix may change the first key. The
		// periodic re-read covers a watch that silently stalls.
		watchCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		watch := e.client.Watch(clientv3.WithRequireLeader(watchCtx), e.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-watch:
		case <-watchCtx.Done():
		}
		cancel()
	}
}
