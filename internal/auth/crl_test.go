package auth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/server"
)

// stubAgents answers Register and Heartbeat, and keeps each Connect stream
// open, forwarding what the test sends it, until the stream's context ends.
type stubAgents struct {
	slacklinev1connect.UnimplementedAgentServiceHandler
	mu      sync.Mutex
	streams map[string]chan *slacklinev1.ConnectResponse
}

func (*stubAgents) Register(context.Context, *connect.Request[slacklinev1.RegisterRequest]) (*connect.Response[slacklinev1.RegisterResponse], error) {
	return connect.NewResponse(&slacklinev1.RegisterResponse{}), nil
}

func (*stubAgents) Heartbeat(context.Context, *connect.Request[slacklinev1.HeartbeatRequest]) (*connect.Response[slacklinev1.HeartbeatResponse], error) {
	return connect.NewResponse(&slacklinev1.HeartbeatResponse{}), nil
}

func (s *stubAgents) Connect(ctx context.Context, _ *connect.Request[slacklinev1.ConnectRequest], stream *connect.ServerStream[slacklinev1.ConnectResponse]) error {
	ch := make(chan *slacklinev1.ConnectResponse)
	s.mu.Lock()
	s.streams[FromContext(ctx).Name] = ch
	s.mu.Unlock()
	if err := stream.Send(&slacklinev1.ConnectResponse{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg := <-ch:
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
	}
}

func (s *stubAgents) stream(principal string) chan *slacklinev1.ConnectResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[principal]
}

// opaqueListener hides the TCP connections it accepts, so that Watch
// cannot record them: only per-request authentication protects them.
type opaqueListener struct{ net.Listener }

type opaqueConn struct{ net.Conn }

func (l opaqueListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return opaqueConn{conn}, nil
}

// revocationServer serves stubAgents as the coordinator serves its
// AgentService (server.Serve, Middleware, Interceptor) with the credentials
// Generate wrote in dir and --client-crl dir/crl.pem.
type revocationServer struct {
	dir, url string
	authz    *Authorizer
	agents   *stubAgents
	// proto is the HTTP major version of the last request.
	proto atomic.Int32
}

func startRevocationServer(t *testing.T, opaque bool) *revocationServer {
	t.Helper()
	s := &revocationServer{dir: t.TempDir(), agents: &stubAgents{streams: map[string]chan *slacklinev1.ConnectResponse{}}}
	if _, err := Generate(s.dir, Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"a1", "a2"}, Frameworks: []string{"batch"}}); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.authz, err = Load(s.file(AuthzFile)); err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := ServerTLS(s.file(CoordinatorCertFile), s.file(CoordinatorKeyFile), s.file(CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.authz.LoadCRL(s.file(CRLFile), s.file(CACertFile), tlsConfig); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewAgentServiceHandler(s.agents, connect.WithInterceptors(s.authz.Interceptor())))
	authorized := s.authz.Middleware(mux)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.proto.Store(int32(r.ProtoMajor))
		authorized.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "https://" + ln.Addr().String()
	if opaque {
		ln = opaqueListener{ln}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, server.Config{Listener: ln, TLS: tlsConfig, Logger: slog.New(slog.DiscardHandler)}, handler)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

func (s *revocationServer) file(name string) string { return filepath.Join(s.dir, name) }

// agent returns an AgentService client presenting agent name's certificate
// over a connection of its own.
func (s *revocationServer) agent(t *testing.T, name string) slacklinev1connect.AgentServiceClient {
	t.Helper()
	return slacklinev1connect.NewAgentServiceClient(client(t, ClientCredentials{CAFile: s.file(CACertFile),
		CertFile: s.file(AgentCertFile(name)), KeyFile: s.file(AgentKeyFile(name))}), s.url)
}

// reload does what SIGHUP does and returns its log.
func (s *revocationServer) reload() string {
	var log bytes.Buffer
	s.authz.reloadFiles(slog.New(slog.NewTextHandler(&log, nil)))
	return log.String()
}

func heartbeat(ctx context.Context, c slacklinev1connect.AgentServiceClient) error {
	_, err := c.Heartbeat(ctx, connect.NewRequest(&slacklinev1.HeartbeatRequest{}))
	return err
}

func register(c slacklinev1connect.AgentServiceClient, host string) error {
	_, err := c.Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{AgentInfo: &slacklinev1.AgentInfo{Hostname: host}}))
	return err
}

// wantRevoked fails unless err is the refusal of a revoked certificate.
func wantRevoked(t *testing.T, what string, err error) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("%s: %v, want unauthenticated naming the revocation", what, err)
	}
}

func TestRevokedCertificateRefused(t *testing.T) {
	s := startRevocationServer(t, false)
	ctx := context.Background()
	a1, a2 := s.agent(t, "a1"), s.agent(t, "a2")
	for name, c := range map[string]slacklinev1connect.AgentServiceClient{"a1": a1, "a2": a2} {
		if err := register(c, name); err != nil {
			t.Fatalf("register %s before revocation: %v", name, err)
		}
		if err := heartbeat(ctx, c); err != nil {
			t.Fatalf("heartbeat %s before revocation: %v", name, err)
		}
	}
	if got := s.proto.Load(); got != 2 {
		t.Fatalf("requests over HTTP/%d: Watch's per-connection configuration lost HTTP/2", got)
	}
	// Both agents hold their command stream open.
	streams := map[string]*connect.ServerStreamForClient[slacklinev1.ConnectResponse]{}
	for name, c := range map[string]slacklinev1connect.AgentServiceClient{"a1": a1, "a2": a2} {
		stream, err := c.Connect(ctx, connect.NewRequest(&slacklinev1.ConnectRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stream.Close() })
		if !stream.Receive() {
			t.Fatalf("%s: stream: %v", name, stream.Err())
		}
		streams[name] = stream
	}

	res, err := Revoke(s.dir, []string{"a1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Revoked) != 1 || res.Revoked[0].CommonName != "a1" {
		t.Fatalf("revoked %+v", res.Revoked)
	}
	// Before the reload the servers do not know.
	if err := heartbeat(ctx, a1); err != nil {
		t.Fatalf("heartbeat before the reload: %v", err)
	}
	if log := s.reload(); !strings.Contains(log, "closed_connections=1") || !strings.Contains(log, "revoked=1") {
		t.Fatalf("reload log: %s", log)
	}

	// The revoked agent's stream ended with its connection.
	ended := make(chan bool, 1)
	go func() { ended <- streams["a1"].Receive() }()
	select {
	case received := <-ended:
		if received {
			t.Fatal("a1's stream goes on after the revocation")
		}
	case <-time.After(time.Minute):
		t.Fatal("a1's stream is still open a minute after the revocation")
	}
	// Its next calls, on a new connection, are refused.
	var reused []bool
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		reused = append(reused, info.Reused)
	}})
	wantRevoked(t, "a1's next heartbeat", heartbeat(traced, a1))
	if len(reused) == 0 || reused[len(reused)-1] {
		t.Errorf("a1's next heartbeat: connections reused %v, want it answered on a new connection", reused)
	}
	wantRevoked(t, "a1 registering again", register(a1, "a1"))
	fresh := s.agent(t, "a1")
	wantRevoked(t, "register with a revoked certificate", register(fresh, "a1"))
	wantRevoked(t, "heartbeat with a revoked certificate", heartbeat(ctx, fresh))
	stream, err := fresh.Connect(ctx, connect.NewRequest(&slacklinev1.ConnectRequest{}))
	if err == nil {
		// A server stream's refusal comes instead of its first message.
		if stream.Receive() {
			t.Error("a revoked certificate opened a command stream")
		}
		err = stream.Err()
		stream.Close()
	}
	wantRevoked(t, "command stream with a revoked certificate", err)

	// The other agent goes on, on its stream and its connection.
	select {
	case s.agents.stream("agent:a2") <- &slacklinev1.ConnectResponse{}:
	case <-time.After(time.Minute):
		t.Fatal("a2's stream handler is gone")
	}
	if !streams["a2"].Receive() {
		t.Fatalf("a2's stream: %v", streams["a2"].Err())
	}
	reused = nil
	if err := heartbeat(traced, a2); err != nil {
		t.Fatalf("a2's heartbeat: %v", err)
	}
	if !cmp.Equal(reused, []bool{true}) {
		t.Errorf("a2's heartbeat: connections reused %v, want its open one", reused)
	}
	if err := register(s.agent(t, "a2"), "a2"); err != nil {
		t.Fatalf("a2 on a new connection: %v", err)
	}

	// A list the client CA did not sign is refused at reload: the previous
	// one stays.
	other := t.TempDir()
	if _, err := Generate(other, Spec{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	forged, err := os.ReadFile(filepath.Join(other, CRLFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.file(CRLFile), forged, 0o644); err != nil {
		t.Fatal(err)
	}
	if log := s.reload(); !strings.Contains(log, "keeping the previous one") || !strings.Contains(log, "not signed by the client CA") {
		t.Fatalf("reload of a forged list: %s", log)
	}
	wantRevoked(t, "after a failed reload", register(s.agent(t, "a1"), "a1"))
	if err := register(s.agent(t, "a2"), "a2"); err != nil {
		t.Fatalf("a2 after a failed reload: %v", err)
	}
}

// TestRevokedOnOpenConnection: where the connection cannot be closed (not
// TCP), the next call on it is refused all the same: every request is
// authenticated, not only the handshake.
func TestRevokedOnOpenConnection(t *testing.T) {
	s := startRevocationServer(t, true)
	a1 := s.agent(t, "a1")
	if err := heartbeat(context.Background(), a1); err != nil {
		t.Fatal(err)
	}
	if _, err := Revoke(s.dir, []string{"a1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if log := s.reload(); !strings.Contains(log, "closed_connections=0") {
		t.Fatalf("reload log: %s", log)
	}
	var reused []bool
	traced := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		reused = append(reused, info.Reused)
	}})
	wantRevoked(t, "heartbeat on the open connection", heartbeat(traced, a1))
	if !cmp.Equal(reused, []bool{true}) {
		t.Errorf("connections reused %v, want the open one", reused)
	}
}

// TestConnRegistryForgetsDroppedConnections: the registry holds
// connections weakly, so that it does not keep a long-lived server's closed
// connections alive (net/http drops a closed HTTP/2 connection within its
// ping interval, 30 s here, then the entry goes).
func TestConnRegistryForgetsDroppedConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var r connRegistry
	kept := revokedKey{issuer: "ca", serial: "kept"}
	var keptConn net.Conn
	for i := range 10 {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		client.Close()
		conn, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		key := revokedKey{issuer: "ca", serial: "dropped"}
		if i == 0 {
			key, keptConn = kept, conn
		} else {
			conn.Close()
		}
		r.add(conn.(*net.TCPConn), key)
	}
	tracked := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.conns)
	}
	// Cleanups run some time after a collection finds a connection
	// unreachable: give them many chances.
	for range 1000 {
		if tracked() == 1 {
			break
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := tracked(); n != 1 {
		t.Fatalf("%d connections recorded, want the one still referenced", n)
	}
	// The one still in use is still closed by a revocation.
	if closed := r.closeRevoked(&revocations{revoked: map[revokedKey]struct{}{kept: {}}}); closed != 1 {
		t.Fatalf("closed %d, want 1", closed)
	}
	if _, err := keptConn.Write([]byte("x")); err == nil {
		t.Fatal("the revoked connection is still open")
	}
}

func TestLoadCRLRefusesForeignList(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if _, err := Generate(d, Spec{Hosts: []string{"127.0.0.1"}, Operators: []string{"admin"}}); err != nil {
			t.Fatal(err)
		}
	}
	a, tlsConfig := loadGenerated(t, dir)
	err := a.LoadCRL(filepath.Join(other, CRLFile), filepath.Join(dir, CACertFile), tlsConfig)
	if err == nil || !strings.Contains(err.Error(), "not signed by the client CA") {
		t.Fatalf("another CA's list: %v", err)
	}
	noClientCA, err := ServerTLS(filepath.Join(dir, CoordinatorCertFile), filepath.Join(dir, CoordinatorKeyFile), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		a    *Authorizer
		tls  bool
		want string
	}{
		{"without authorization", nil, true, "needs authorization"},
		{"without a client CA", a, false, "verifies client certificates"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tlsConfig
			if !tt.tls {
				cfg = noClientCA
			}
			if err := tt.a.LoadCRL(filepath.Join(dir, CRLFile), filepath.Join(dir, CACertFile), cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// crlPEM returns a CRL signed by ca listing serials.
func crlPEM(t *testing.T, ca *CA, serials ...int64) []byte {
	t.Helper()
	var certs []*x509.Certificate
	for _, s := range serials {
		certs = append(certs, &x509.Certificate{SerialNumber: big.NewInt(s)})
	}
	data, _, err := ca.revocationList(nil, certs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseCRLs(t *testing.T) {
	now := time.Now()
	newCA := func(name string) *CA {
		ca, err := NewCA(name, now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	ca, impostor, second := newCA("slackline CA"), newCA("slackline CA"), newCA("second CA")
	// cert is what revokes looks at: the issuer and the serial.
	cert := func(issuer *CA, serial int64) *x509.Certificate {
		return &x509.Certificate{RawIssuer: issuer.Cert.RawSubject, SerialNumber: big.NewInt(serial)}
	}
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name    string
		data    []byte
		cas     []*CA
		revoked []*x509.Certificate
		kept    []*x509.Certificate
		wantErr string
	}{
		{name: "empty list", data: crlPEM(t, ca), cas: []*CA{ca}, kept: []*x509.Certificate{cert(ca, 1)}},
		{name: "lists serials of its CA", data: crlPEM(t, ca, 7, 9), cas: []*CA{ca},
			revoked: []*x509.Certificate{cert(ca, 7), cert(ca, 9)}, kept: []*x509.Certificate{cert(ca, 8), cert(second, 7)}},
		{name: "one list per CA of a bundle", data: join(crlPEM(t, ca, 7), crlPEM(t, second, 8)), cas: []*CA{ca, second},
			revoked: []*x509.Certificate{cert(ca, 7), cert(second, 8)}, kept: []*x509.Certificate{cert(ca, 8), cert(second, 7)}},
		{name: "same name, another key", data: crlPEM(t, impostor, 7), cas: []*CA{ca}, wantErr: "not signed by the client CA"},
		{name: "another CA", data: crlPEM(t, second, 7), cas: []*CA{ca}, wantErr: "not by the client CA"},
		{name: "one good list, one foreign", data: join(crlPEM(t, ca, 7), crlPEM(t, second, 8)), cas: []*CA{ca}, wantErr: "not by the client CA"},
		{name: "a certificate", data: ca.CertPEM(), cas: []*CA{ca}, wantErr: `"CERTIFICATE" block`},
		{name: "nothing", data: []byte("not PEM\n"), cas: []*CA{ca}, wantErr: "no PEM X509 CRL"},
		{name: "corrupt", data: pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: []byte("junk")}), cas: []*CA{ca}, wantErr: "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cas []*x509.Certificate
			for _, c := range tt.cas {
				cas = append(cas, c.Cert)
			}
			list, err := parseCRLs(tt.data, cas)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.revoked {
				if !list.revokes(c) {
					t.Errorf("serial %v of %q not revoked", c.SerialNumber, c.RawIssuer)
				}
			}
			for _, c := range tt.kept {
				if list.revokes(c) {
					t.Errorf("serial %v of %q revoked", c.SerialNumber, c.RawIssuer)
				}
			}
		})
	}
}

func TestAddRevocations(t *testing.T) {
	t0, now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	entry := func(serial int64, at time.Time) x509.RevocationListEntry {
		return x509.RevocationListEntry{SerialNumber: big.NewInt(serial), RevocationTime: at}
	}
	cert := func(serial int64) *x509.Certificate { return &x509.Certificate{SerialNumber: big.NewInt(serial)} }
	tests := []struct {
		name        string
		prev        []x509.RevocationListEntry
		certs       []*x509.Certificate
		want        []x509.RevocationListEntry
		wantAlready []bool
	}{
		{name: "nothing", want: []x509.RevocationListEntry{}, wantAlready: []bool{}},
		{name: "first", certs: []*x509.Certificate{cert(5)}, want: []x509.RevocationListEntry{entry(5, now)}, wantAlready: []bool{false}},
		{name: "earlier entries kept first", prev: []x509.RevocationListEntry{entry(5, t0)}, certs: []*x509.Certificate{cert(6)},
			want: []x509.RevocationListEntry{entry(5, t0), entry(6, now)}, wantAlready: []bool{false}},
		{name: "revoked again keeps its time", prev: []x509.RevocationListEntry{entry(5, t0)}, certs: []*x509.Certificate{cert(5)},
			want: []x509.RevocationListEntry{entry(5, t0)}, wantAlready: []bool{true}},
		{name: "named twice", certs: []*x509.Certificate{cert(6), cert(6)},
			want: []x509.RevocationListEntry{entry(6, now)}, wantAlready: []bool{false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, already := addRevocations(tt.prev, tt.certs, now)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantAlready, already); diff != "" {
				t.Errorf("already (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRevoke(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().Truncate(time.Second)
	if _, err := Generate(dir, Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"a1", "a2"}, Frameworks: []string{"batch"}, Now: start}); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	crlFile := filepath.Join(dir, CRLFile)
	// state returns the list's number and its entries' serials and times.
	state := func() (int64, map[string]time.Time) {
		t.Helper()
		info, err := os.Stat(crlFile)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o644 {
			t.Errorf("%s mode %v, want 0644", CRLFile, info.Mode().Perm())
		}
		crl, err := readCRL(crlFile, ca.Cert)
		if err != nil {
			t.Fatal(err)
		}
		if got := crl.NextUpdate.Sub(crl.ThisUpdate); got != CRLValidity {
			t.Errorf("next update %v after this one, want %v", got, CRLValidity)
		}
		entries := map[string]time.Time{}
		for _, e := range crl.RevokedCertificateEntries {
			entries[e.SerialNumber.String()] = e.RevocationTime
		}
		return crl.Number.Int64(), entries
	}
	serial := func(name string) string {
		cert, err := certificateOf(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return cert.SerialNumber.String()
	}
	if n, entries := state(); n != 1 || len(entries) != 0 {
		t.Fatalf("credentials init: CRL number %d with %d entries, want an empty list number 1", n, len(entries))
	}

	t1, t2 := start.Add(time.Minute), start.Add(2*time.Minute)
	if _, err := Revoke(dir, []string{"a1"}, t1); err != nil {
		t.Fatal(err)
	}
	res, err := Revoke(dir, []string{"a2", "a1"}, t2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Revoked) != 1 || res.Revoked[0].Name != "a2" || len(res.Already) != 1 || res.Already[0].Name != "a1" {
		t.Errorf("revoked %+v, already %+v", res.Revoked, res.Already)
	}
	n, entries := state()
	if want := map[string]time.Time{serial("a1"): t1.UTC(), serial("a2"): t2.UTC()}; n != 3 || !cmp.Equal(entries, want) {
		t.Fatalf("CRL number %d, entries %v; want number 3, %v", n, entries, want)
	}
	if res.Number.Int64() != 3 || !res.NextUpdate.Equal(t2.Add(CRLValidity)) {
		t.Errorf("result: number %v, next update %v", res.Number, res.NextUpdate)
	}

	other := t.TempDir()
	if _, err := Generate(other, Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"a1"}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, want string }{
		{"a3", `unknown name "a3"`},
		{"batch", "deleting its line in authz.yaml"},
		{"a b", "neither an agent's name nor"},
		{filepath.Join(other, AgentCertFile("a1")), "not issued by the CA"},
		{filepath.Join(dir, "missing.crt"), "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Revoke(dir, []string{"a1", tt.name}, time.Now())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to say %q", err, tt.want)
			}
			if n, _ := state(); n != 3 {
				t.Fatalf("a failed revocation rewrote the list (number %d)", n)
			}
		})
	}

	// A list that this CA did not sign is not extended.
	forged, err := os.ReadFile(filepath.Join(other, CRLFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crlFile, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Revoke(dir, []string{"a1"}, time.Now()); err == nil || !strings.Contains(err.Error(), "not signed by the client CA") {
		t.Fatalf("extending a foreign list: %v", err)
	}
	if err := os.Remove(crlFile); err != nil {
		t.Fatal(err)
	}
	if _, err := Revoke(dir, []string{"a2"}, time.Now()); err != nil {
		t.Fatalf("without crl.pem: %v", err)
	}
	if n, entries := state(); n != 1 || len(entries) != 1 {
		t.Fatalf("a list started afresh: number %d, %d entries", n, len(entries))
	}
}

// TestCheckNamesRevocation: the refusal says what happened and which
// certificate, and unwraps to ErrRevoked.
func TestCheckNamesRevocation(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("slackline CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	crl := &CRL{file: "crl.pem"}
	list, err := parseCRLs(crlPEM(t, ca, 0x2a), []*x509.Certificate{ca.Cert})
	if err != nil {
		t.Fatal(err)
	}
	crl.list.Store(list)
	revoked := &x509.Certificate{RawIssuer: ca.Cert.RawSubject, SerialNumber: big.NewInt(0x2a)}
	revoked.Subject.CommonName = "a1"
	err = crl.Check(revoked)
	if !errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), `serial 2A (CN "a1")`) {
		t.Fatalf("Check = %v", err)
	}
	if err := crl.Check(&x509.Certificate{RawIssuer: ca.Cert.RawSubject, SerialNumber: big.NewInt(0x2b)}); err != nil {
		t.Fatalf("unlisted certificate: %v", err)
	}
	if err := (*CRL)(nil).Check(revoked); err != nil {
		t.Fatalf("nil CRL: %v", err)
	}
}

// BenchmarkAuthenticateWithCRL: what a 10,000-entry CRL adds to
// authenticating a certificate (compare with a nil CRL).
func BenchmarkAuthenticateWithCRL(b *testing.B) {
	now := time.Now()
	ca, err := NewCA("slackline CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	var certs []*x509.Certificate
	for i := range 10000 {
		certs = append(certs, &x509.Certificate{SerialNumber: new(big.Int).Lsh(big.NewInt(int64(i)+1), 100)})
	}
	data, _, err := ca.revocationList(nil, certs, now)
	if err != nil {
		b.Fatal(err)
	}
	list, err := parseCRLs(data, []*x509.Certificate{ca.Cert})
	if err != nil {
		b.Fatal(err)
	}
	crl := &CRL{}
	crl.list.Store(list)
	certPEM, _, err := ca.Issue(CertSpec{CommonName: "a1", Organization: []string{AgentOrganization}, Hosts: []string{"a1"},
		Client: true, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		b.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodPost, "https://coordinator/", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert, ca.Cert}}}
	for _, bench := range []struct {
		name string
		crl  *CRL
	}{{"none", nil}, {"10000-entries", crl}} {
		b.Run(bench.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := authenticate(r, nil, bench.crl); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestVerifyCRLTriesEveryCAOfTheName: during a CA rotation the bundle holds
// two CAs of one name; a list signed by either is accepted, one signed by
// neither is refused.
func TestVerifyCRLTriesEveryCAOfTheName(t *testing.T) {
	now := time.Now()
	var cas []*CA
	for range 3 {
		ca, err := NewCA("slackline-ca", now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, ca)
	}
	bundle := []*x509.Certificate{cas[0].Cert, cas[1].Cert} // cas[2] is not trusted
	for i, ca := range cas {
		block, _ := pem.Decode(crlPEM(t, ca, 7))
		crl, err := x509.ParseRevocationList(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		err = verifyCRL(crl, bundle)
		if trusted := i < 2; (err == nil) != trusted {
			t.Errorf("list of CA %d (trusted %v): %v", i, trusted, err)
		}
	}
}
