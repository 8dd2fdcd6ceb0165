package server

import (
	"math"
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

// idleTimeout is the http.Server's IdleTimeout for a configured one: a
// negative one (never) is a very long one, since zero would make both
// HTTP/1.1 and HTTP/2 fall back to the read timeout.
func idleTimeout(idle time.Duration) time.Duration {
	if idle < 0 {
		return math.MaxInt64
	}
	return idle
}
