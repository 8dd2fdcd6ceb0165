package coordinator

import (
	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// heartbeatStreams prepares AgentService's HeartbeatStream requests for
// their handler: the server's read timeout, which bounds the time a client
// takes to send a request's body, would end a stream whose body is its
// heartbeats after it (30 s by default), losing a beat each time; so it is
// lifted for them (one message to the connection's loop per stream, not
// per beat), and the handler bounds the stream by its own idle timer. The
// request body's closer goes into the context (streamBodyCloser), so that
// the handler ends a stream blocked reading: when it is superseded or
// idle. Other requests pass untouched.
func heartbeatStreams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != slacklinev1connect.AgentServiceHeartbeatStreamProcedure {
			next.ServeHTTP(w, r)
			return
		}
		// HTTP/1.1 cannot carry the stream (Connect refuses it); the
		// deadline is lifted where the protocol supports it.
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		b := newClosableBody(r.Body)
		r.Body = b
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyCloserKey{}, b)))
	})
}

type bodyCloserKey struct{}

// closableBody is a request body that the handler may close with a cause.
//
// It reads through a small buffer (beatReadBuffer): Connect reads a
// message's 5-byte prefix, then its body, in two reads, and every read of
// an HTTP/2 request body is a message to the connection's serve loop,
// which the reader waits for (the flow-control accounting); one read that
// takes the whole beat, prefix and body, halves those messages. A read as
// large as the buffer bypasses it.
type closableBody struct {
	io.ReadCloser
	r     *bufio.Reader // reads ReadCloser; used by the handler's goroutine only
	mu    sync.Mutex
	cause error
}

// beatReadBuffer is the size of a heartbeat stream's read buffer: a beat
// without a profile report (about 85 bytes with its prefix) fits, so that
// it takes one read of the request body; a longer one takes more.
const beatReadBuffer = 128

func newClosableBody(body io.ReadCloser) *closableBody {
	return &closableBody{ReadCloser: body, r: bufio.NewReaderSize(body, beatReadBuffer)}
}

// Read reads the body through the buffer.
func (b *closableBody) Read(p []byte) (int, error) { return b.r.Read(p) }

// streamBody returns the body of ctx's request as heartbeatStreams
// prepared it (nil for a request it did not: ending it does nothing).
func streamBody(ctx context.Context) *closableBody {
	b, _ := ctx.Value(bodyCloserKey{}).(*closableBody)
	return b
}

// end records the first cause and closes the body, which unblocks a read.
func (b *closableBody) end(cause error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.cause == nil {
		b.cause = cause
	}
	b.mu.Unlock()
	_ = b.Close()
}

// endCause is the cause end recorded, nil while the body was not ended.
func (b *closableBody) endCause() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cause
}

// idleTimer calls its function once no beat came for the timeout in
// effect. A beat only records its time and the timeout (two atomic
// stores); the timer, when it fires, re-arms itself for what remains
// after the last beat. Resetting a timer on every beat instead costs an
// update of the runtime's timer heap per beat, a thousand a second at
// 10,000 agents.
type idleTimer struct {
	timer   *time.Timer
	last    atomic.Int64 // the last beat, in ns since start
	timeout atomic.Int64 // the silence allowed after it, in ns
	stopped atomic.Bool  // set by stop: the function neither re-arms nor expires
	start   time.Time
}

// newIdleTimer starts counting the silence at once, as if a beat came now.
func newIdleTimer(timeout time.Duration, expired func()) *idleTimer {
	t := &idleTimer{start: time.Now()}
	t.timeout.Store(int64(timeout))
	// Armed only once t.timer is set: the function reads it.
	t.timer = time.AfterFunc(math.MaxInt64, func() {
		if t.stopped.Load() {
			return
		}
		silent := time.Since(t.start) - time.Duration(t.last.Load())
		if left := time.Duration(t.timeout.Load()) - silent; left > 0 {
			t.timer.Reset(left)
			if t.stopped.Load() {
				t.timer.Stop() // stop ran between the check and the Reset
			}
			return
		}
		expired()
	})
	t.timer.Reset(timeout)
	return t
}

// beat records a beat now, after which the stream may be silent for
// timeout.
func (t *idleTimer) beat(timeout time.Duration) {
	t.timeout.Store(int64(timeout))
	t.last.Store(int64(time.Since(t.start)))
}

// stop stops the timer for good: a run of its function that races with
// stop neither re-arms it nor ends the stream. (A timeout shortened by a
// beat takes effect when the timer next fires, at the latest at the old
// deadline.)
func (t *idleTimer) stop() {
	t.stopped.Store(true)
	t.timer.Stop()
}
