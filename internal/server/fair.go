package server

import (
	"context"
	"sync"

	"connectrpc.com/connect"
)

// CallLimiter is a Connect interceptor that bounds the unary calls each
// caller has in progress: a caller's further calls wait their turn in its
// own line, so one framework flooding Accept or Reconcile, or one agent
// flooding status updates, competes with every other caller with at most
// Limit calls at a time. Streams (Subscribe, the agents' command streams)
// are not counted. Memory is per caller with a call in progress or
// waiting; an idle caller costs nothing.
type CallLimiter struct {
	// Limit is the number of calls one caller may have in progress.
	Limit int
	// Key names the caller of a call: its principal when calls are
	// authenticated, else its connection (the default, Peer.Addr).
	Key func(ctx context.Context, peer connect.Peer) string
	// OnWait, when set, is called each time a call has to wait.
	OnWait func(key string)

	mu      sync.Mutex
	callers map[string]*caller
}

type caller struct {
	slots chan struct{}
	users int // calls in progress or waiting
}

// WrapUnary bounds the caller's unary calls in progress to Limit; a call
// waits for a slot until its context ends (its error is the context's,
// as a Connect error).
func (l *CallLimiter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if l == nil || l.Limit <= 0 || req.Spec().IsClient {
			return next(ctx, req)
		}
		key := req.Peer().Addr
		if l.Key != nil {
			key = l.Key(ctx, req.Peer())
		}
		c := l.join(key)
		defer l.leave(key, c)
		select {
		case c.slots <- struct{}{}:
		default:
			if l.OnWait != nil {
				l.OnWait(key)
			}
			select {
			case c.slots <- struct{}{}:
			case <-ctx.Done():
				return nil, connect.NewError(connect.CodeOf(ctx.Err()), ctx.Err())
			}
		}
		defer func() { <-c.slots }()
		return next(ctx, req)
	}
}

// WrapStreamingClient passes client streams through.
func (l *CallLimiter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler passes streams through: they are long-lived and
// bounded elsewhere (HTTP/2 MaxConcurrentStreams, the services' own
// limits).
func (l *CallLimiter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (l *CallLimiter) join(key string) *caller {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.callers == nil {
		l.callers = map[string]*caller{}
	}
	c := l.callers[key]
	if c == nil {
		c = &caller{slots: make(chan struct{}, l.Limit)}
		l.callers[key] = c
	}
	c.users++
	return c
}

func (l *CallLimiter) leave(key string, c *caller) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.users--; c.users == 0 {
		delete(l.callers, key)
	}
}
