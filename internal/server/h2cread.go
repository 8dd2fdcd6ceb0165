package server

import (
	"bufio"
	"bytes"
	"net"
)

// h2cReadBuffer is the read buffer of a cleartext HTTP/2 connection
// (h2cReadConn): a frame of a few hundred bytes or less (a heartbeat, a
// WINDOW_UPDATE, a PING) fits, header and payload, in one read.
const h2cReadBuffer = 512

// h2cPreface is how a cleartext HTTP/2 connection with prior knowledge
// begins (RFC 9113, section 3.4); no HTTP/1.1 request does.
var h2cPreface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// h2cReadListener returns connections that buffer their reads once they
// turn out to carry cleartext HTTP/2 (h2cReadConn).
type h2cReadListener struct{ net.Listener }

func (l h2cReadListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &h2cReadConn{Conn: c}, nil
}

// h2cReadConn reads a cleartext HTTP/2 connection through a small buffer.
// HTTP/2's frame reader reads the raw connection unbuffered, a 9-byte
// header then the payload: two read system calls per frame, where TLS
// (whose records are read whole into its own buffer) takes one. Which
// protocol a connection carries shows in its first bytes: the buffer is
// made only for one that began with the HTTP/2 preface, so an HTTP/1.1
// connection (net/http reads it through a buffer of its own; an idle
// streaming one waits in a 1-byte read) costs nothing more. Reads as
// large as the buffer bypass it. A connection is read by one goroutine at
// a time.
type h2cReadConn struct {
	net.Conn
	seen []byte        // the first bytes read, up to len(h2cPreface), until the protocol is known
	h2c  int8          // 1: HTTP/2 (buffered from now on), -1: not, 0: not known yet
	r    *bufio.Reader // reads Conn once h2c is 1
}

func (c *h2cReadConn) Read(p []byte) (int, error) {
	if c.r != nil {
		return c.r.Read(p)
	}
	if c.h2c == 1 && len(p) < h2cReadBuffer {
		c.r = bufio.NewReaderSize(c.Conn, h2cReadBuffer)
		return c.r.Read(p)
	}
	n, err := c.Conn.Read(p)
	if c.h2c == 0 && n > 0 {
		c.seen = append(c.seen, p[:min(n, len(h2cPreface)-len(c.seen))]...)
		switch {
		case !bytes.HasPrefix(h2cPreface, c.seen):
			c.h2c, c.seen = -1, nil
		case len(c.seen) == len(h2cPreface):
			c.h2c, c.seen = 1, nil
		}
	}
	return n, err
}
