package coordinator

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/ids"
)

// pipeBody is a request body as HTTP/2 hands it to a handler: each Read
// returns at most what has arrived (here, one chunk at a time), and
// counts the reads.
type pipeBody struct {
	chunks [][]byte
	reads  int
}

func (b *pipeBody) Read(p []byte) (int, error) {
	b.reads++
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.chunks[0])
	if b.chunks[0] = b.chunks[0][n:]; len(b.chunks[0]) == 0 {
		b.chunks = b.chunks[1:]
	}
	return n, nil
}

func (b *pipeBody) Close() error { return nil }

// enveloped frames msg as Connect does on a stream: a flags byte, the
// size, the message.
func enveloped(t *testing.T, msg proto.Message) []byte {
	t.Helper()
	data, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 5, 5+len(data))
	binary.BigEndian.PutUint32(out[1:], uint32(len(data)))
	return append(out, data...)
}

// readEnvelope reads one message as Connect's envelope reader does: the
// 5-byte prefix, then the size it gives.
func readEnvelope(r io.Reader) ([]byte, error) {
	var prefix [5]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, err
	}
	var data bytes.Buffer
	_, err := io.CopyN(&data, r, int64(binary.BigEndian.Uint32(prefix[1:])))
	return append(prefix[:], data.Bytes()...), err
}

// A heartbeat stream's body takes a beat, prefix and message, in one read
// of the request body (each read is a message to the connection's serve
// loop), and a beat larger than the buffer still arrives whole.
func TestHeartbeatStreamBodyReadsABeatAtOnce(t *testing.T) {
	t.Parallel()
	beat := &slacklinev1.HeartbeatStreamRequest{AgentId: ids.New(), SessionId: ids.New(), NoAnswer: true}
	small := enveloped(t, beat)
	if len(small) > beatReadBuffer {
		t.Fatalf("a beat without a profile is %d bytes with its prefix, more than beatReadBuffer (%d)", len(small), beatReadBuffer)
	}
	withProfile := proto.CloneOf(beat)
	withProfile.Profile = &slacklinev1.ProfileReport{Profile: string(bytes.Repeat([]byte("p"), 300))}
	large := enveloped(t, withProfile)

	for _, tc := range []struct {
		name      string
		beats     [][]byte
		wantReads int // reads of the request body for the beats
	}{
		{"one beat", [][]byte{small}, 1},
		{"two beats apart", [][]byte{small, small}, 2},
		{"two beats in one chunk", [][]byte{append(append([]byte{}, small...), small...)}, 2},
		{"a beat with a profile", [][]byte{large}, 2},
		{"small, large, small", [][]byte{small, large, small}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want [][]byte
			pipe := &pipeBody{}
			for _, c := range tc.beats {
				pipe.chunks = append(pipe.chunks, append([]byte{}, c...))
				for rest := c; len(rest) > 0; {
					n := 5 + int(binary.BigEndian.Uint32(rest[1:5]))
					want, rest = append(want, rest[:n]), rest[n:]
				}
			}
			body := newClosableBody(pipe)
			for i, w := range want {
				got, err := readEnvelope(body)
				if err != nil {
					t.Fatalf("beat %d: %v", i, err)
				}
				if !bytes.Equal(got, w) {
					t.Fatalf("beat %d: read %x, want %x", i, got, w)
				}
			}
			if pipe.reads != tc.wantReads {
				t.Errorf("%d reads of the request body, want %d", pipe.reads, tc.wantReads)
			}
			if _, err := readEnvelope(body); err != io.EOF {
				t.Errorf("after the beats: %v, want io.EOF", err)
			}
		})
	}
}
