// Package auth is Slackline's trust layer, shared by the coordinator and the
// agent's NodeService: who a caller is (authentication), what it may do
// (authorization), and the credentials that make both work.
//
// # Identities
//
// A caller is a Principal, found once per request by Authorizer.Middleware:
//
//   - a bearer token ("Authorization: Bearer ..."): the principal whose
//     token_sha256 in the authorization file is the token's SHA-256. Only
//     hashes are stored; a presented token is compared with every hash in
//     constant time. Removing a principal's line (and reloading) revokes it.
//   - a client certificate signed by the server's client CA (mTLS): an agent
//     when its subject's Organization is AgentOrganization, named
//     "agent:<CN>" and certified for the hostnames (DNS or IP SANs) the
//     certificate names; the coordinator's own client identity when it is
//     CoordinatorOrganization, named "coordinator:<CN>" (its node proxy,
//     the live view's and slacklinectl's way to agents, calls them with it,
//     never with a caller's token); otherwise a
//     framework or operator named by its CN.
//     With a certificate revocation list (Authorizer.LoadCRL, --client-crl)
//     a certificate it lists is refused with ErrRevoked, on every request,
//     not only in the handshake, so that a reloaded list applies to
//     connections already open.
//
// A token, when present, names the principal; otherwise the certificate
// does. Invalid credentials, or none where a rule needs a principal, are
// refused with connect.CodeUnauthenticated (HTTP 401).
//
// # Authorization
//
// The authorization file (authz.yaml, see Policy) grants actions to
// principals in Mesos's style: each action lists rules of principals and the
// objects they may act on (roles, users, framework principals, machines,
// hostnames); once a file is given, anything it does not grant is refused
// with connect.CodePermissionDenied (HTTP 403) naming the action. Every
// procedure the coordinator or the agent serves has a Rule in Rules (a test
// walks the generated service descriptors and fails on a procedure without
// one): who may call it at all (Caller), and the action checked before the
// handler runs, with the objects named in the request. The coordinator's
// identity passes only where Rule.Coordinator is set (the NodeService's
// read-only methods: the view methods and ReadSandboxFile), without the
// action: the coordinator authorized its own caller with ProxyMiddleware
// first, and for ReadSandboxFile checked that the caller may read the task's
// sandbox. Checks that need
// state only a handler has — that a framework id belongs to the calling
// principal, that an agent acts only on its own tasks, which frameworks a
// caller may see — are the handler's, and Rule.Handler says which. Handlers
// find the caller with FromContext and ask Authorizer.Allowed.
//
// # Lifecycle and ownership
//
// Load reads the authorization file into an Authorizer; Reload replaces its
// policy atomically (the processes reload on SIGHUP), so checks in flight
// see either the old policy or the new. SIGHUP also reloads the CRL
// (CRL.Reload), which then closes the connections whose client certificate
// it newly revokes: CRL.Watch records them in the server's TLS handshakes,
// holding them weakly so that the server alone decides their lifetime. A
// file that fails to load (a CRL not signed by the client CA) leaves the
// previous version in force. A nil *Authorizer is the insecure
// mode: no principal is required and everything is allowed; CheckListen
// refuses that mode, and a listener without TLS, on every address loopback
// included (tasks are local users), unless --insecure or
// SLACKLINE_INSECURE=1 (InsecureFromEnv) says the operator accepts it.
//
// Clients check servers too: CRL.VerifyServer refuses, in the handshake, a
// server whose certificate the list revokes (an agent's serving
// certificate, for the coordinator's proxy and slacklinectl --crl), and
// CRL.Generation tells a client holding connections when to drop them.
//
// # Credentials
//
// Generate writes everything a cluster needs (what `slacklinectl credentials
// init` does): a CA, the coordinator's serving certificate and its client
// identity towards agents, one client and serving certificate per agent,
// one token per framework and operator, an authorization file granting
// each framework its own role and operators everything, and an empty CRL.
// Revoke (`slacklinectl credentials revoke`) adds certificates to that CRL,
// signed by the same CA. ServerTLS, ClientTLS and ClientCredentials build
// the TLS configurations and HTTP clients that use them, with crypto/tls
// and crypto/x509 only.
package auth
