package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// Authorizer authenticates requests and applies a Policy. Create it with
// Load (from a file, reloadable) or New. A nil *Authorizer is the insecure
// mode: Middleware authenticates nobody, and Allowed and Check allow
// everything. Its methods are safe for concurrent use.
type Authorizer struct {
	file   string
	policy atomic.Pointer[Policy]
	// crl, set before serving (LoadCRL), revokes client certificates.
	crl    *CRL
	errors *connect.ErrorWriter
}

// New returns an Authorizer applying pol.
func New(pol *Policy) *Authorizer {
	a := &Authorizer{errors: connect.NewErrorWriter()}
	a.policy.Store(pol)
	return a
}

// Load returns an Authorizer applying the authorization file, which Reload
// reads again.
func Load(file string) (*Authorizer, error) {
	pol, err := LoadPolicy(file)
	if err != nil {
		return nil, err
	}
	a := New(pol)
	a.file = file
	return a, nil
}

// Reload reads the authorization file again and applies it to the requests
// that follow; on error the current policy stays.
func (a *Authorizer) Reload() error {
	if a == nil || a.file == "" {
		return errors.New("no authorization file to reload")
	}
	pol, err := LoadPolicy(a.file)
	if err != nil {
		return err
	}
	a.policy.Store(pol)
	return nil
}

// Enabled reports whether a authorizes anything (false in insecure mode).
func (a *Authorizer) Enabled() bool { return a != nil }

// Allowed reports whether p may perform action on object ("" for actions
// without one). Everything is allowed when a is nil.
func (a *Authorizer) Allowed(p *Principal, action Action, object string) bool {
	if a == nil {
		return true
	}
	return a.policy.Load().Allowed(p, action, object)
}

// Check returns nil when the caller in ctx may perform action on object,
// else a connect error: CodeUnauthenticated without a caller,
// CodePermissionDenied naming the action otherwise.
func (a *Authorizer) Check(ctx context.Context, action Action, object string) error {
	if a == nil {
		return nil
	}
	p := FromContext(ctx)
	if p == nil {
		return connect.NewError(connect.CodeUnauthenticated, ErrNoCredentials)
	}
	if !a.Allowed(p, action, object) {
		return Denied(p, action, object)
	}
	return nil
}

// CheckAgentResources returns nil when the agent calling in ctx may
// register as hostname with total (Policy.CheckAgentResources), else a
// PermissionDenied error naming the cap and the resources beyond it. It
// allows everything when a is nil.
func (a *Authorizer) CheckAgentResources(ctx context.Context, hostname string, total resources.Resources) error {
	if a == nil {
		return nil
	}
	if err := a.policy.Load().CheckAgentResources(FromContext(ctx), hostname, total); err != nil {
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	return nil
}

// Warnings returns the current policy's warnings (Policy.Warnings), none
// when a is nil.
func (a *Authorizer) Warnings() []string {
	if a == nil {
		return nil
	}
	return a.policy.Load().Warnings()
}

// objectNouns name each object key's value in errors.
var objectNouns = map[string]string{
	"roles": "role", "users": "user", "framework_principals": "framework principal",
	"machines": "machine", "hostnames": "hostname",
}

// Denied returns the PermissionDenied error for p not being allowed action
// on object.
func Denied(p *Principal, action Action, object string) error {
	if noun := objectNouns[objectKeys[action]]; noun != "" {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("principal %q is not allowed %s on %s %q", p.String(), action, noun, object))
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("principal %q is not allowed %s", p.String(), action))
}

// Middleware authenticates each request and applies the part of its Rule
// that needs no request message: the caller kind and an action without
// objects. A request that authenticates marks its connection as a
// principal's (server.MarkAuthenticated); one served to Anyone is admitted
// under the server's anonymous limits (server.AdmitAnonymous). The
// principal is in the request's context for the handlers
// (FromContext). Paths without a rule are answered NotFound. With a nil
// Authorizer it returns next unchanged.
//
// The coordinator's identity (Principal.IsCoordinator) passes only where
// Rule.Coordinator is set, and then without the rule's action: the
// coordinator authorized its own caller before proxying.
func (a *Authorizer) Middleware(next http.Handler) http.Handler {
	return a.middleware(next, true)
}

// ProxyMiddleware is Middleware for a server that forwards the procedures
// it checks to agents under its own identity (the coordinator's live view,
// coordinator/ui): it applies each procedure's rule to the original caller
// and refuses the coordinator's identity outright, so that the rule's
// action (view_agents) is always checked for someone.
func (a *Authorizer) ProxyMiddleware(next http.Handler) http.Handler {
	return a.middleware(next, false)
}

func (a *Authorizer) middleware(next http.Handler, coordinatorAllowed bool) http.Handler {
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, done := a.admit(w, r, coordinatorAllowed)
		if r == nil {
			return
		}
		defer done()
		next.ServeHTTP(w, r)
	})
}

// admit authenticates and authorizes r for middleware: it returns the
// request to serve, with the caller in its context, and what to call once
// it was served; or, having refused it, nil. It is kept out of line so that
// its locals are not in the frame below a streaming handler, which stays
// on the stream's goroutine for the stream's life (Go shrinks an idle
// goroutine's stack only while it uses less than a quarter of it).
//
//go:noinline
func (a *Authorizer) admit(w http.ResponseWriter, r *http.Request, coordinatorAllowed bool) (*http.Request, func()) {
	rule, ok := Rules[r.URL.Path]
	if !ok {
		a.refuse(w, r, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: no such procedure or path", r.URL.Path)))
		return nil, nil
	}
	if rule.Caller == Anyone {
		// Open to anyone, and so bounded per connection and in time
		// (server.AnonymousLimits) unless the connection authenticated.
		ctx, done, err := server.AdmitAnonymous(r.Context())
		if err != nil {
			a.refuse(w, r, connect.NewError(connect.CodeResourceExhausted, err))
			return nil, nil
		}
		return r.WithContext(ctx), done
	}
	pol := a.policy.Load()
	p, err := authenticate(r, pol.tokens, a.crl)
	if err != nil {
		a.refuse(w, r, connect.NewError(connect.CodeUnauthenticated, err))
		return nil, nil
	}
	if p.IsCoordinator() && !coordinatorAllowed {
		a.refuse(w, r, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("principal %q is the coordinator's own identity; it calls agents, not the coordinator's proxy", p.Name)))
		return nil, nil
	}
	server.MarkAuthenticated(r.Context())
	if err := callerAllowed(rule, p, r.URL.Path); err != nil {
		a.refuse(w, r, err)
		return nil, nil
	}
	if !p.IsCoordinator() && rule.Action != "" && rule.Objects == nil && !pol.Allowed(p, rule.Action, "") {
		a.refuse(w, r, Denied(p, rule.Action, ""))
		return nil, nil
	}
	return r.WithContext(NewContext(r.Context(), p)), func() {}
}

func callerAllowed(rule Rule, p *Principal, path string) error {
	switch {
	case p.IsCoordinator() && !rule.Coordinator:
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("principal %q is the coordinator's identity; it may call only the NodeService's read-only methods, not %s", p.Name, path))
	case p.IsCoordinator():
		return nil
	case rule.Caller == Clients && p.IsAgent():
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("principal %q is an agent; agents may not call %s", p.Name, path))
	case rule.Caller == Agents && !p.IsAgent():
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("principal %q is not an agent; %s takes an agent certificate (organization %s)", p.Name, path, AgentOrganization))
	}
	return nil
}

// refuse answers a refused request in its protocol (Connect, gRPC,
// gRPC-Web), or as plain HTTP for other paths.
func (a *Authorizer) refuse(w http.ResponseWriter, r *http.Request, err error) {
	code := connect.CodeOf(err)
	if code == connect.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="slackline"`)
	}
	if a.errors.IsSupported(r) {
		_ = a.errors.Write(w, r, err)
		return
	}
	status := http.StatusForbidden
	switch code {
	case connect.CodeUnauthenticated:
		status = http.StatusUnauthorized
	case connect.CodeNotFound:
		status = http.StatusNotFound
	}
	var ce *connect.Error
	msg := err.Error()
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	http.Error(w, strings.TrimSpace(code.String()+": "+msg), status)
}

// Interceptor checks the actions whose objects are named in unary request
// messages (Rule.Objects). It needs Middleware in front of the handler; with
// a nil Authorizer it checks nothing.
func (a *Authorizer) Interceptor() connect.Interceptor { return interceptor{a} }

type interceptor struct{ a *Authorizer }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	if i.a == nil {
		return next
	}
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		rule, ok := Rules[req.Spec().Procedure]
		if !ok {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s has no authorization rule", req.Spec().Procedure))
		}
		if p := FromContext(ctx); rule.Action != "" && rule.Objects != nil && !(rule.Coordinator && p.IsCoordinator()) {
			for _, object := range rule.Objects(req.Any()) {
				if !i.a.Allowed(p, rule.Action, object) {
					return nil, Denied(p, rule.Action, object)
				}
			}
		}
		return next(ctx, req)
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler checks nothing more: streaming procedures have no
// Objects (a test checks), their handlers authorize.
func (interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
