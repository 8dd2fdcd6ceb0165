package server

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AnonymousLimits bound what peers that have not authenticated hold on a
// server that authenticates its requests (the handler calls
// MarkAuthenticated for a request with credentials): anyone on the
// network can open connections and call the open procedures (health
// Check), so none of that may grow without bound or outlive its use. A
// connection is anonymous until one of its requests authenticates; from
// then on it is a principal's and these limits no longer apply to it.
// Zero fields take the defaults in their comments; a negative field
// disables its limit.
type AnonymousLimits struct {
	// MaxConnsPerPeer bounds the anonymous connections of one remote IP
	// address, or IPv6 /64 (default 64): one more closes the peer's oldest
	// anonymous connection (limit "anonymous_conns_per_peer"). The oldest
	// goes, not the newest, so that a flood cannot keep a new client out:
	// one that authenticates with its first request is no longer counted.
	MaxConnsPerPeer int
	// MaxConns bounds the anonymous connections of all peers together
	// (default: a quarter of the process's open-file limit, at most 4096),
	// so that a flood from many addresses leaves file descriptors for
	// principals: one more closes the oldest anonymous connection (limit
	// "anonymous_conns").
	MaxConns int
	// MaxStreamsPerConn bounds the anonymous requests (streams) in
	// progress on one anonymous connection (default 16): one more is
	// refused with ErrAnonymousLimit (limit "anonymous_streams_per_conn").
	MaxStreamsPerConn int
	// MaxStreamLifetime ends an anonymous request (its context) that has
	// lasted this long (default 1 minute; limit
	// "anonymous_stream_lifetime").
	MaxStreamLifetime time.Duration
}

// Default anonymous limits (see AnonymousLimits).
const (
	DefaultAnonymousConnsPerPeer   = 64
	DefaultMaxAnonymousConns       = 4096
	DefaultAnonymousStreamsPerConn = 16
	DefaultAnonymousStreamLifetime = time.Minute
)

// ErrAnonymousLimit is AdmitAnonymous' error when an anonymous
// connection has as many anonymous requests in progress as it may.
var ErrAnonymousLimit = errors.New("too many requests in progress without credentials on this connection: present credentials, or wait for one to end")

func (l AnonymousLimits) withDefaults() AnonymousLimits {
	if l.MaxConnsPerPeer == 0 {
		l.MaxConnsPerPeer = DefaultAnonymousConnsPerPeer
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxAnonymousConns
		var nofile syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil && nofile.Cur/4 < uint64(l.MaxConns) {
			l.MaxConns = max(int(nofile.Cur/4), 1)
		}
	}
	if l.MaxStreamsPerConn == 0 {
		l.MaxStreamsPerConn = DefaultAnonymousStreamsPerConn
	}
	if l.MaxStreamLifetime == 0 {
		l.MaxStreamLifetime = DefaultAnonymousStreamLifetime
	}
	return l
}

// LimitHits counts the limits a server enforces itself (the anonymous
// limits) in slackline_server_limit_hits_total{limit} and logs each limit
// the first time it is hit. A nil *LimitHits counts nothing.
type LimitHits struct {
	log    *slog.Logger
	hits   *prometheus.CounterVec
	logged sync.Map // limit -> struct{}
}

// NewLimitHits registers the counter in reg.
func NewLimitHits(reg prometheus.Registerer, log *slog.Logger) *LimitHits {
	h := &LimitHits{log: log, hits: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slackline_server_limit_hits_total",
		Help: "Times a limit on peers without credentials (server.AnonymousLimits) was reached: a connection closed, a request refused or ended.",
	}, []string{"limit"})}
	reg.MustRegister(h.hits)
	return h
}

// Hit counts a limit reached and logs the first time it is.
func (h *LimitHits) Hit(limit, msg string, attrs ...any) {
	if h == nil {
		return
	}
	h.hits.WithLabelValues(limit).Inc()
	if _, seen := h.logged.LoadOrStore(limit, struct{}{}); !seen && h.log != nil {
		h.log.Warn(msg+" (logged once; slackline_server_limit_hits_total counts every time)", append([]any{"limit", limit}, attrs...)...)
	}
}

// anonymousGuard holds the anonymous connections, oldest first, in all
// and by peer. Serve makes one per server.
type anonymousGuard struct {
	limits AnonymousLimits
	hits   *LimitHits

	mu     sync.Mutex
	oldest list.List             // of *guardedConn, all anonymous connections
	byPeer map[string]*list.List // of *guardedConn, by peerKey
}

// guardedConn is an accepted connection: anonymous until MarkAuthenticated.
type guardedConn struct {
	net.Conn
	guard         *anonymousGuard
	peer          string
	authenticated atomic.Bool
	released      atomic.Bool // no longer counted as anonymous
	streams       atomic.Int32

	inAll, inPeer *list.Element // guarded by guard.mu while not released
}

// peerKey is what MaxConnsPerPeer counts by: the IPv4 address, or the
// IPv6 /64 (one host's usual allocation, so that its addresses are one
// peer).
func peerKey(addr net.Addr) string {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// admit counts c, a new connection, as anonymous. When that is one too
// many for its peer or for the server, the oldest anonymous connection
// of the peer (or of all) is closed and the limit counted.
func (g *anonymousGuard) admit(c *guardedConn) {
	var victim *guardedConn
	g.mu.Lock()
	peerConns := g.byPeer[c.peer]
	switch {
	case g.limits.MaxConnsPerPeer >= 0 && peerConns != nil && peerConns.Len() >= g.limits.MaxConnsPerPeer && peerConns.Len() > 0:
		victim = peerConns.Front().Value.(*guardedConn)
		g.hits.Hit("anonymous_conns_per_peer", "oldest connection closed: its address holds as many connections without credentials as it may", "peer", c.peer)
	case g.limits.MaxConns >= 0 && g.oldest.Len() >= g.limits.MaxConns && g.oldest.Len() > 0:
		victim = g.oldest.Front().Value.(*guardedConn)
		g.hits.Hit("anonymous_conns", "oldest connection closed: the server holds as many connections without credentials as it may", "peer", c.peer)
	}
	if victim != nil && victim.released.CompareAndSwap(false, true) {
		g.removeLocked(victim)
	} else {
		victim = nil
	}
	if peerConns == nil {
		peerConns = list.New()
		g.byPeer[c.peer] = peerConns
	}
	c.inAll, c.inPeer = g.oldest.PushBack(c), peerConns.PushBack(c)
	g.mu.Unlock()
	if victim != nil {
		victim.Conn.Close()
	}
}

// removeLocked stops counting c. Caller holds g.mu and released c.
func (g *anonymousGuard) removeLocked(c *guardedConn) {
	g.oldest.Remove(c.inAll)
	if peerConns := g.byPeer[c.peer]; peerConns != nil {
		peerConns.Remove(c.inPeer)
		if peerConns.Len() == 0 {
			delete(g.byPeer, c.peer)
		}
	}
}

// release stops counting c as anonymous (authenticated or closed), once.
func (g *anonymousGuard) release(c *guardedConn) {
	if !c.released.CompareAndSwap(false, true) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removeLocked(c)
}

func (c *guardedConn) Close() error {
	c.guard.release(c)
	return c.Conn.Close()
}

// guardedListener counts the connections it accepts as anonymous, closing
// the oldest anonymous ones beyond the limits.
type guardedListener struct {
	net.Listener
	guard *anonymousGuard
}

func (l guardedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &guardedConn{Conn: conn, guard: l.guard, peer: peerKey(conn.RemoteAddr())}
	l.guard.admit(c)
	return c, nil
}

type connKey struct{}

// connContext puts a connection's guardedConn in its context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if gc, ok := c.(*guardedConn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// MarkAuthenticated records that a request in ctx authenticated: its
// connection is a principal's from now on and the anonymous limits no
// longer apply to it. It does nothing outside a server with
// AnonymousLimits.
func MarkAuthenticated(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(*guardedConn); ok && c.authenticated.CompareAndSwap(false, true) {
		c.guard.release(c)
	}
}

// AdmitAnonymous admits a request that is served without credentials (an
// open procedure): on an anonymous connection it counts against
// AnonymousLimits.MaxStreamsPerConn (ErrAnonymousLimit beyond) and ends
// after MaxStreamLifetime. The handler serves with the returned context
// and calls done when the request ends. On a connection that
// authenticated, or outside a server with AnonymousLimits, it changes
// nothing.
func AdmitAnonymous(ctx context.Context) (_ context.Context, done func(), err error) {
	c, ok := ctx.Value(connKey{}).(*guardedConn)
	if !ok || c.authenticated.Load() {
		return ctx, func() {}, nil
	}
	limits := c.guard.limits
	if n := c.streams.Add(1); limits.MaxStreamsPerConn >= 0 && int(n) > limits.MaxStreamsPerConn {
		c.streams.Add(-1)
		c.guard.hits.Hit("anonymous_streams_per_conn", "request refused: its connection has as many requests without credentials in progress as it may", "peer", c.peer)
		return ctx, nil, fmt.Errorf("%w (%d)", ErrAnonymousLimit, limits.MaxStreamsPerConn)
	}
	cancel := context.CancelFunc(func() {})
	if limits.MaxStreamLifetime >= 0 {
		ctx, cancel = context.WithTimeout(ctx, limits.MaxStreamLifetime)
	}
	return ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			c.guard.hits.Hit("anonymous_stream_lifetime", "request ended: it lasted as long as a request without credentials may", "peer", c.peer)
		}
		cancel()
		c.streams.Add(-1)
	}, nil
}
