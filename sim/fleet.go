package sim

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/leaderclient"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// ErrAlreadyRun is returned by Run when the Fleet has run before: a Fleet
// runs once.
var ErrAlreadyRun = errors.New("fleet already ran")

// Fleet is a set of simulated agents that share HTTP transports and one
// ticker. Create it with NewFleet and start it with Run.
type Fleet struct {
	cfg        Config
	agents     []*Agent
	transports []*http.Transport // created by the fleet; idle connections closed when Run returns

	// Registration data shared by every agent's RegisterRequest (read-only).
	resourcesProto  []*slacklinev1.Resource
	revocableProto  []*slacklinev1.Resource
	attributesProto []*slacklinev1.Attribute
	// heartbeatSlots caps the heartbeats in flight across the fleet.
	heartbeatSlots *semaphore.Weighted

	registered   atomic.Int64
	endedDropped atomic.Uint64 // see EndedContainersDropped
	ran          atomic.Bool
}

// NewFleet validates cfg, fills in defaults, loads persisted agent ids from
// cfg.WorkDir and creates the agents and their HTTP transports. No call is
// made until Run.
func NewFleet(cfg Config) (*Fleet, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &Fleet{
		cfg:             cfg,
		resourcesProto:  cfg.Resources.Proto("", resources.Regular),
		attributesProto: attributesProto(cfg.Attributes),
		heartbeatSlots:  semaphore.NewWeighted(int64(cfg.MaxConcurrentHeartbeats)),
	}
	if !cfg.Revocable.IsEmpty() {
		f.revocableProto = cfg.Revocable.Proto("", resources.Revocable)
	}
	if cfg.WorkDir != "" {
		if err := ensureWorkDir(cfg.WorkDir); err != nil {
			return nil, err
		}
	}

	opts := append([]connect.ClientOption{
		// Uncompressed responses: compression would cost the coordinator
		// CPU on every command for no gain on a local network.
		connect.WithAcceptCompression("gzip", nil, nil),
	}, cfg.ClientOptions...)
	// A comma-separated list is a coordinator group: every client follows
	// its leader.
	if _, _, err := leaderclient.New(cfg.Coordinator, nil, leaderclient.Options{}); err != nil {
		return nil, err
	}
	newClient := func(httpClient *http.Client) slacklinev1connect.AgentServiceClient {
		httpClient, base, _ := leaderclient.New(cfg.Coordinator, httpClient, leaderclient.Options{})
		return slacklinev1connect.NewAgentServiceClient(httpClient, base, opts...)
	}
	var clients []slacklinev1connect.AgentServiceClient
	// As the agent's: a streamed message (a heartbeat) goes out as one
	// HTTP/2 frame, not two (server.WholeMessages).
	if cfg.HTTPClient != nil {
		clients = append(clients, newClient(server.WholeMessagesClient(cfg.HTTPClient)))
	} else {
		for range (cfg.Count + cfg.AgentsPerTransport - 1) / cfg.AgentsPerTransport {
			transport := newTransport(cfg.TLS)
			f.transports = append(f.transports, transport)
			clients = append(clients, newClient(&http.Client{Transport: server.WholeMessages(transport)}))
		}
	}

	f.agents = make([]*Agent, cfg.Count)
	for i := range f.agents {
		hostname := cfg.HostnamePrefix + strconv.Itoa(i)
		var id string
		if cfg.WorkDir != "" {
			if id, err = loadAgentID(cfg.WorkDir, hostname); err != nil {
				return nil, err
			}
		}
		f.agents[i] = newAgent(f, i, hostname, id, clients[(i/cfg.AgentsPerTransport)%len(clients)])
	}
	return f, nil
}

// newTransport returns a transport that speaks HTTP/2 only: cleartext
// (prior knowledge) for http:// URLs, TLS (with tlsConfig, when set) for
// https://. HTTP/2 pings detect a coordinator that vanished without closing
// the connection.
func newTransport(tlsConfig *tls.Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		DialContext: dialer.DialContext,
		Protocols:   new(http.Protocols),
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
	}
	t.Protocols.SetUnencryptedHTTP2(true)
	t.Protocols.SetHTTP2(true)
	if tlsConfig != nil {
		t.TLSClientConfig = tlsConfig.Clone()
	}
	return t
}

// Run runs every agent until ctx is cancelled or every agent has been shut
// down by the coordinator (and RestartAfterShutdown is zero). It returns nil
// then, or ErrAlreadyRun when called a second time.
func (f *Fleet) Run(ctx context.Context) error {
	if !f.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	defer func() {
		for _, t := range f.transports {
			t.CloseIdleConnections()
		}
	}()

	tickCtx, stopTicker := context.WithCancel(ctx)
	defer stopTicker()
	var ticker errgroup.Group
	ticker.Go(func() error {
		f.tick(tickCtx)
		return nil
	})

	var agents errgroup.Group
	for _, a := range f.agents {
		agents.Go(func() error {
			a.run(ctx)
			return nil
		})
	}
	err := agents.Wait()
	stopTicker()
	return errors.Join(err, ticker.Wait())
}

// tick is the fleet's one ticker: each tick, every registered agent's task
// machine re-sends the status updates whose retry time has come.
// (Heartbeats run on each session's own timer.)
func (f *Fleet) tick(ctx context.Context) {
	ticker := time.NewTicker(f.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			for _, a := range f.agents {
				a.tick(now)
			}
		}
	}
}

// newMachine returns an empty task machine with the fleet's retry policy.
func (f *Fleet) newMachine() *tasks.Machine {
	return tasks.New(tasks.Config{RetryMin: f.cfg.StatusRetryMin, RetryMax: f.cfg.StatusRetryMax})
}

// Agents returns the fleet's agents, in index order.
func (f *Fleet) Agents() []*Agent {
	return append([]*Agent(nil), f.agents...)
}

// AgentIDs returns the ids of the agents that have one (they registered at
// least once, or had one persisted in WorkDir), in index order.
func (f *Fleet) AgentIDs() []string {
	ids := make([]string, 0, len(f.agents))
	for _, a := range f.agents {
		if id := a.ID(); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// Registered returns how many agents currently have a live session.
func (f *Fleet) Registered() int {
	return int(f.registered.Load())
}

// emit delivers events to Config.OnEvent. Callers must not hold a lock.
func (f *Fleet) emit(events ...Event) {
	if f.cfg.OnEvent == nil {
		return
	}
	for _, e := range events {
		f.cfg.OnEvent(e)
	}
}
