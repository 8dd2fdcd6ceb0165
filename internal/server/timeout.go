package server

import (
	"net/http"
	"time"
)

// Connection timeouts applied by Serve unless its Config says otherwise.
const (
	// DefaultIdleTimeout closes keep-alive connections (HTTP/1.1) and
	// HTTP/2 connections without streams after this long idle. Live
	// streams keep their connection: HTTP/2 pings detect dead peers.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultReadTimeout bounds how long a client may take to send a
	// request (headers and body), so that slow or stalled senders do not
	// hold a handler and its buffers.
	DefaultReadTimeout = 30 * time.Second
)

// headerTimeout bounds reading request headers: 10 s, or the read timeout
// when that is shorter.
func headerTimeout(read time.Duration) time.Duration {
	if read > 0 {
		return min(10*time.Second, read)
	}
	return 10 * time.Second
}

// WithReadTimeout bounds the time a client takes to send each request's
// body to timeout (none when timeout <= 0). It does not cut a stream that
// goes on sending responses once its request was read (Subscribe, the
// agents' command streams): HTTP/1.1 lifts the deadline when the body has
// been read, and HTTP/2 applies it to reading the body only.
func WithReadTimeout(next http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A writer without deadlines (a test's recorder) is served as is.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		next.ServeHTTP(w, r)
	})
}
