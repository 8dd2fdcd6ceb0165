package agenttest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/coordinator"
)

// Server serves an HTTP handler until the returned stop is called; stop
// closes the server and its connections. *Network and *TCP implement it.
type Server interface {
	Serve(handler http.Handler) (stop func())
}

// TCP serves on one loopback address, the same one again after every stop,
// so that a restarted coordinator is where its agents expect it.
type TCP struct {
	// Addr is host:port.
	Addr string
}

// NewTCP picks a free loopback port.
func NewTCP(t testing.TB) *TCP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return &TCP{Addr: ln.Addr().String()}
}

// relistenTimeout bounds how long Serve waits for its address to be free
// again after a restart.
const relistenTimeout = 10 * time.Second

// Serve serves handler with HTTP/1.1 and cleartext HTTP/2 on s.Addr.
func (s *TCP) Serve(handler http.Handler) (stop func()) {
	srv := &http.Server{Handler: handler, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", s.Addr)
	// A child the process is forking at the moment (the agent under test
	// starts supervisors, warm ones in the background too) holds a copy of
	// the closed listener until it execs: the address is free again then.
	for deadline := time.Now().Add(relistenTimeout); errors.Is(err, syscall.EADDRINUSE) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		ln, err = net.Listen("tcp", s.Addr)
	}
	if err != nil {
		panic("agenttest: listen again on " + s.Addr + ": " + err.Error())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln) // returns when stop closes the server
	}()
	return func() {
		srv.Close()
		<-done
	}
}

// Coordinator is a real coordinator (coordinator.New) for tests, with its
// registry in a work dir that survives Restart.
type Coordinator struct {
	t      testing.TB
	cfg    coordinator.Config
	server Server

	current *coordinator.Coordinator
	stop    func()
}

// StartCoordinator starts a coordinator served by server. cfg.WorkDir
// defaults to a temporary directory and cfg.Logger to the test's output at
// Warn. The coordinator stops when the test ends, or at Stop.
func StartCoordinator(t testing.TB, cfg coordinator.Config, server Server) *Coordinator {
	t.Helper()
	if cfg.WorkDir == "" && cfg.Store == nil {
		cfg.WorkDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	c := &Coordinator{t: t, cfg: cfg, server: server}
	c.start()
	t.Cleanup(c.Stop)
	return c
}

// Coordinator returns the running coordinator (nil while stopped).
func (c *Coordinator) Coordinator() *coordinator.Coordinator { return c.current }

// Restart stops the coordinator, which ends every agent's and framework's
// stream, and starts a new one on the same registry and address: agents
// must register again.
func (c *Coordinator) Restart() {
	c.t.Helper()
	c.Stop()
	c.start()
}

// Stop stops the coordinator; the address refuses connections until
// Restart. Stop is idempotent.
func (c *Coordinator) Stop() {
	if c.stop != nil {
		c.stop()
		c.stop, c.current = nil, nil
	}
}

func (c *Coordinator) start() {
	c.t.Helper()
	coord, err := coordinator.New(c.cfg)
	if err != nil {
		c.t.Fatalf("start coordinator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		coord.Run(ctx)
	}()
	stopServing := c.server.Serve(coord.Handler())
	c.current = coord
	c.stop = func() {
		cancel()
		<-ran
		stopServing()
		coord.Close()
	}
}
