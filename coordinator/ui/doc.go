// Package ui is the coordinator's live view, served at /ui/: static files
// (HTML, one script, one style sheet) embedded in the binary, and a narrow,
// read-only proxy to the agents' NodeService. The page is never rendered
// with data on the server: the browser's script fetches everything it shows
// over Connect's JSON protocol, the same API the CLI uses.
//
// # Place in the data flow
//
//	browser --GET /ui/...--> static files (no data, no credentials needed)
//	browser --POST /slackline.v1.OperatorService/GetState, GetMaintenanceStatus--> coordinator (as any client)
//	browser --POST /ui/node/{agent}/slackline.v1.NodeService/{method}--> Handler --POST--> that agent's endpoint
//
// The cluster view shows agents (allocated, used and revocable CPU, memory
// and any other scalar, offers), roles (weights, quota, allocation),
// outstanding offers, live and completed frameworks, live tasks, completed
// tasks with their reasons, and maintenance with the frameworks' answers to
// inverse offers; every table sorts and filters in the page. The node view
// polls one agent every second: who delayed whom (GetDelays), the QoS
// corrections on a timeline, and each container's CPU, memory, network,
// run-queue latency p99 and delay caused by revocable work, drawn with
// uPlot (static/vendor/uplot, MIT, refreshed by scripts/vendor/uplot.sh)
// over the agent's history (GetHistory: the page starts with the agent's
// last 15 minutes, then asks only for what is new). A task's stdout and
// stderr are one click away (ReadSandboxFile). The page's script and
// uPlot's are the only scripts; both come from the embedded files, under a
// CSP that allows nothing else.
//
// # Why a proxy, and what it allows
//
// Agents listen on node addresses that browsers often cannot reach, with
// certificates from the cluster's own CA that browsers do not trust, and
// serving the NodeService cross-origin would need CORS on every agent. So
// the page talks only to the coordinator (same origin, no CORS), which
// forwards exactly the read-only NodeService methods in NodeMethods to the
// endpoint the agent registered, found by agent id in the coordinator's own
// state (the browser never names a URL). slacklinectl uses the same proxy
// for logs, top, get containers and get features. ReadSandboxFile (task
// output, which may hold secrets) is forwarded only after
// Config.Sandboxes (the coordinator) checked that the caller is the task's
// framework principal or has access_sandboxes on it; the request is decoded,
// checked and re-encoded, and every refusal is the same permission_denied.
// Requests are
// bounded (MaxRequestBytes in, MaxResponseBytes out, ProxyTimeout) and only
// Connect unary requests (POST, JSON or binary) pass. An answer is read
// whole before it is forwarded: one over MaxResponseBytes is replaced by a
// resource_exhausted error that says so (and is counted), never cut short.
//
// # Credentials
//
// The page keeps an operator's bearer token in sessionStorage (per tab,
// gone when the tab closes) and sends it as "Authorization: Bearer" on
// every call. Static files carry no data and need no credentials.
//
// No caller's credentials ever leave the coordinator. The proxy authorizes
// each call as the NodeService procedure it forwards (Config.Authorize, the
// coordinator's auth.Authorizer.ProxyMiddleware: view_agents, which also
// names the caller for the agent lookup), then calls the agent with the
// coordinator's own client certificate (Config.AgentTLS, organization
// slackline:coordinators) and only the Connect protocol's headers: never
// the caller's Authorization header or cookies. Agents accept that
// identity for exactly the methods in NodeMethods (auth.Rule.Coordinator),
// so a rogue or compromised agent learns nothing it could replay. This is the Kubernetes API
// server's way with kubelets.
//
// With Config.AgentTLS the proxy reaches only https endpoints, and verifies
// that the agent's certificate names the hostname the agent registered
// with, not the endpoint's address: the coordinator publishes the address
// the agent connected from (coordinator/trust.go), which may not be a name
// the certificate carries, and the certificate, not the address, is what
// proves the agent. With Config.AgentCRL an agent whose serving certificate
// is revoked is refused in the handshake, before anything is sent; a
// reloaded list drops the pooled connections.
//
// # Errors
//
// The proxy answers in Connect's error format: 404 (not_found) for an
// unknown agent or a method outside NodeMethods, 503 (unavailable) when the
// agent registered no endpoint or cannot be reached; an agent's own answer,
// errors included, passes through unchanged.
package ui
