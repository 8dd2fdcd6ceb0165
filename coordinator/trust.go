package coordinator

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"net"
	"net/url"
	"slices"
	"sync"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/resources"
)

// Trust: the checks that need the coordinator's state. Authentication and
// the checks a request alone decides are internal/auth's (its Rules say
// which handler checks what); here a framework id is bound to the principal
// that registered it, an agent acts only as a host it may register as and
// only on tasks it was given, and views show what the caller may see.

// launchKeyName is the registry key of the launch-proof key.
const launchKeyName = "launch-proof-key"

// loadLaunchKey returns the key launch proofs are made with, creating and
// persisting it on the coordinator's first start. It lives in the registry
// so that a restarted coordinator (or, with a shared store, another one)
// verifies the proofs the previous one made.
func loadLaunchKey(ctx context.Context, st store.Store) ([]byte, error) {
	secrets, err := st.Load(ctx, store.BucketSecrets)
	if err != nil {
		return nil, err
	}
	if key := secrets[launchKeyName]; len(key) == sha256.Size {
		return key, nil
	}
	key := make([]byte, sha256.Size)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := st.Apply(ctx, store.Put(store.BucketSecrets, launchKeyName, key)); err != nil {
		return nil, fmt.Errorf("persist launch-proof key: %w", err)
	}
	return key, nil
}

// launchMAC makes launch proofs under one key. Its HMAC states are pooled:
// a reset HMAC restores its keyed state instead of hashing the key's pads
// again, and a proof's fields go to it in one write from a reused buffer,
// so that a proof costs its message's SHA-256 blocks and no allocation but
// its result (a registration of thousands of tasks verifies one proof per
// task).
type launchMAC struct {
	key  []byte
	pool sync.Pool // of *launchHasher
}

// launchHasher is one pooled HMAC with its message buffer.
type launchHasher struct {
	mac hash.Hash
	buf []byte
}

// maxPooledLaunchMessage bounds the buffer a pooled hasher keeps: a larger
// one (a task with a very long id or many port ranges) is dropped after
// use rather than held by the pool.
const maxPooledLaunchMessage = 4 << 10

func newLaunchMAC(key []byte) *launchMAC {
	return &launchMAC{key: key}
}

// launchProof is the MAC of a task as launched: on which host, for which
// framework (id and principal), its id and its resources. The agent keeps it
// in the task's TaskInfo and reports it when it re-registers; it cannot
// make one for a task the coordinator did not launch on its host, or with
// other resources. Each field is MACed after its length (8 bytes, big
// endian), so that no two tasks' fields make the same message.
func launchProof(m *launchMAC, hostname, frameworkID, principal, taskID, role string, regular, revocable resources.Resources) []byte {
	h, _ := m.pool.Get().(*launchHasher)
	if h == nil {
		h = &launchHasher{mac: hmac.New(sha256.New, m.key)}
	} else {
		h.mac.Reset()
	}
	b := h.buf[:0]
	for _, field := range [...]string{"slackline launch v1", hostname, frameworkID, principal, taskID, role, regular.String(), revocable.String()} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(field)))
		b = append(b, field...)
	}
	h.mac.Write(b)
	sum := h.mac.Sum(make([]byte, 0, sha256.Size))
	if cap(b) <= maxPooledLaunchMessage {
		h.buf = b
		m.pool.Put(h)
	}
	return sum
}

// provenLaunch reports whether a task an agent on hostname reports carries
// the proof of its launch there, for the framework's principal and with
// the resources it reports.
func (c *Coordinator) provenLaunch(hostname, principal string, r reportedTask) bool {
	want := launchProof(c.launchKey, hostname, r.frameworkID, principal, r.info.GetTaskId(), r.role, r.resources, r.revocable)
	return hmac.Equal(want, r.info.GetLaunchProof())
}

// mayActFor reports whether the caller in ctx may act as fw: it is the
// principal fw is bound to, or is granted teardown_frameworks on it.
func (c *Coordinator) mayActFor(ctx context.Context, fw *framework) bool {
	authz := c.cfg.Authz
	if !authz.Enabled() {
		return true
	}
	p := auth.FromContext(ctx)
	return p != nil && (p.Name == fw.info.GetPrincipal() || authz.Allowed(p, auth.TeardownFrameworks, fw.info.GetPrincipal()))
}

// actAsError refuses a caller acting for a framework bound to another
// principal.
func (c *Coordinator) actAsError(ctx context.Context, fw *framework) error {
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"framework %q belongs to principal %q: principal %q is not allowed %s on it",
		fw.id(), fw.info.GetPrincipal(), auth.FromContext(ctx).String(), auth.TeardownFrameworks))
}

// principalOf is the principal a new framework of info will be bound to
// (bindPrincipal): the caller's with authorization on, whatever info
// names (a mismatch is refused), else info's. It takes no lock and
// changes nothing, so that subscribe chooses the turn of the principal
// whose count it checks before it binds.
func (c *Coordinator) principalOf(ctx context.Context, info *slacklinev1.FrameworkInfo) string {
	if !c.cfg.Authz.Enabled() {
		return info.GetPrincipal()
	}
	return auth.FromContext(ctx).String()
}

// bindPrincipal binds a subscribing framework to its caller: a new
// framework to the caller, which must be allowed register_frameworks in
// each of its roles; a failover keeps the framework's principal and needs
// the caller to be it or be allowed teardown_frameworks on it. info must be
// normalized (roles set). Caller holds c.mu.
func (c *Coordinator) bindPrincipal(ctx context.Context, info *slacklinev1.FrameworkInfo) error {
	authz := c.cfg.Authz
	if !authz.Enabled() {
		return nil
	}
	p := auth.FromContext(ctx)
	if fw := c.frameworks[info.GetId()]; fw != nil {
		if !c.mayActFor(ctx, fw) {
			return c.actAsError(ctx, fw)
		}
		info.Principal = fw.info.GetPrincipal()
	} else {
		if info.GetPrincipal() != "" && info.GetPrincipal() != p.String() {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
				"framework_info.principal %q is not the caller's principal %q", info.GetPrincipal(), p.String()))
		}
		info.Principal = p.String()
	}
	for _, role := range info.GetRoles() {
		if !authz.Allowed(p, auth.RegisterFrameworks, role) {
			return auth.Denied(p, auth.RegisterFrameworks, role)
		}
	}
	return nil
}

// runAs returns the user a task runs as — its own, else its framework's
// ("" leaves the choice to the agent's unprivileged default) — after
// checking that the framework's principal may run tasks as that user.
func (c *Coordinator) runAs(fw *framework, info *slacklinev1.TaskInfo) (string, error) {
	user := cmp.Or(info.GetUser(), fw.info.GetUser())
	authz := c.cfg.Authz
	if user == "" || !authz.Enabled() {
		return user, nil
	}
	p := &auth.Principal{Name: fw.info.GetPrincipal()}
	if !authz.Allowed(p, auth.RunTasks, user) {
		return "", auth.Denied(p, auth.RunTasks, user)
	}
	return user, nil
}

// mayRunUnconfined checks that a task asking to run without the agent's
// seccomp filter is its framework principal's to ask (run_unconfined_tasks).
func (c *Coordinator) mayRunUnconfined(fw *framework, info *slacklinev1.TaskInfo) error {
	authz := c.cfg.Authz
	if !info.GetSeccompUnconfined() || !authz.Enabled() {
		return nil
	}
	p := &auth.Principal{Name: fw.info.GetPrincipal()}
	if !authz.Allowed(p, auth.RunUnconfinedTasks, "") {
		return auth.Denied(p, auth.RunUnconfinedTasks, "")
	}
	return nil
}

// mayView reports whether the caller in ctx may see frameworks of a
// principal (action ViewFrameworks) or their tasks (ViewTasks): its own
// always.
func (c *Coordinator) mayView(ctx context.Context, action auth.Action, principal string) bool {
	authz := c.cfg.Authz
	if !authz.Enabled() {
		return true
	}
	p := auth.FromContext(ctx)
	return p != nil && (p.Name == principal || authz.Allowed(p, action, principal))
}

// principalOfFramework returns the principal a framework is bound to.
// Caller holds c.mu.
func (c *Coordinator) principalOfFramework(id string) string {
	if fw := c.frameworks[id]; fw != nil {
		return fw.info.GetPrincipal()
	}
	return ""
}

// visibleState removes from a state what the caller in ctx may not see:
// agents without view_agents (but those of its visible tasks); frameworks, tasks and the framework ids of
// roles without view_frameworks or view_tasks on their principal (unless
// they are the caller's); roles without view_roles. Nil parts stay nil.
// Caller holds c.mu.
func (c *Coordinator) visibleState(ctx context.Context, s *slacklinev1.GetStateResponse) *slacklinev1.GetStateResponse {
	authz := c.cfg.Authz
	if !authz.Enabled() {
		return s
	}
	p := auth.FromContext(ctx)
	if !authz.Allowed(p, auth.ViewAgents, "") {
		// The agents of the tasks the caller may see, so that it can reach
		// their sandboxes.
		hosting := map[string]bool{}
		for _, fw := range c.frameworks {
			if !c.mayView(ctx, auth.ViewTasks, fw.info.GetPrincipal()) {
				continue
			}
			for t := range c.core.FrameworkTasks(fw.id()) {
				hosting[t.AgentID] = true
			}
			for _, t := range c.core.Completed(fw.id()) {
				hosting[t.AgentID] = true
			}
		}
		s.Agents = slices.DeleteFunc(s.Agents, func(a *slacklinev1.Agent) bool { return !hosting[a.GetId()] })
	}
	s.Frameworks = slices.DeleteFunc(s.Frameworks, func(f *slacklinev1.Framework) bool {
		return !c.mayView(ctx, auth.ViewFrameworks, f.GetInfo().GetPrincipal())
	})
	s.Tasks = slices.DeleteFunc(s.Tasks, func(t *slacklinev1.Task) bool {
		return !c.mayView(ctx, auth.ViewTasks, c.principalOfFramework(t.GetFrameworkId()))
	})
	s.Roles = slices.DeleteFunc(s.Roles, func(r *slacklinev1.Role) bool { return !authz.Allowed(p, auth.ViewRoles, r.GetName()) })
	for _, r := range s.Roles {
		r.FrameworkIds = slices.DeleteFunc(slices.Clone(r.FrameworkIds), func(id string) bool {
			return !c.mayView(ctx, auth.ViewFrameworks, c.principalOfFramework(id))
		})
	}
	return s
}

// MayReadSandbox implements ui.SandboxAuthorizer for the node proxy's
// ReadSandboxFile (slacklinectl logs): the caller in ctx may read the
// sandbox of task taskID of framework frameworkID on agent agentID when
// that task, live or completed, is known there and the caller is the
// framework's principal or has access_sandboxes on it. The proxy then
// calls the agent with the coordinator's own identity, which the agent
// trusts to have checked. Every refusal is the same permission_denied,
// whether the task exists or not, so that it tells nothing GetTasks does
// not.
func (s operatorService) MayReadSandbox(ctx context.Context, agentID, frameworkID, taskID string) error {
	c := s.c
	authz := c.cfg.Authz
	if !authz.Enabled() {
		return nil
	}
	refused := connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"task %q of framework %q on agent %q: no task whose sandbox you may read (its framework's principal, or access_sandboxes on that principal)",
		taskID, frameworkID, agentID))
	p := auth.FromContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	fw := c.frameworks[frameworkID]
	if p == nil || fw == nil {
		return refused
	}
	principal := fw.info.GetPrincipal()
	if !(principal != "" && p.Name == principal) && !authz.Allowed(p, auth.AccessSandboxes, principal) {
		return refused
	}
	if t := c.core.Task(frameworkID, taskID); t != nil && t.AgentID == agentID {
		return nil
	}
	for _, t := range c.core.Completed(frameworkID) {
		if t.Info.GetTaskId() == taskID && t.AgentID == agentID {
			return nil
		}
	}
	return refused
}

// mayRegisterAs checks that the agent calling in ctx may register as
// hostname (register_agents).
func (c *Coordinator) mayRegisterAs(ctx context.Context, hostname string) error {
	return c.cfg.Authz.Check(ctx, auth.RegisterAgents, hostname)
}

// checkAgentIdentity refuses a registration under an agent id registered
// with another hostname: an agent's id stays bound to the host (and so the
// certificate) that registered it. (previous_agent_id of another host is
// ignored by core.PlanRegistration.) Caller holds c.mu.
func (c *Coordinator) checkAgentIdentity(reg registration) error {
	if !c.cfg.Authz.Enabled() {
		return nil
	}
	if a := c.agents[reg.info.GetId()]; a != nil && a.Info.GetHostname() != reg.info.GetHostname() {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"agent %q is registered with hostname %q, not %q: start the agent with an empty work dir to register anew",
			a.ID, a.Info.GetHostname(), reg.info.GetHostname()))
	}
	return nil
}

// checkSessionCaller refuses an agent call (heartbeat, stream, update,
// estimate) from a caller that may not act as the session's host.
func (c *Coordinator) checkSessionCaller(ctx context.Context, a *agent) error {
	return c.mayRegisterAs(ctx, a.Info.GetHostname())
}

// trustedEndpoint returns the NodeService endpoint to publish for an agent.
// With authorization on, an agent connected with its certificate, which
// also serves its NodeService: the endpoint is https, at the claimed port
// of the address the agent connected from (peer), so that an agent cannot
// point operators and the coordinator elsewhere; clients verify the
// agent's certificate for its registered hostname, not for the address. A
// claim that is not https (or not a URL with a port) publishes nothing:
// nothing is ever sent to an agent in clear text. The second result says
// why an endpoint was dropped ("" when it was not).
func (c *Coordinator) trustedEndpoint(claimed, peer string) (endpoint, dropped string) {
	if !c.cfg.Authz.Enabled() || claimed == "" {
		return claimed, ""
	}
	u, err := url.Parse(claimed)
	switch {
	case err != nil:
		return "", fmt.Sprintf("not a URL: %v", err)
	case u.Scheme != "https":
		return "", fmt.Sprintf("scheme %q: with authorization, agents' NodeService endpoints must be https (serve it with --cert and --key)", u.Scheme)
	case u.Port() == "":
		return "", "no port"
	}
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return "", fmt.Sprintf("peer address %q: %v", peer, err)
	}
	u.Host = net.JoinHostPort(host, u.Port())
	u.Path, u.RawQuery, u.Fragment, u.User, u.RawPath = "", "", "", nil, ""
	return u.String(), ""
}

// taskOwner returns the id of the agent a framework's task is on: a's when
// a reported it with a valid launch proof on registering, else the live
// task's, else the last completed one's. known is false when the
// coordinator knows no such task.
func (c *Coordinator) taskOwner(a *agent, fw *framework, taskID string) (owner string, known bool) {
	if c.core.Reported(a.ID, core.TaskKey{FrameworkID: fw.id(), TaskID: taskID}) {
		return a.ID, true
	}
	if t := c.core.Task(fw.id(), taskID); t != nil {
		return t.AgentID, true
	}
	if t := c.core.CompletedTask(fw.id(), taskID); t != nil {
		return t.AgentID, true
	}
	return "", false
}

// trustReport decides whether a task a registering agent reports is one
// the coordinator gave it: a task it knows must be on this agent with the
// resources it was launched with; one it does not know (it restarted, or
// forgot the task) must carry the launch proof for this host. Caller holds
// c.mu.
func (c *Coordinator) trustReport(a *agent, r reportedTask) bool {
	fw := c.frameworks[r.frameworkID]
	principal := r.framework.GetPrincipal()
	if fw != nil {
		if t := c.core.Task(fw.id(), r.info.GetTaskId()); t != nil {
			return t.AgentID == a.ID && t.Resources.Equal(r.resources) && t.Revocable.Equal(r.revocable)
		}
		principal = fw.info.GetPrincipal()
	}
	return c.provenLaunch(a.Info.GetHostname(), principal, r)
}
