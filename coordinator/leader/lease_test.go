package leader

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// scriptedKeepAlive answers keepalives from a script: each answer after
// its delay, with a TTL or an error; past the script it fails.
type scriptedKeepAlive struct {
	answers []keepAliveAnswer
	sent    []time.Time
}

type keepAliveAnswer struct {
	delay time.Duration
	ttl   int64
	err   error
}

func (s *scriptedKeepAlive) KeepAliveOnce(ctx context.Context, _ clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	s.sent = append(s.sent, time.Now())
	if len(s.sent) > len(s.answers) {
		return nil, errors.New("etcd unreachable")
	}
	a := s.answers[len(s.sent)-1]
	select {
	case <-time.After(a.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.err != nil {
		return nil, a.err
	}
	return &clientv3.LeaseKeepAliveResponse{TTL: a.ttl}, nil
}

// TestLeaseDeadline drives the lease clock with fake time: the local
// deadline counts from when a keepalive was sent, never from its answer;
// it ends the lease's context at once; a late answer does not revive it;
// etcd saying the lease is gone ends it at once.
func TestLeaseDeadline(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	tests := []struct {
		name    string
		answers []keepAliveAnswer
		margin  time.Duration
		// endsAfter is when the lease must end, from its grant.
		endsAfter time.Duration
	}{
		{
			name:      "no keepalive answered: granted TTL",
			endsAfter: ttl,
		},
		{
			name:      "margin shortens the deadline",
			margin:    500 * time.Millisecond,
			endsAfter: ttl - 500*time.Millisecond,
		},
		{
			// Sent at 1 s, answered at 1.9 s: the deadline is 1 s + 3 s,
			// not 1.9 s + 3 s.
			name:      "slow answer counts from its request",
			answers:   []keepAliveAnswer{{delay: 900 * time.Millisecond, ttl: 3}},
			endsAfter: time.Second + ttl,
		},
		{
			// Sent at 1 s (answered at once: deadline 4 s) and 2 s; the
			// second answer would come at 4.1 s, after the deadline, and
			// must not extend the lease.
			name:      "late answer after the deadline",
			answers:   []keepAliveAnswer{{delay: 0, ttl: 3}, {delay: 2100 * time.Millisecond, ttl: 3}},
			endsAfter: time.Second + ttl,
		},
		{
			name:      "lease not found ends it at once",
			answers:   []keepAliveAnswer{{ttl: 3}, {err: rpctypes.ErrLeaseNotFound}},
			endsAfter: 2 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				granted := time.Now()
				ka := &scriptedKeepAlive{answers: tt.answers}
				l := newLease(context.Background(), 1, ttl, tt.margin, granted)
				go l.run(ka)
				<-l.ctx.Done()
				if got := time.Since(granted); got != tt.endsAfter {
					t.Errorf("lease ended after %v, want %v (keepalives sent at %v)", got, tt.endsAfter, offsets(granted, ka.sent))
				}
				if !errors.Is(context.Cause(l.ctx), ErrLeaseExpired) {
					t.Errorf("cause = %v, want ErrLeaseExpired", context.Cause(l.ctx))
				}
				if l.valid(time.Now()) {
					t.Error("valid after the lease ended")
				}
				l.renewed(time.Now(), ttl, time.Now())
				if l.valid(time.Now()) {
					t.Error("a renewal revived an ended lease")
				}
			})
		})
	}
}

// TestLeaseValidWithoutWatcher checks that valid alone, without the
// goroutine that ends the context, refuses at the deadline: a process
// that was stopped and resumes must not act before its timers run.
func TestLeaseValidWithoutWatcher(t *testing.T) {
	t.Parallel()
	granted := time.Now()
	l := newLease(context.Background(), 1, 2*time.Second, 0, granted)
	if !l.valid(granted.Add(1999 * time.Millisecond)) {
		t.Fatal("not valid before the deadline")
	}
	if l.valid(granted.Add(2 * time.Second)) {
		t.Fatal("valid at the deadline")
	}
	if l.ctx.Err() == nil {
		t.Fatal("context not ended by a failed validity check")
	}
}

func offsets(from time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(from)
	}
	return out
}
