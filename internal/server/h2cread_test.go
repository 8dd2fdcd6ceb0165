package server

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// chunkConn is a connection whose reads return at most one arrived chunk
// each (as a socket returns what has arrived), counting the reads.
type chunkConn struct {
	net.Conn
	chunks [][]byte
	reads  int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	c.reads++
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// frame is an HTTP/2 frame of payload bytes as the wire carries it: a
// 9-byte header, then the payload.
func frame(payload int) []byte {
	f := make([]byte, 9+payload)
	f[0], f[1], f[2] = byte(payload>>16), byte(payload>>8), byte(payload)
	for i := range payload {
		f[9+i] = byte(i)
	}
	return f
}

// readFrames reads as HTTP/2's frame reader does: each frame's header,
// then its payload, each with io.ReadFull.
func readFrames(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	var out []byte
	for range n {
		var h [9]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			t.Fatal(err)
		}
		payload := make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))
		if _, err := io.ReadFull(r, payload); err != nil {
			t.Fatal(err)
		}
		out = append(append(out, h[:]...), payload...)
	}
	return out
}

// A cleartext HTTP/2 connection reads a small frame, header and payload,
// in one read of the connection once its preface showed it is HTTP/2; a
// large frame still arrives whole; an HTTP/1.1 connection is read as it
// is asked, with no buffer.
func TestH2CReadConnReadsAFrameAtOnce(t *testing.T) {
	t.Parallel()
	beat, large := frame(85), frame(2000)
	for _, tc := range []struct {
		name      string
		chunks    [][]byte
		frames    int
		wantReads int // reads of the connection after the preface
		buffered  bool
	}{
		{"h2c, one small frame", [][]byte{beat}, 1, 1, true},
		{"h2c, two small frames apart", [][]byte{beat, beat}, 2, 2, true},
		{"h2c, two small frames together", [][]byte{append(append([]byte{}, beat...), beat...)}, 2, 1, true},
		{"h2c, a large frame", [][]byte{large}, 1, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			preface := append([]byte{}, h2cPreface...)
			conn := &chunkConn{chunks: append([][]byte{preface[:14], preface[14:]}, tc.chunks...)}
			c := &h2cReadConn{Conn: conn}
			// net/http reads the preface in two parts.
			for _, n := range []int{14, len(h2cPreface) - 14} {
				if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
					t.Fatal(err)
				}
			}
			if c.h2c != 1 {
				t.Fatalf("after the preface h2c = %d, want 1", c.h2c)
			}
			conn.reads = 0
			got := readFrames(t, c, tc.frames)
			if want := bytes.Join(tc.chunks, nil); !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes that differ from the %d sent", len(got), len(want))
			}
			if conn.reads != tc.wantReads {
				t.Errorf("%d reads of the connection, want %d", conn.reads, tc.wantReads)
			}
		})
	}
	t.Run("HTTP/1.1", func(t *testing.T) {
		req := []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
		conn := &chunkConn{chunks: [][]byte{req}}
		c := &h2cReadConn{Conn: conn}
		got := make([]byte, 0, len(req))
		for len(got) < len(req) {
			var b [1]byte // the 1-byte reads of an idle connection's background read
			n, err := c.Read(b[:])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b[:n]...)
		}
		if !bytes.Equal(got, req) || c.h2c != -1 || c.r != nil {
			t.Errorf("read %q, h2c %d, buffered %v; want the request, -1, false", got, c.h2c, c.r != nil)
		}
		if conn.reads != len(req) {
			t.Errorf("%d reads of the connection, want %d (one per read asked)", conn.reads, len(req))
		}
	})
}
