package leader

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLeaseExpired is the cause of a term's end when its lease's local
// deadline passed (no keepalive answered in time, or etcd said the lease
// is gone).
var ErrLeaseExpired = errors.New("leader lease expired")

// keepAliver is the part of etcd's lease API the lease clock uses.
type keepAliver interface {
	KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
}

// lease is an etcd lease as its holder's clock sees it. The local deadline
// is sent + TTL - margin, where sent is the time a keepalive request that
// etcd answered was sent: etcd renewed the lease after receiving it, so
// the lease outlives the local deadline even if the answer took long to
// come back (measuring from the answer would not: etcd issue 10082 and
// tikv/pd's leader lease). Once the local deadline passes the lease is
// expired for good, even if a late answer arrives: a term never resumes.
type lease struct {
	id     clientv3.LeaseID
	ttl    time.Duration
	margin time.Duration
	// ctx ends (cause ErrLeaseExpired) when the local deadline passes.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time
	expired  bool
}

// newLease returns the clock of a lease granted with ttl by a request sent
// at sent; ctx bounds it.
func newLease(ctx context.Context, id clientv3.LeaseID, ttl, margin time.Duration, sent time.Time) *lease {
	l := &lease{id: id, ttl: ttl, margin: margin, deadline: sent.Add(ttl - margin)}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	return l
}

// valid reports whether the lease is certainly still held at now. It is
// cheap (one uncontended mutex) and called before every byte a leader
// sends.
func (l *lease) valid(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.expired && !now.Before(l.deadline) {
		l.expireLocked(ErrLeaseExpired)
	}
	return !l.expired
}

// renewed records a keepalive sent at sent that etcd answered with ttl.
// It has no effect once the lease expired locally.
func (l *lease) renewed(sent time.Time, ttl time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expired || !now.Before(l.deadline) {
		l.expireLocked(ErrLeaseExpired)
		return
	}
	if d := sent.Add(ttl - l.margin); d.After(l.deadline) {
		l.deadline = d
	}
}

// expire ends the lease now with cause.
func (l *lease) expire(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(cause)
}

func (l *lease) expireLocked(cause error) {
	if !l.expired {
		l.expired = true
		l.cancel(cause)
	}
}

// remaining is the time left before the local deadline.
func (l *lease) remaining(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expired {
		return 0
	}
	return l.deadline.Sub(now)
}

// run keeps the lease alive every TTL/3 (sooner after a failed attempt)
// and expires it when the local deadline passes, until ctx ends. It
// returns when the lease expired or its context ended.
func (l *lease) run(ka keepAliver) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.keepAlive(ka)
	}()
	l.watch()
	<-done
}

// watch expires the lease at its local deadline.
func (l *lease) watch() {
	timer := time.NewTimer(l.remaining(time.Now()))
	defer timer.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-timer.C:
			if !l.valid(time.Now()) {
				return
			}
			timer.Reset(l.remaining(time.Now()))
		}
	}
}

func (l *lease) keepAlive(ka keepAliver) {
	interval := max(l.ttl/3, 10*time.Millisecond)
	retry := max(l.ttl/20, 10*time.Millisecond)
	wait := interval
	for {
		timer := time.NewTimer(wait)
		select {
		case <-l.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		sent := time.Now()
		// Waiting past the local deadline is pointless: the lease is
		// lost for this holder by then.
		ctx, cancel := context.WithTimeout(l.ctx, l.remaining(sent))
		resp, err := ka.KeepAliveOnce(ctx, l.id)
		cancel()
		switch {
		case err == nil:
			l.renewed(sent, time.Duration(resp.TTL)*time.Second, time.Now())
			wait = interval
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.expire(ErrLeaseExpired)
			return
		default:
			wait = retry
		}
	}
}
