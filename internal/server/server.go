package server

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// Config configures Serve.
type Config struct {
	// Listen is the address to listen on, e.g. "127.0.0.1:5050".
	Listen string
	// Listener, when set, is used instead of listening on Listen.
	Listener net.Listener
	// TLSCertFile and TLSKeyFile enable TLS when both are set.
	TLSCertFile, TLSKeyFile string
	// TLS, when set, enables TLS with this configuration (its certificates
	// and client verification) instead of TLSCertFile and TLSKeyFile.
	TLS *tls.Config
	// MaxConcurrentStreams per HTTP/2 connection (default 100000: one
	// slackline-sim connection carries thousands of agent streams).
	MaxConcurrentStreams int
	// IdleTimeout closes a connection with no request in progress after
	// this long (default DefaultIdleTimeout; negative: never).
	IdleTimeout time.Duration
	// ReadTimeout bounds the time a client takes to send a request's
	// headers and body (default DefaultReadTimeout; negative: none). It
	// does not bound a stream's life: only the request is read by then.
	ReadTimeout time.Duration
	// Anonymous, when set, bounds what peers without credentials hold
	// (AnonymousLimits); set it when the handler authenticates requests
	// (it calls MarkAuthenticated and AdmitAnonymous, as auth.Middleware
	// does). Nil: no such limits (a server that authenticates nobody).
	Anonymous *AnonymousLimits
	// LimitHits counts the anonymous limits hit (nil: not counted).
	LimitHits *LimitHits
	Logger    *slog.Logger
}

// Serve serves handler until ctx is cancelled, then shuts down gracefully
// (streams get up to 5 s to finish). It returns nil after a clean shutdown.
func Serve(ctx context.Context, cfg Config, handler http.Handler) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 100000
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
	}
	srv := &http.Server{
		Handler: handler,
		// The server's own read timeout, not a per-request deadline set
		// from a handler: HTTP/2 arms it in the connection's serve loop
		// and stops it when the stream ends, where a handler's
		// SetReadDeadline costs a message to that loop per request
		// (about 90 us of coordinator CPU per agent heartbeat at 10,000
		// agents). It bounds the request only: HTTP/1.1 lifts it once the
		// body has been read, HTTP/2 applies it to the body's stream.
		ReadTimeout:       max(cfg.ReadTimeout, 0),
		ReadHeaderTimeout: headerTimeout(cfg.ReadTimeout),
		IdleTimeout:       idleTimeout(cfg.IdleTimeout),
		Protocols:         new(http.Protocols),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: cfg.MaxConcurrentStreams,
			// Detect dead peers on otherwise idle streams.
			PingTimeout:     15 * time.Second,
			SendPingTimeout: 30 * time.Second,
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    ErrorLog(cfg.Logger),
	}
	tlsOn := cfg.TLS != nil || (cfg.TLSCertFile != "" && cfg.TLSKeyFile != "")
	if !tlsOn {
		// Cleartext HTTP/2 reads a frame in one system call, as TLS does
		// (h2cReadConn); beneath the guard, whose connections
		// connContext finds by type.
		ln = h2cReadListener{Listener: ln}
	}
	if cfg.Anonymous != nil {
		limits := cfg.Anonymous.withDefaults()
		ln = guardedListener{Listener: ln, guard: &anonymousGuard{limits: limits, hits: cfg.LimitHits, byPeer: map[string]*list.List{}}}
		srv.ConnContext = connContext
		cfg.Logger.Info("limits for peers without credentials", "max_conns_per_peer", limits.MaxConnsPerPeer, "max_conns", limits.MaxConns,
			"max_streams_per_conn", limits.MaxStreamsPerConn, "max_stream_lifetime", limits.MaxStreamLifetime)
	}
	srv.Protocols.SetHTTP1(true)
	if cfg.TLS != nil {
		srv.TLSConfig = cfg.TLS.Clone()
		cfg.TLSCertFile, cfg.TLSKeyFile = "", ""
	}
	if tlsOn {
		srv.Protocols.SetHTTP2(true)
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	// HTTP/2 is served by golang.org/x/net/http2 (the code net/http
	// bundles) for one setting net/http does not expose: the write
	// scheduler. net/http's schedules round robin over every open stream of
	// a connection, visiting each one's queue on every frame it writes; with
	// thousands of long-lived, mostly idle streams on a connection
	// (slackline-sim: 100 agents per connection, each with a command stream
	// and a heartbeat stream) that walk was the largest single cost of the
	// coordinator's heartbeats and pings. The random scheduler visits only
	// the streams with something to write (control frames first, as all
	// schedulers do). srv.HTTP2 still applies. x/net deprecates choosing a
	// scheduler, without an alternative yet: if it goes, the cost returns
	// (scripts/bench/scale shows it).
	//lint:ignore SA1019 the only way to choose a write scheduler (see above)
	if err := http2.ConfigureServer(srv, &http2.Server{NewWriteScheduler: func() http2.WriteScheduler { return http2.NewRandomWriteScheduler() }}); err != nil {
		return fmt.Errorf("configure HTTP/2: %w", err)
	}
	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- srv.ServeTLS(ln, cfg.TLSCertFile, cfg.TLSKeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	cfg.Logger.Info("serving", "address", ln.Addr().String(), "tls", tlsOn)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NewClient returns an HTTP client that speaks HTTP/1.1 and cleartext
// HTTP/2 (h2c) to http:// URLs and HTTP/2 over TLS to https:// URLs.
func NewClient() *http.Client { return NewTLSClient(nil) }

// NewTLSClient is NewClient with a TLS configuration for https:// URLs
// (the CA to trust, a client certificate); nil means the defaults.
func NewTLSClient(tlsConfig *tls.Config) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if tlsConfig != nil {
		t.TLSClientConfig = tlsConfig.Clone()
	}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	t.Protocols.SetHTTP2(true)
	t.Protocols.SetUnencryptedHTTP2(true)
	t.HTTP2 = &http.HTTP2Config{PingTimeout: 15 * time.Second, SendPingTimeout: 30 * time.Second}
	return &http.Client{Transport: t}
}
