package etcdtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slackline/slackline/internal/auth"
)

// Binary returns the path of the etcd binary, or "" when it is not
// installed.
func Binary() string {
	path, err := exec.LookPath("etcd")
	if err != nil {
		return ""
	}
	return path
}

// Require skips the test when etcd is not installed, or fails it when CI
// is set.
func Require(t testing.TB) string {
	t.Helper()
	path := Binary()
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("etcd is not installed (apt-get install etcd-server)")
		}
		t.Skip("etcd is not installed (apt-get install etcd-server)")
	}
	return path
}

// Cluster is a set of etcd members on loopback.
type Cluster struct {
	t       testing.TB
	binary  string
	members []*Member
	tls     *tls.Config // clients' TLS (StartTLS), nil for plain HTTP
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	dataDir   string
	args      []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *lockedBuffer
}

// Start starts an n-member cluster and waits until it has a leader.
func Start(t testing.TB, n int) *Cluster { return start(t, n, nil, false) }

// shared is the one-member cluster of Shared, one per test binary.
var shared struct {
	once sync.Once
	c    *Cluster
	dirs []string // its members' data directories
	seq  atomic.Int64
}

// Shared returns a one-member cluster shared by every test of this test
// binary that calls it: the first call starts it, with the calling test's
// t for its start only; RunShared stops it once the tests ran. Each test
// keeps to keys under a Prefix of its own, so that tests sharing the
// member (parallel ones, and the runs of -count) see none of each other's
// keys, and none stops or restarts the member. A member's start (a process of its own, its data directory and
// its first election) was most of the CPU of a test on one member.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	Require(t)
	shared.once.Do(func() { shared.c = start(t, 1, nil, true) })
	if shared.c == nil {
		t.Fatal("the shared etcd member did not start (see the first test that asked for it)")
	}
	return shared.c
}

// Prefix returns a key prefix ("/NAME-N/") of t's alone on a Shared
// cluster: the test's name and a number new to each call.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("/%s-%d/", strings.ReplaceAll(t.Name(), "/", "_"), shared.seq.Add(1))
}

// RunShared runs m's tests and then stops the Shared cluster, if one
// started, and removes its data; a package whose tests call Shared calls
// it from TestMain: os.Exit(etcdtest.RunShared(m)). When a test failed it
// prints the member's log.
func RunShared(m *testing.M) int {
	code := m.Run()
	if c := shared.c; c != nil {
		for _, m := range c.members {
			m.stop(syscall.SIGKILL)
			if code != 0 {
				fmt.Fprintf(os.Stderr, "--- shared etcd %s:\n%s", m.Name, m.log.String())
			}
		}
	}
	for _, dir := range shared.dirs {
		os.RemoveAll(dir)
	}
	return code
}

// TLSFiles are the files of a cluster started by StartTLS: the CA that
// signed the members' serving certificates and one client certificate
// (CN "coordinator"), in PEM.
type TLSFiles struct {
	CA, ClientCert, ClientKey string
}

// StartTLS starts an n-member cluster that serves clients over TLS only
// and requires a client certificate signed by its CA (etcd's
// --client-cert-auth), as production clusters do. Client and the health
// checks use the client certificate.
func StartTLS(t testing.TB, n int) (*Cluster, TLSFiles) {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := auth.NewCA("etcd test CA", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	issue := func(name string, spec auth.CertSpec) (string, string) {
		spec.NotBefore, spec.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		cert, key, err := ca.Issue(spec)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", cert), write(name+".key", key)
	}
	files := TLSFiles{CA: write("ca.crt", ca.CertPEM())}
	serverCert, serverKey := issue("server", auth.CertSpec{CommonName: "etcd", Hosts: []string{"127.0.0.1", "localhost"}, Server: true})
	files.ClientCert, files.ClientKey = issue("client", auth.CertSpec{CommonName: "coordinator", Client: true})
	clientTLS, err := auth.ClientTLS(files.CA, files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, n, &tlsSetup{
		client: clientTLS,
		args: []string{"--cert-file", serverCert, "--key-file", serverKey,
			"--trusted-ca-file", files.CA, "--client-cert-auth"},
	}, false), files
}

// tlsSetup is a TLS cluster's extra member flags and its clients' config.
type tlsSetup struct {
	args   []string
	client *tls.Config
}

// start starts n members. A shared cluster's members outlive t: their
// data directories are not t's, and RunShared, not t, ends them.
func start(t testing.TB, n int, tlsSetup *tlsSetup, isShared bool) *Cluster {
	t.Helper()
	c := &Cluster{t: t, binary: Require(t)}
	scheme := "http://"
	if tlsSetup != nil {
		c.tls, scheme = tlsSetup.client, "https://"
	}
	token := fmt.Sprintf("slackline-test-%d", time.Now().UnixNano())
	var initial []string
	for i := range n {
		var dataDir string
		if isShared {
			dir, err := os.MkdirTemp("", "etcdtest-shared-")
			if err != nil {
				t.Fatal(err)
			}
			shared.dirs = append(shared.dirs, dir)
			dataDir = dir
		} else {
			dataDir = t.TempDir()
		}
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: scheme + freeAddr(t),
			PeerURL:   "http://" + freeAddr(t),
			dataDir:   dataDir,
			log:       &lockedBuffer{},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.members {
		m.args = []string{
			"--name", m.Name, "--data-dir", m.dataDir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--heartbeat-interval", "50", "--election-timeout", "500",
			"--logger", "zap", "--log-level", "warn",
		}
		if tlsSetup != nil {
			m.args = append(m.args, tlsSetup.args...)
		}
		c.startMember(m)
	}
	stop := func() {
		for _, m := range c.members {
			m.stop(syscall.SIGKILL)
			if t.Failed() {
				t.Logf("--- etcd %s:\n%s", m.Name, m.log.String())
			}
		}
	}
	if isShared {
		// Until it is healthy the cluster is t's: a member that fails
		// to start is stopped with t, and Shared's later callers fail.
		healthy := false
		t.Cleanup(func() {
			if !healthy {
				stop()
			}
		})
		c.WaitHealthy()
		healthy = true
		return c
	}
	t.Cleanup(stop)
	c.WaitHealthy()
	return c
}

func (c *Cluster) startMember(m *Member) {
	c.t.Helper()
	cmd := exec.Command(c.binary, m.args...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start etcd %s: %v", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
}

// Members returns the members, in the order of Endpoints.
func (c *Cluster) Members() []*Member { return c.members }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.ClientURL
	}
	return out
}

// Client returns a client of the whole cluster, closed with the test.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: c.tls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// Stop stops member i (SIGTERM, then SIGKILL after 5 s) and waits.
func (c *Cluster) Stop(i int) { c.members[i].stop(syscall.SIGTERM) }

// Restart starts member i again on its data and waits until it is healthy.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	m.stop(syscall.SIGTERM)
	c.startMember(m)
	c.waitMember(m, 20*time.Second)
}

// WaitHealthy waits until every running member answers and knows a leader.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	for _, m := range c.members {
		if m.running() {
			c.waitMember(m, 20*time.Second)
		}
	}
}

func (c *Cluster) waitMember(m *Member, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	// The client is made once the member listens: a client that dials
	// first backs off (gRPC, about a second) before it dials again, which
	// was most of a member's start.
	host := m.ClientURL[strings.Index(m.ClientURL, "://")+3:]
	for {
		conn, err := net.DialTimeout("tcp", host, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if !time.Now().Before(deadline) || !m.running() {
			break // the health checks below report it
		}
		time.Sleep(10 * time.Millisecond)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, TLS: c.tls, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	defer client.Close()
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		status, err := client.Status(ctx, m.ClientURL)
		if err == nil && status.Leader != 0 {
			// A linearizable read proves the member serves.
			_, err = client.Get(ctx, "health")
		}
		cancel()
		if err == nil && status.Leader != 0 {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("etcd %s not healthy within %v: %v\n%s", m.Name, timeout, last, m.log.String())
}

func (m *Member) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

func (m *Member) stop(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
