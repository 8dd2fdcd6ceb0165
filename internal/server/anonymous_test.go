package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/internal/server"
)

// anonymousServer serves, with limits, a handler that authenticates
// requests to /auth (as auth.Middleware does with credentials) and admits
// the others as anonymous; /block holds its request until release is
// closed or its context ends, and reports how it ended on ended.
type anonymousServer struct {
	addr    string
	hits    *prometheus.Registry
	release chan struct{}
	started chan struct{}
	ended   chan error
}

func startAnonymous(t *testing.T, limits server.AnonymousLimits) *anonymousServer {
	t.Helper()
	s := &anonymousServer{hits: prometheus.NewRegistry(), release: make(chan struct{}), started: make(chan struct{}, 100), ended: make(chan error, 100)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/auth" {
			server.MarkAuthenticated(r.Context())
			io.WriteString(w, "principal")
			return
		}
		ctx, done, err := server.AdmitAnonymous(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusTooManyRequests)
			return
		}
		defer done()
		if _, bounded := ctx.Deadline(); r.URL.Path == "/deadline" && bounded {
			io.WriteString(w, "bounded ")
		}
		if r.URL.Path == "/block" {
			s.started <- struct{}{}
			select {
			case <-s.release:
				s.ended <- nil
			case <-ctx.Done():
				s.ended <- ctx.Err()
			}
		}
		io.WriteString(w, "anonymous")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, server.Config{Listener: ln, Anonymous: &limits, LimitHits: server.NewLimitHits(s.hits, nil)}, handler)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

func (s *anonymousServer) hitCount(t *testing.T, limit string) int {
	t.Helper()
	families, err := s.hits.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == limit {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// get sends an HTTP/1.1 request on conn and returns the response body, or
// the error that ended the connection.
func get(conn net.Conn, path string) (string, error) {
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		return "", err
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hung test fails, it does not hang
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// TestAnonymousConnsPerPeer: a peer holds at most MaxConnsPerPeer
// connections that have not authenticated; one more is served and closes
// the peer's oldest anonymous connection (so a flood cannot keep a new
// client out); a connection that authenticates no longer counts.
func TestAnonymousConnsPerPeer(t *testing.T) {
	t.Parallel()
	s := startAnonymous(t, server.AnonymousLimits{MaxConnsPerPeer: 3})
	dial := func() net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	var conns []net.Conn
	for i := range 3 {
		conn := dial()
		if body, err := get(conn, "/anon"); err != nil || body != "anonymous" {
			t.Fatalf("connection %d: %q, %v", i, body, err)
		}
		conns = append(conns, conn)
	}
	if body, err := get(dial(), "/anon"); err != nil || body != "anonymous" {
		t.Fatalf("a fourth anonymous connection: %q, %v; want it served", body, err)
	}
	if body, err := get(conns[0], "/anon"); err == nil {
		t.Fatalf("the oldest anonymous connection still served after a fourth came: %q", body)
	}
	if n := s.hitCount(t, "anonymous_conns_per_peer"); n != 1 {
		t.Fatalf("limit hits %d, want 1", n)
	}
	// An authenticated connection no longer counts, nor is it closed.
	if body, err := get(conns[1], "/auth"); err != nil || body != "principal" {
		t.Fatalf("authenticating: %q, %v", body, err)
	}
	if body, err := get(dial(), "/anon"); err != nil || body != "anonymous" {
		t.Fatalf("after one authenticated: %q, %v", body, err)
	}
	if n := s.hitCount(t, "anonymous_conns_per_peer"); n != 1 {
		t.Fatalf("limit hits %d after one authenticated, want still 1", n)
	}
	if body, err := get(dial(), "/anon"); err != nil || body != "anonymous" {
		t.Fatalf("one more: %q, %v", body, err)
	}
	if body, err := get(conns[1], "/auth"); err != nil || body != "principal" {
		t.Fatalf("the authenticated connection after more anonymous ones came: %q, %v", body, err)
	}
	if body, err := get(conns[2], "/anon"); err == nil {
		t.Fatalf("the oldest anonymous connection still served: %q", body)
	}
}

// TestAnonymousConns: the server holds at most MaxConns anonymous
// connections of all peers; one more is served and closes the oldest, so
// that a flood holding every place cannot lock a new client out.
func TestAnonymousConns(t *testing.T) {
	t.Parallel()
	s := startAnonymous(t, server.AnonymousLimits{MaxConns: 2, MaxConnsPerPeer: -1})
	var conns []net.Conn
	for i := range 3 {
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if body, err := get(conn, "/anon"); err != nil || body != "anonymous" {
			t.Fatalf("connection %d: %q, %v; want it served", i, body, err)
		}
		conns = append(conns, conn)
	}
	if body, err := get(conns[0], "/anon"); err == nil {
		t.Fatalf("the oldest of three anonymous connections still served: %q", body)
	}
	if body, err := get(conns[1], "/anon"); err != nil || body != "anonymous" {
		t.Fatalf("the second connection: %q, %v", body, err)
	}
	if n := s.hitCount(t, "anonymous_conns"); n != 1 {
		t.Fatalf("limit hits %d, want 1", n)
	}
}

// TestAnonymousStreamsPerConn: an anonymous HTTP/2 connection has at most
// MaxStreamsPerConn anonymous requests in progress; one more is refused
// at once; once one ends, another is admitted.
func TestAnonymousStreamsPerConn(t *testing.T) {
	t.Parallel()
	s := startAnonymous(t, server.AnonymousLimits{MaxStreamsPerConn: 2})
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: h2c}
	defer client.CloseIdleConnections()
	url := "http://" + s.addr
	getURL := func(path string) (int, error) {
		resp, err := client.Get(url + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.ProtoMajor != 2 {
			return 0, errors.New("not HTTP/2: " + resp.Proto)
		}
		return resp.StatusCode, nil
	}
	if code, err := getURL("/anon"); err != nil || code != http.StatusOK {
		t.Fatalf("first request: %d, %v", code, err) // the connection is open
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if code, err := getURL("/block"); err != nil || code != http.StatusOK {
				t.Errorf("blocked request: %d, %v", code, err)
			}
		})
	}
	<-s.started
	<-s.started
	if code, err := getURL("/anon"); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("a third request in progress: %d, %v; want 429", code, err)
	}
	if n := s.hitCount(t, "anonymous_streams_per_conn"); n != 1 {
		t.Fatalf("limit hits %d, want 1", n)
	}
	close(s.release)
	wg.Wait()
	if code, err := getURL("/anon"); err != nil || code != http.StatusOK {
		t.Fatalf("after they ended: %d, %v", code, err)
	}
}

// TestAnonymousStreamLifetime: an anonymous request's context ends after
// MaxStreamLifetime; an authenticated connection's requests are not
// bounded.
func TestAnonymousStreamLifetime(t *testing.T) {
	t.Parallel()
	s := startAnonymous(t, server.AnonymousLimits{MaxStreamLifetime: 20 * time.Millisecond})
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if body, err := get(conn, "/block"); err != nil || body != "anonymous" {
		t.Fatalf("%q, %v", body, err)
	}
	if err := <-s.ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("anonymous request ended with %v, want its lifetime's end", err)
	}
	if n := s.hitCount(t, "anonymous_stream_lifetime"); n != 1 {
		t.Fatalf("limit hits %d, want 1", n)
	}
	if body, err := get(conn, "/deadline"); err != nil || body != "bounded anonymous" {
		t.Fatalf("anonymous: %q, %v; want its lifetime bounded", body, err)
	}
	if body, err := get(conn, "/auth"); err != nil || body != "principal" {
		t.Fatalf("authenticating: %q, %v", body, err)
	}
	if body, err := get(conn, "/deadline"); err != nil || body != "anonymous" {
		t.Fatalf("after authenticating: %q, %v; want no bound", body, err)
	}
}
