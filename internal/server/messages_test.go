package server

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// readsTransport reads a request's body as HTTP/2's transport does, into
// a large buffer, and records what each read returned (each would be a
// DATA frame).
type readsTransport struct{ reads [][]byte }

func (t *readsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	buf := make([]byte, 16<<10)
	for {
		n, err := req.Body.Read(buf)
		if n > 0 {
			t.reads = append(t.reads, append([]byte{}, buf[:n]...))
		}
		if err != nil {
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
		}
	}
}

// envelope frames a message as Connect and gRPC do.
func envelope(msg string) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// A streamed message that Connect's client writes as its prefix and then
// itself reaches the transport in one read (one DATA frame), not two;
// messages of every size arrive whole and in order; unary bodies and
// other content types are read as they are written.
func TestWholeMessagesSendsAMessageInOneRead(t *testing.T) {
	t.Parallel()
	large := strings.Repeat("x", 40<<10) // larger than the transport's buffer
	for _, tc := range []struct {
		name        string
		contentType string
		messages    []string
		wantReads   []int // sizes of the transport's reads
	}{
		{"connect stream", "application/connect+proto", []string{"beat-1", "beat-2"}, []int{11, 11}},
		{"empty message", "application/connect+proto", []string{"", "x"}, []int{5, 6}},
		{"grpc stream", "application/grpc", []string{"hello"}, []int{10}},
		{"a message larger than a read", "application/connect+proto", []string{large, "y"}, []int{16 << 10, 16 << 10, 40<<10 + 5 - 32<<10, 6}},
		{"unary (not enveloped)", "application/proto", []string{"abc"}, []int{5, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				// As Connect's envelope.WriteTo: the prefix, then the message.
				for _, m := range tc.messages {
					e := envelope(m)
					if _, err := pw.Write(e[:5]); err != nil {
						return
					}
					if len(m) > 0 {
						if _, err := pw.Write(e[5:]); err != nil {
							return
						}
					}
				}
				pw.Close()
			}()
			rt := &readsTransport{}
			req, err := http.NewRequest(http.MethodPost, "http://coordinator/slackline.v1.AgentService/HeartbeatStream", pr)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tc.contentType)
			resp, err := WholeMessages(rt).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			var sizes []int
			for _, r := range rt.reads {
				sizes = append(sizes, len(r))
			}
			if !slices.Equal(sizes, tc.wantReads) {
				t.Errorf("reads of %v bytes, want %v", sizes, tc.wantReads)
			}
			var want []byte
			for _, m := range tc.messages {
				want = append(want, envelope(m)...)
			}
			if got := bytes.Join(rt.reads, nil); !bytes.Equal(got, want) {
				t.Errorf("the transport read %d bytes that differ from the %d written", len(got), len(want))
			}
			if req.Body != io.Reader(pr) {
				t.Error("the caller's request was changed")
			}
		})
	}
}
