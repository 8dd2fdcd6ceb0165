package server

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"
)

// WholeMessages returns a RoundTripper that sends each message of a
// Connect or gRPC streaming request in one write of its request body,
// envelope and message together, instead of two. Connect's client writes
// a streamed message into the request body's pipe as its 5-byte envelope
// prefix, then the message; HTTP/2's transport sends and flushes what each
// read of the body returns as a DATA frame of its own, so every message
// went out as two frames, each of which costs the server a read, a
// handoff to the connection's loop and a wake-up of the handler (an agent
// heartbeat cost the coordinator twice what it needs to). The body it
// gives the transport reads the prefix, then, in the same read, the
// message that Connect writes right after it. Other requests (unary ones,
// whose bodies are not enveloped) pass untouched. rt nil is
// http.DefaultTransport.
func WholeMessages(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	if _, ok := rt.(wholeMessages); ok {
		return rt
	}
	return wholeMessages{rt}
}

// WholeMessagesClient returns a copy of c (nil: http.DefaultClient) whose
// transport is WholeMessages of c's.
func WholeMessagesClient(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	out := *c
	out.Transport = WholeMessages(c.Transport)
	return &out
}

type wholeMessages struct{ http.RoundTripper }

func (t wholeMessages) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody && enveloped(req.Header.Get("Content-Type")) {
		r := *req // a RoundTripper must not change the caller's request
		r.Body = &messageBody{ReadCloser: req.Body}
		req = &r
	}
	return t.RoundTripper.RoundTrip(req)
}

// enveloped reports whether a request body of this content type is a
// sequence of enveloped messages: Connect streaming, gRPC and gRPC-Web.
func enveloped(contentType string) bool {
	return strings.HasPrefix(contentType, "application/connect+") || strings.HasPrefix(contentType, "application/grpc")
}

// messageBody reads a body of enveloped messages (a flags byte, a 4-byte
// big-endian size, the message) so that a read at a message's start
// returns its prefix and as much of the message as one more read of the
// body gives. A read too short for a prefix makes it pass the rest of the
// body through as it comes.
type messageBody struct {
	io.ReadCloser
	left    int64 // bytes of the current message not read yet
	err     error // a read's error, returned once the bytes read with it are
	passing bool  // framing no longer followed: reads pass through
}

func (b *messageBody) Read(p []byte) (int, error) {
	switch {
	case b.err != nil:
		return 0, b.err
	case b.passing:
		return b.ReadCloser.Read(p)
	case b.left > 0:
		n, err := b.ReadCloser.Read(p[:min(int64(len(p)), b.left)])
		b.left -= int64(n)
		return n, err
	case len(p) < 5:
		b.passing = true
		return b.ReadCloser.Read(p)
	}
	n, err := io.ReadFull(b.ReadCloser, p[:5])
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			err = io.EOF // a truncated prefix goes on as it was sent
		}
		return n, err
	}
	b.left = int64(binary.BigEndian.Uint32(p[1:5]))
	if b.left == 0 {
		return n, nil
	}
	m, err := b.ReadCloser.Read(p[5:min(int64(len(p)), 5+b.left)])
	b.left -= int64(m)
	b.err = err
	return n + m, nil
}
