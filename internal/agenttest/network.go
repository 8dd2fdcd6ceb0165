package agenttest

import (
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/slackline/slackline/internal/netpipe"
)

// Network is an in-memory network for tests: connections are net.Pipe
// pairs, so in a testing/synctest bubble a goroutine blocked on one is
// durably blocked and synctest.Wait returns, and outside one they cost no
// system calls. It has one address, which
// refuses connections while no server serves it (Serve); a test can also
// refuse new connections (SetDown) and cut the open ones (Cut), as a
// coordinator that crashed would.
type Network struct {
	accept chan net.Conn

	mu   sync.Mutex
	down bool
	open map[net.Conn]struct{} // both ends of every open connection
}

// NewNetwork returns a Network with nothing serving it.
func NewNetwork() *Network {
	return &Network{accept: make(chan net.Conn), open: map[net.Conn]struct{}{}, down: true}
}

// errRefused is what a dial gets while the network is down.
var errRefused = &net.OpError{Op: "dial", Net: "pipe", Err: syscall.ECONNREFUSED}

// DialContext connects to the network's listener; it fails at once while
// the network is down and blocks until a listener accepts otherwise.
func (n *Network) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	n.mu.Lock()
	down := n.down
	n.mu.Unlock()
	if down {
		return nil, errRefused
	}
	server, client := netpipe.Pipe()
	select {
	case n.accept <- server:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n.mu.Lock()
	n.open[server], n.open[client] = struct{}{}, struct{}{}
	n.mu.Unlock()
	return client, nil
}

// SetDown makes dials fail with "connection refused" (down) or succeed
// again. Open connections are not affected: see Cut.
func (n *Network) SetDown(down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = down
}

// Cut closes every open connection.
func (n *Network) Cut() {
	n.mu.Lock()
	conns := n.open
	n.open = map[net.Conn]struct{}{}
	n.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Listen returns a listener of the network. Several may exist over time
// (a restarted server); closing one does not close the network.
func (n *Network) Listen() net.Listener {
	return &listener{n: n, done: make(chan struct{})}
}

// Client returns an HTTP client that speaks cleartext HTTP/2 over the
// network, for any URL. Close its idle connections when done.
func (n *Network) Client() *http.Client {
	t := &http.Transport{DialContext: n.DialContext, Protocols: new(http.Protocols)}
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}

type listener struct {
	n    *Network
	done chan struct{}
	once sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.n.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *listener) Addr() net.Addr { return netpipe.ServerAddr }

// Serve serves handler on a new listener of n with HTTP/1.1 and cleartext
// HTTP/2 until the returned stop is called; stop closes the server and its
// connections, and the network refuses connections again.
func (n *Network) Serve(handler http.Handler) (stop func()) {
	n.SetDown(false)
	srv := &http.Server{Handler: handler, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(n.Listen()) // returns when stop closes the server
	}()
	return func() {
		n.SetDown(true)
		srv.Close()
		<-done
	}
}
