package ui

import (
	"bytes"
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
)

// Proxy limits.
const (
	// MaxRequestBytes bounds a proxied request body (the NodeService's
	// read methods take empty messages).
	MaxRequestBytes = 64 << 10
	// MaxResponseBytes bounds a proxied answer: a larger one is not
	// forwarded (never cut short); the caller gets resource_exhausted
	// saying so, counted by
	// slackline_coordinator_ui_proxy_answers_too_large_total.
	MaxResponseBytes = 16 << 20
	// MaxAnswersInFlight bounds the proxied calls in flight, each of which
	// may hold an answer of up to MaxResponseBytes in memory: a call
	// beyond it waits for a slot, within ProxyTimeout; one that waited in
	// vain gets resource_exhausted, counted by
	// slackline_coordinator_ui_proxy_busy_total.
	MaxAnswersInFlight = 4
	// ProxyTimeout bounds one proxied call.
	ProxyTimeout = 10 * time.Second
)

// forwardedHeaders are the request headers the proxy passes on: the Connect
// protocol's, nothing that identifies the caller.
var forwardedHeaders = []string{"Content-Type", "Connect-Protocol-Version", "Connect-Timeout-Ms"}

// NodeMethods are the NodeService methods the proxy forwards: read-only,
// the node view's and slacklinectl's. ReadSandboxFile passes only after
// Config.Sandboxes authorized the caller for the task it names.
var NodeMethods = []string{"GetContainers", "GetUsage", "GetEstimate", "GetCorrections", "GetFeatures", "GetImages", "GetHistory", "GetDelays", "GetShadows", readSandboxFile}

const readSandboxFile = "ReadSandboxFile"

//go:embed static
var static embed.FS

// AgentLister finds agents; the coordinator's OperatorService handler is
// one. It is called with the browser's request context, so whatever the
// handler checks about the caller applies to the lookup too.
type AgentLister interface {
	GetAgents(context.Context, *connect.Request[slacklinev1.GetAgentsRequest]) (*connect.Response[slacklinev1.GetAgentsResponse], error)
}

// SandboxAuthorizer decides who may read a task's sandbox; the coordinator
// is one, as it knows each task's framework and principal (live and
// completed tasks). It is called with the caller in ctx (Config.Authorize).
type SandboxAuthorizer interface {
	// MayReadSandbox returns nil when the caller may read the sandbox of
	// task taskID of framework frameworkID on agent agentID: it is the
	// framework's principal or has access_sandboxes on it. Otherwise it
	// returns a permission_denied error that says no more about the task
	// than the caller's GetTasks shows.
	MayReadSandbox(ctx context.Context, agentID, frameworkID, taskID string) error
}

// Config configures Handler.
type Config struct {
	// Agents resolves an agent id to its registered NodeService endpoint.
	Agents AgentLister
	// Sandboxes authorizes each forwarded ReadSandboxFile for the task it
	// names; without it ReadSandboxFile is refused (permission_denied).
	Sandboxes SandboxAuthorizer
	// AgentTLS is how the proxy reaches agents: RootCAs (the cluster's
	// CA) verify each agent's certificate, which must name the hostname
	// the agent registered with, whatever address its endpoint has; its
	// Certificates are the coordinator's own client identity
	// (coordinator-client.crt, organization auth.CoordinatorOrganization),
	// the only credentials an agent ever sees from the proxy (see the
	// package documentation). With AgentTLS the proxy reaches only https
	// endpoints. Nil: an insecure cluster's http or https endpoints, the
	// system's roots, no identity.
	AgentTLS *tls.Config
	// AgentCRL, when set, refuses agents whose serving certificate it
	// revokes, in the TLS handshake, before anything is sent; when it is
	// reloaded, the proxy's pooled connections are dropped so that every
	// agent is checked again.
	AgentCRL *auth.CRL
	// Authorize, when set, wraps the proxy: it sees each request with the
	// path of the procedure it forwards (/slackline.v1.NodeService/METHOD),
	// so an authorizing middleware applies that procedure's rule
	// (auth.Authorizer.ProxyMiddleware: view_agents), and it must put the
	// caller in the request's context, where Agents finds it. It is the
	// only check of the caller: agents see the coordinator's identity.
	Authorize func(http.Handler) http.Handler
	Logger    *slog.Logger
	// Metrics, when set, receives the proxy's metrics
	// (slackline_coordinator_ui_proxy_answers_too_large_total,
	// slackline_coordinator_ui_proxy_busy_total,
	// slackline_coordinator_ui_proxy_waiting); a second
	// Handler on the same registry shares the first one's.
	Metrics prometheus.Registerer

	// maxResponseBytes is the largest answer forwarded; 0 is
	// MaxResponseBytes. Tests set a smaller whole number of MiB so as not
	// to move 16 MiB answers.
	maxResponseBytes int
}

// registerCounter makes a counter and registers it with reg when reg is
// set; a second Handler on the same registry shares the first one's.
func registerCounter(reg prometheus.Registerer, opts prometheus.CounterOpts) prometheus.Counter {
	c := prometheus.NewCounter(opts)
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			panic(err) // a fixed, valid metric
		}
		return already.ExistingCollector.(prometheus.Counter)
	}
	return c
}

// Handler returns the handler to mount at "/ui/": the embedded page under
// /ui/ and the NodeService proxy under /ui/node/{agent}/.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.maxResponseBytes == 0 {
		cfg.maxResponseBytes = MaxResponseBytes
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	p := &proxy{cfg: cfg, slots: make(chan struct{}, MaxAnswersInFlight)}
	p.tooLarge = registerCounter(cfg.Metrics, prometheus.CounterOpts{
		Name: "slackline_coordinator_ui_proxy_answers_too_large_total",
		Help: "Agents' answers the live view's proxy did not forward because they exceeded MaxResponseBytes (16 MiB); the caller got resource_exhausted.",
	})
	p.waiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "slackline_coordinator_ui_proxy_waiting",
		Help: "Proxied calls waiting for one of MaxAnswersInFlight (4) slots.",
	})
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(p.waiting); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				panic(err) // a fixed, valid metric
			}
			p.waiting = already.ExistingCollector.(prometheus.Gauge)
		}
	}
	p.busy = registerCounter(cfg.Metrics, prometheus.CounterOpts{
		Name: "slackline_coordinator_ui_proxy_busy_total",
		Help: "Proxied calls that got no slot (MaxAnswersInFlight, 4) within ProxyTimeout or before their caller gave up; the caller got resource_exhausted.",
	})
	var forward http.Handler = http.HandlerFunc(p.forward)
	if cfg.Authorize != nil {
		forward = cfg.Authorize(forward)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", withHeaders(http.StripPrefix("/ui/", http.FileServerFS(files))))
	mux.Handle("POST /ui/node/{agent}/{service}/{method}", p.route(forward))
	return mux
}

// withHeaders sets headers for the static files: always revalidate (the
// files change with the binary and carry no modification time), and a
// content security policy that lets the page load only its own script and
// style and talk only to its own origin.
func withHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy",
			"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.ServeHTTP(w, r)
	})
}

type proxy struct {
	cfg      Config
	tooLarge prometheus.Counter
	busy     prometheus.Counter
	waiting  prometheus.Gauge
	slots    chan struct{} // MaxAnswersInFlight
	busyOnce sync.Once     // the first refusal for lack of a slot is logged

	mu      sync.Mutex
	clients map[string]*http.Client // by the hostname agents' certificates must name
	// generation is the AgentCRL generation the clients were made under.
	generation uint64
}

// maxClients bounds the per-hostname clients kept; past it they are all
// dropped and made again on demand.
const maxClients = 1024

// client returns the HTTP client for an agent registered as hostname: it
// speaks HTTP/1.1 and h2c to http endpoints and HTTP/2 over TLS to https
// ones. With Config.AgentTLS, its TLS connections present the coordinator's
// certificate and verify the agent's against hostname rather than the
// address dialled, and against Config.AgentCRL; one client per hostname,
// so that a pooled connection verified for one agent never carries
// another's calls. A reloaded AgentCRL drops every client and its idle
// connections: new calls verify their agent again.
func (p *proxy) client(hostname string) *http.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen := p.cfg.AgentCRL.Generation(); gen != p.generation {
		for _, c := range p.clients {
			c.CloseIdleConnections()
		}
		p.clients, p.generation = nil, gen
	}
	if c, ok := p.clients[hostname]; ok {
		return c
	}
	if p.clients == nil || len(p.clients) >= maxClients {
		p.clients = map[string]*http.Client{}
	}
	c := server.NewClient()
	if p.cfg.AgentTLS != nil {
		conf := p.cfg.AgentTLS.Clone()
		conf.ServerName = hostname
		p.cfg.AgentCRL.VerifyServer(conf)
		c.Transport.(*http.Transport).TLSClientConfig = conf
	}
	p.clients[hostname] = c
	return c
}

// agentKey carries the agent a proxied request is for in its context.
type agentKey struct{}

// route checks that the request names a forwarded method and hands it to
// forward with the procedure's own path (/slackline.v1.NodeService/METHOD)
// and the agent's id in its context.
func (p *proxy) route(forward http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		service, method := r.PathValue("service"), r.PathValue("method")
		if service != slacklinev1connect.NodeServiceName || !slices.Contains(NodeMethods, method) {
			writeError(w, connect.CodeNotFound, fmt.Sprintf("the coordinator forwards only %s/{%s}", slacklinev1connect.NodeServiceName, strings.Join(NodeMethods, ",")))
			return
		}
		r = r.Clone(context.WithValue(r.Context(), agentKey{}, r.PathValue("agent")))
		r.URL.Path, r.URL.RawPath = "/"+service+"/"+method, ""
		forward.ServeHTTP(w, r)
	})
}

// forward sends one NodeService call, r.URL.Path, to the agent named in
// its context.
func (p *proxy) forward(w http.ResponseWriter, r *http.Request) {
	agentID, _ := r.Context().Value(agentKey{}).(string)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		writeError(w, connect.CodeResourceExhausted, fmt.Sprintf("request body: %v", err))
		return
	}
	if r.URL.Path == "/"+slacklinev1connect.NodeServiceName+"/"+readSandboxFile {
		if body, err = p.checkSandboxRead(r, agentID, body); err != nil {
			writeError(w, connect.CodeOf(err), connectMessage(err))
			return
		}
	}
	endpoint, hostname, err := p.endpoint(r.Context(), agentID)
	if err != nil {
		writeError(w, connect.CodeOf(err), connectMessage(err))
		return
	}
	if u, err := url.Parse(endpoint); err != nil || (p.cfg.AgentTLS != nil && u.Scheme != "https") {
		// The coordinator publishes no such endpoint with authorization on
		// (coordinator/trust.go); this guards a proxy configured with TLS
		// against anything else.
		writeError(w, connect.CodeUnavailable, fmt.Sprintf("agent %s endpoint %q: the coordinator reaches agents only over https", agentID, endpoint))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ProxyTimeout)
	defer cancel()
	target := strings.TrimSuffix(endpoint, "/") + r.URL.Path
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		writeError(w, connect.CodeUnavailable, fmt.Sprintf("agent %s endpoint %q: %v", agentID, endpoint, err))
		return
	}
	// Only the protocol's headers: never the caller's Authorization or
	// cookies. The agent sees the coordinator's certificate and nothing
	// of the caller's credentials.
	for _, h := range forwardedHeaders {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	p.waiting.Inc()
	select {
	case p.slots <- struct{}{}:
		p.waiting.Dec()
		defer func() { <-p.slots }()
	case <-ctx.Done():
		p.waiting.Dec()
		p.busy.Inc()
		p.busyOnce.Do(func() {
			p.cfg.Logger.Warn("ui proxy: every slot held for the whole timeout; refusing calls (logged once, counted in slackline_coordinator_ui_proxy_busy_total)",
				"limit", MaxAnswersInFlight, "timeout", ProxyTimeout)
		})
		writeError(w, connect.CodeResourceExhausted, fmt.Sprintf("the coordinator is forwarding %d agent answers already and none finished within %v: try again", MaxAnswersInFlight, ProxyTimeout))
		return
	}
	resp, err := p.client(hostname).Do(out)
	if err != nil {
		if errors.Is(err, auth.ErrServerRevoked) {
			p.cfg.Logger.Warn("ui proxy: agent's certificate is revoked; not calling it", "agent", agentID, "hostname", hostname, "err", err)
		} else {
			p.cfg.Logger.Debug("ui proxy: agent unreachable", "agent", agentID, "endpoint", endpoint, "err", err)
		}
		writeError(w, connect.CodeUnavailable, fmt.Sprintf("agent %s at %s: %v", agentID, endpoint, err))
		return
	}
	if resp.StatusCode == http.StatusUnauthorized && (p.cfg.AgentTLS == nil || len(p.cfg.AgentTLS.Certificates) == 0) {
		resp.Body.Close()
		writeError(w, connect.CodeUnavailable, fmt.Sprintf("agent %s requires credentials and the coordinator has no client identity: "+
			"start the coordinator with --agent-client-cert and --agent-client-key (coordinator-client.crt and .key, written by slacklinectl credentials init)", agentID))
		return
	}
	defer resp.Body.Close()
	// The whole answer is read before anything is sent: one larger than
	// MaxResponseBytes gets an error, never a truncated message.
	limit := p.cfg.maxResponseBytes
	answer, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		writeError(w, connect.CodeUnavailable, fmt.Sprintf("agent %s at %s: reading its answer: %v", agentID, endpoint, err))
		return
	}
	if len(answer) > limit {
		p.tooLarge.Inc()
		p.cfg.Logger.Warn("ui proxy: agent's answer too large; not forwarded", "agent", agentID, "method", r.URL.Path, "limit_bytes", limit)
		writeError(w, connect.CodeResourceExhausted, fmt.Sprintf("agent %s's answer to %s is larger than the coordinator forwards (%d MiB): ask for less (GetHistory: a since, a larger step_seconds or a task_id)",
			agentID, strings.TrimPrefix(r.URL.Path, "/"), limit>>20))
		return
	}
	for _, h := range []string{"Content-Type", "Content-Encoding"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// checkSandboxRead decodes a ReadSandboxFile request (Connect unary, binary
// or JSON, uncompressed), asks Config.Sandboxes whether the caller may read
// the task's sandbox, and returns the request re-encoded from what was
// checked, so that the agent reads exactly the message the proxy
// authorized.
func (p *proxy) checkSandboxRead(r *http.Request, agentID string, body []byte) ([]byte, error) {
	if p.cfg.Sandboxes == nil {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("this proxy forwards no ReadSandboxFile"))
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ReadSandboxFile: Content-Encoding %q: the proxy takes uncompressed requests", enc))
	}
	msg := &slacklinev1.ReadSandboxFileRequest{}
	var marshal func() ([]byte, error)
	switch ct := r.Header.Get("Content-Type"); ct {
	case "application/proto":
		if err := proto.Unmarshal(body, msg); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ReadSandboxFile request: %w", err))
		}
		marshal = func() ([]byte, error) { return proto.Marshal(msg) }
	case "application/json":
		if err := protojson.Unmarshal(body, msg); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ReadSandboxFile request: %w", err))
		}
		marshal = func() ([]byte, error) { return protojson.Marshal(msg) }
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ReadSandboxFile: Content-Type %q: want application/proto or application/json (Connect unary)", ct))
	}
	if msg.GetFrameworkId() == "" || msg.GetTaskId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("ReadSandboxFile through the coordinator: framework_id and task_id are required"))
	}
	if err := p.cfg.Sandboxes.MayReadSandbox(r.Context(), agentID, msg.GetFrameworkId(), msg.GetTaskId()); err != nil {
		return nil, err
	}
	out, err := marshal()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return out, nil
}

// connectMessage is err's message without its code.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// endpoint returns the NodeService URL and the hostname agentID registered.
func (p *proxy) endpoint(ctx context.Context, agentID string) (endpoint, hostname string, err error) {
	resp, err := p.cfg.Agents.GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil {
		return "", "", err
	}
	for _, a := range resp.Msg.GetAgents() {
		if a.GetId() != agentID {
			continue
		}
		if a.GetEndpoint() == "" {
			return "", "", connect.NewError(connect.CodeUnavailable, fmt.Errorf("agent %s (%s) registered no NodeService endpoint", agentID, a.GetHostname()))
		}
		return a.GetEndpoint(), a.GetHostname(), nil
	}
	return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("no agent %q", agentID))
}

// writeError answers in the Connect protocol's unary error format.
func writeError(w http.ResponseWriter, code connect.Code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(httpStatus(code))
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code.String(), message})
}

// httpStatus maps the codes the proxy produces to the HTTP statuses the
// Connect protocol specifies for them.
func httpStatus(code connect.Code) int {
	switch code {
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
