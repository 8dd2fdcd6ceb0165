// Package netpipe gives tests in-memory connections that report a loopback
// TCP connection's addresses.
package netpipe

import (
	"net"
	"sync/atomic"
)

// ServerAddr is the address the server's end of a Pipe reports.
var ServerAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5050}

// lastPort numbers the client ends of pipes.
var lastPort atomic.Uint32

// Pipe returns the two ends of a net.Pipe whose addresses are a loopback
// connection's: the server's end is ServerAddr, the client's a port of
// its own, as on TCP, so that a server which tells callers apart by their
// address (a per-connection call limit) sees one caller per connection,
// not every connection as "pipe".
func Pipe() (server, client net.Conn) {
	s, c := net.Pipe()
	clientAddr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10000 + int(lastPort.Add(1)%50000)}
	return addrConn{Conn: s, local: ServerAddr, remote: clientAddr}, addrConn{Conn: c, local: clientAddr, remote: ServerAddr}
}

// addrConn is a net.Conn with the addresses it reports.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }
