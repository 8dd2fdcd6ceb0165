// Package server is the plumbing every Slackline process shares to serve
// its Connect services (the coordinator's, the agent's NodeService):
//
//   - Serve runs an http.Handler over HTTP/1.1 and cleartext HTTP/2 (h2c) on
//     one port, or HTTP/1.1 and HTTP/2 over TLS when a certificate (or a
//     tls.Config: certificates and client CA, see internal/auth) is
//     configured, and shuts down gracefully when its context ends.
//   - HandlerOptions are the Connect handler options every service is
//     mounted with (today the MaxRequestBytes read limit).
//   - Serve speaks HTTP/2 through golang.org/x/net/http2 (the code net/http
//     bundles) to choose its write scheduler: the random one visits only
//     the streams with something to write, where net/http's round robin
//     visits every open stream for each frame (costly with thousands of
//     long-lived streams per connection).
//   - A cleartext connection that begins with the HTTP/2 preface is read
//     through a 512-byte buffer (h2cReadConn), so that a small frame takes
//     one read system call, as over TLS, not two (HTTP/2's frame reader
//     reads its header, then its payload, from the raw connection);
//     HTTP/1.1 connections are read as before.
//   - Serve bounds every connection: ReadTimeout for a request to arrive,
//     IdleTimeout for a connection with nothing in progress, HTTP/2 pings
//     for dead peers; streams live as long as their peers do.
//   - With Config.Anonymous, Serve bounds peers without credentials: a
//     connection is anonymous until a request on it authenticates
//     (MarkAuthenticated, called by auth.Middleware); an IP address, and
//     all peers together, hold a bounded number of anonymous connections
//     (one more closes the oldest), and requests served without
//     credentials (AdmitAnonymous) are bounded per connection and in
//     lifetime. LimitHits counts each limit hit in
//     slackline_server_limit_hits_total{limit} and logs it once.
//   - CallLimiter is an interceptor that bounds each caller's unary calls
//     in progress, so that one caller's flood waits in its own line.
//   - MountStandard mounts the standard gRPC health and reflection services
//     beside a process's own services, so grpcurl and load balancers work.
//   - Serve routes net/http's own errors (TLS handshake errors, handler
//     panics) through the process's slog logger (ErrorLog), at WARN.
//   - RPCMetrics is a Connect interceptor counting each RPC by procedure
//     and code (slackline_rpc_server_handled_total) and timing it
//     (slackline_rpc_server_handling_seconds); RegisterProcess registers
//     the go_* and process_* collectors and slackline_build_info.
//   - NewClient is the matching HTTP client (h2c for http://, HTTP/2 over
//     TLS for https://); NewTLSClient takes the TLS configuration (the CA
//     to trust, a client certificate).
//
// The package holds no state beyond one Serve call's: a process builds its own http.ServeMux,
// mounts its services with HandlerOptions, calls MountStandard, and passes
// the mux to Serve. Errors from Serve are listen and serve failures,
// wrapped; a clean shutdown returns nil.
package server
