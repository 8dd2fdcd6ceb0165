// Package memconn makes in-memory connections for tests of servers that
// tell their callers apart by address: buffered pipes (grpc's bufconn)
// whose ends report a loopback connection's addresses.
package memconn

import (
	"context"
	"net"
	"sync/atomic"

	"google.golang.org/grpc/test/bufconn"
)

// ServerAddr is the address every pipe's server end reports.
var ServerAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5050}

// Buffer is what each direction of a pipe holds unread, as a loopback
// socket's buffers do: a writer goes on without waiting for its reader
// until that much is in flight. (net.Pipe, which this replaced in the
// tests, made every write wait for its read: a goroutine switch per
// HTTP/2 frame, most of the load tests' CPU.)
const Buffer = 64 << 10

// lastPort numbers the client ends of pipes.
var lastPort atomic.Uint32

// Pipe returns the two ends of a buffered in-memory connection (bufconn:
// read and write deadlines; Close ends the closing end's reads and writes
// and the peer's writes, the peer reading what was sent before, as on
// TCP) whose addresses are a loopback connection's: the server's end is
// ServerAddr, the client's a port of its own, as on TCP, so that a server
// which tells callers apart by their address (a per-connection call
// limit) sees one caller per connection, not every connection as
// "bufconn".
func Pipe(ctx context.Context) (server, client net.Conn, err error) {
	l := bufconn.Listen(Buffer)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		s, _ := l.Accept() // nil once l is closed
		accepted <- s
	}()
	c, err := l.DialContext(ctx)
	if err != nil {
		l.Close()
		<-accepted
		return nil, nil, err
	}
	s := <-accepted
	clientAddr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10000 + int(lastPort.Add(1)%50000)}
	return addrConn{Conn: s, local: ServerAddr, remote: clientAddr}, addrConn{Conn: c, local: clientAddr, remote: ServerAddr}, nil
}

// addrConn is a net.Conn with the addresses it reports.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }
