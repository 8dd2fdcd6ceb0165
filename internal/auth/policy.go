package auth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/slackline/slackline/resources"
)

// Action is something a principal may be allowed to do; the names follow
// Mesos's ACLs.
type Action string

// Actions. Each takes the object named in its comment (the key of its rules
// in the authorization file), or none.
const (
	// RegisterFrameworks: subscribe a framework in a role (roles).
	RegisterFrameworks Action = "register_frameworks"
	// RunTasks: launch tasks as a Unix user (users). Checked for the
	// framework's principal.
	RunTasks Action = "run_tasks"
	// RunUnconfinedTasks: launch tasks without the agent's seccomp filter
	// (TaskInfo.seccomp_unconfined). Checked for the framework's principal.
	RunUnconfinedTasks Action = "run_unconfined_tasks"
	// TeardownFrameworks: fail over to, act as, or tear down the frameworks
	// of other principals (framework_principals). A framework's own
	// principal needs no grant.
	TeardownFrameworks Action = "teardown_frameworks"
	// UpdateWeights: set roles' weights (roles).
	UpdateWeights Action = "update_weights"
	// UpdateQuotas: set roles' quota (roles).
	UpdateQuotas Action = "update_quotas"
	// UpdateMaintenanceSchedules: replace the maintenance schedule.
	UpdateMaintenanceSchedules Action = "update_maintenance_schedules"
	// StartMaintenances: take machines DOWN (machines: hostnames or IPs).
	StartMaintenances Action = "start_maintenances"
	// StopMaintenances: bring machines UP (machines).
	StopMaintenances Action = "stop_maintenances"
	// ViewFrameworks: see frameworks of these principals (framework_principals).
	// A principal always sees its own.
	ViewFrameworks Action = "view_frameworks"
	// ViewTasks: see tasks of frameworks of these principals
	// (framework_principals). A principal always sees its own.
	ViewTasks Action = "view_tasks"
	// ViewRoles: see roles (roles).
	ViewRoles Action = "view_roles"
	// ViewAgents: see agents, and read an agent's NodeService (containers,
	// usage, estimate, corrections, features).
	ViewAgents Action = "view_agents"
	// ViewMaintenance: read the maintenance schedule and status.
	ViewMaintenance Action = "view_maintenance"
	// AccessSandboxes: read the sandboxes of tasks of frameworks of these
	// principals (framework_principals). A framework's own principal needs
	// no grant.
	AccessSandboxes Action = "access_sandboxes"
	// RegisterAgents: register an agent with a hostname (hostnames; the
	// keyword self means the hostnames in the caller's agent certificate).
	RegisterAgents Action = "register_agents"
	// ViewMetrics: read /metrics.
	ViewMetrics Action = "view_metrics"
	// ViewAPI: use gRPC server reflection.
	ViewAPI Action = "view_api"
	// DebugProcesses: read the Go runtime profiles (CPU, heap, goroutines,
	// execution traces) of a coordinator or agent started with --pprof.
	DebugProcesses Action = "debug_processes"
	// SubmitJobs: submit jobs to the job service in a role (roles).
	SubmitJobs Action = "submit_jobs"
	// ViewJobs: see the jobs other principals submitted to the job service
	// (owners). A principal always sees its own.
	ViewJobs Action = "view_jobs"
	// CancelJobs: cancel the jobs other principals submitted (owners). A
	// principal may always cancel its own.
	CancelJobs Action = "cancel_jobs"
	// ViewProfiles: see the node profiles, their rollouts and agents
	// (#29).
	ViewProfiles Action = "view_profiles"
	// UpdateProfiles: apply node profiles and start rollouts of them.
	UpdateProfiles Action = "update_profiles"
)

// objectKeys maps every action to the key of its object in a rule ("": the
// action has no object).
var objectKeys = map[Action]string{
	RegisterFrameworks:         "roles",
	RunTasks:                   "users",
	RunUnconfinedTasks:         "",
	TeardownFrameworks:         "framework_principals",
	UpdateWeights:              "roles",
	UpdateQuotas:               "roles",
	UpdateMaintenanceSchedules: "",
	StartMaintenances:          "machines",
	StopMaintenances:           "machines",
	ViewFrameworks:             "framework_principals",
	ViewTasks:                  "framework_principals",
	ViewRoles:                  "roles",
	ViewAgents:                 "",
	ViewMaintenance:            "",
	AccessSandboxes:            "framework_principals",
	RegisterAgents:             "hostnames",
	ViewMetrics:                "",
	ViewAPI:                    "",
	DebugProcesses:             "",
	SubmitJobs:                 "roles",
	ViewJobs:                   "owners",
	CancelJobs:                 "owners",
	ViewProfiles:               "",
	UpdateProfiles:             "",
}

// Actions returns every action, sorted.
func Actions() []Action {
	out := make([]Action, 0, len(objectKeys))
	for a := range objectKeys {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// ObjectKey returns the key of an action's object in the authorization
// file, "" when it has none.
func ObjectKey(a Action) string { return objectKeys[a] }

// Policy is a parsed authorization file:
//
//	version: 1
//	principals:                 # token principals; certificates need no entry
//	  batch: {token_sha256: 9f86d0...}
//	acls:
//	  register_frameworks:
//	    - principals: [batch]
//	      roles: [batch]
//	  register_agents:
//	    - principals: agents    # any agent certificate
//	      hostnames: self       # ... as the hostnames its certificate names
//	      max_resources: "cpus:256;mem:2097152;disk:67108864;bandwidth:100000;ports:[1-65535]"
//
// A rule's principals are a list of names or one of the keywords any (every
// authenticated principal) and agents (every agent certificate). Its
// objects are a list or the keyword any; hostnames and machines entries may
// be shell patterns ("sim-*", matched with path.Match), since hostnames
// never contain pattern characters; roles, users and principals match
// exactly. An action is allowed when one of its rules matches both the
// principal and the object; nothing else is.
//
// A register_agents rule may cap the resources an agent registers with
// under it: max_resources is a resources text (a resource it does not name
// is capped at zero) or the keyword unlimited. A rule without the key is
// uncapped, as before the key existed; Warnings names such rules.
type Policy struct {
	tokens []tokenEntry
	acls   map[Action][]rule
	// warnings are what the file allows that the operator should know.
	warnings []string
}

// rule is one entry of an action's list.
type rule struct {
	principals matcher
	objects    matcher // zero for actions without an object
	// maxResources caps an agent's resources (register_agents only); nil:
	// uncapped (unlimited, or the key absent).
	maxResources *resources.Resources
}

// MaxResourcesKey is the key of a register_agents rule's resource cap.
const MaxResourcesKey = "max_resources"

// Unlimited is the max_resources keyword for no cap.
const Unlimited = "unlimited"

// matcher is a list of names or a keyword.
type matcher struct {
	any, agents, self bool
	names             []string
	patterns          bool // names are path.Match patterns
}

func (m matcher) matchPrincipal(p *Principal) bool {
	switch {
	case p == nil:
		return false
	case m.any:
		return true
	case m.agents:
		return p.IsAgent()
	}
	return slices.Contains(m.names, p.Name)
}

func (m matcher) matchObject(p *Principal, object string) bool {
	switch {
	case m.any:
		return true
	case m.self:
		return p.Certifies(object)
	case m.patterns:
		for _, pattern := range m.names {
			if ok, _ := path.Match(pattern, object); ok {
				return true
			}
		}
		return false
	}
	return slices.Contains(m.names, object)
}

// Allowed reports whether p may perform action on object ("" for actions
// without one). A nil principal is allowed nothing.
func (pol *Policy) Allowed(p *Principal, action Action, object string) bool {
	if p == nil {
		return false
	}
	key, known := objectKeys[action]
	if !known {
		return false
	}
	for _, r := range pol.acls[action] {
		if r.principals.matchPrincipal(p) && (key == "" || r.objects.matchObject(p, object)) {
			return true
		}
	}
	return false
}

// ErrOverResourceCap is wrapped by CheckAgentResources' error when every
// register_agents rule that allows the registration caps its resources
// below what the agent registers with.
var ErrOverResourceCap = errors.New("agent resources beyond the register_agents max_resources")

// CheckAgentResources returns nil when p may register an agent as hostname
// with total: some register_agents rule allows p on hostname without a cap,
// or with a max_resources that contains total (like Allowed, the most
// generous rule wins). When rules allow p on hostname but all cap below
// total, the error wraps ErrOverResourceCap and names the first such cap and
// the resources beyond it. It does not repeat Allowed: when no rule allows p
// on hostname it returns nil (the caller checks register_agents first).
func (pol *Policy) CheckAgentResources(p *Principal, hostname string, total resources.Resources) error {
	var first *resources.Resources
	for _, r := range pol.acls[RegisterAgents] {
		if !r.principals.matchPrincipal(p) || !r.objects.matchObject(p, hostname) {
			continue
		}
		if r.maxResources == nil || r.maxResources.Contains(total) {
			return nil
		}
		if first == nil {
			first = r.maxResources
		}
	}
	if first == nil {
		return nil
	}
	return fmt.Errorf("%w: principal %q may register agents with at most %s (%s %s), agent_info.resources %s exceed it by %s",
		ErrOverResourceCap, p.String(), capText(*first), RegisterAgents, MaxResourcesKey, total, total.Sub(total.Min(*first)))
}

// capText prints a cap; an empty one is "nothing".
func capText(r resources.Resources) string {
	if r.IsEmpty() {
		return "nothing"
	}
	return r.String()
}

// Warnings returns what the policy allows that an operator should know
// about, one sentence each: register_agents rules without max_resources
// (agents they allow may register any resources).
func (pol *Policy) Warnings() []string { return slices.Clone(pol.warnings) }

// ParsePolicy parses an authorization file. Unknown keys, actions and
// keywords are errors, so that a typo cannot grant or deny silently.
func ParsePolicy(data []byte) (*Policy, error) {
	var file struct {
		Version    int `yaml:"version"`
		Principals map[string]struct {
			TokenSHA256 string `yaml:"token_sha256"`
		} `yaml:"principals"`
		ACLs map[string][]map[string]yaml.Node `yaml:"acls"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("parse authorization file: %w", err)
	}
	if file.Version != 1 {
		return nil, fmt.Errorf("authorization file: version %d is not supported (want 1)", file.Version)
	}
	pol := &Policy{acls: map[Action][]rule{}}
	names := make([]string, 0, len(file.Principals))
	for name := range file.Principals {
		names = append(names, name)
	}
	slices.Sort(names)
	seen := map[string]string{}
	for _, name := range names {
		if err := validPrincipalName(name); err != nil {
			return nil, fmt.Errorf("authorization file: principals: %w", err)
		}
		hash, err := hex.DecodeString(file.Principals[name].TokenSHA256)
		if err != nil || len(hash) != 32 {
			return nil, fmt.Errorf("authorization file: principal %q: token_sha256 must be 64 hex digits (the SHA-256 of the token)", name)
		}
		if other, dup := seen[string(hash)]; dup {
			return nil, fmt.Errorf("authorization file: principals %q and %q have the same token", other, name)
		}
		seen[string(hash)] = name
		pol.tokens = append(pol.tokens, tokenEntry{principal: name, hash: [32]byte(hash)})
	}
	for name, entries := range file.ACLs {
		action := Action(name)
		key, known := objectKeys[action]
		if !known {
			return nil, fmt.Errorf("authorization file: unknown action %q (known: %s)", name, actionList())
		}
		for i, entry := range entries {
			r, err := parseRule(action, key, entry)
			if err != nil {
				return nil, fmt.Errorf("authorization file: %s[%d]: %w", name, i, err)
			}
			pol.acls[action] = append(pol.acls[action], r)
			if _, capped := entry[MaxResourcesKey]; action == RegisterAgents && !capped {
				pol.warnings = append(pol.warnings, fmt.Sprintf(
					"authorization file: %s[%d] has no %s: the agents it allows may register any resources (write %s: unlimited to say so, or a cap)",
					name, i, MaxResourcesKey, MaxResourcesKey))
			}
		}
	}
	slices.Sort(pol.warnings)
	return pol, nil
}

func parseRule(action Action, objectKey string, entry map[string]yaml.Node) (rule, error) {
	var r rule
	node, ok := entry["principals"]
	if !ok {
		return r, errors.New("principals is missing")
	}
	var err error
	if r.principals, err = parseMatcher(&node, "any", "agents"); err != nil {
		return r, fmt.Errorf("principals: %w", err)
	}
	for key, node := range entry {
		switch {
		case key == "principals":
		case key == MaxResourcesKey && action == RegisterAgents:
			if r.maxResources, err = parseMaxResources(&node); err != nil {
				return r, fmt.Errorf("%s: %w", key, err)
			}
		case key == MaxResourcesKey:
			return r, fmt.Errorf("%s: only %s rules take it", key, RegisterAgents)
		case key == objectKey:
			keywords := []string{"any"}
			if action == RegisterAgents {
				keywords = append(keywords, "self")
			}
			if r.objects, err = parseMatcher(&node, keywords...); err != nil {
				return r, fmt.Errorf("%s: %w", key, err)
			}
			r.objects.patterns = key == "hostnames" || key == "machines"
		case objectKey == "":
			return r, fmt.Errorf("%s: %s takes no object", key, action)
		default:
			return r, fmt.Errorf("%s: the object of %s is %s", key, action, objectKey)
		}
	}
	if _, ok := entry[objectKey]; objectKey != "" && !ok {
		return r, fmt.Errorf("%s is missing (a list, or any)", objectKey)
	}
	return r, nil
}

// parseMaxResources reads a resource cap: a resources text, or unlimited
// (nil).
func parseMaxResources(node *yaml.Node) (*resources.Resources, error) {
	if node.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("want a resources text like \"cpus:64;mem:262144\", or %s", Unlimited)
	}
	if node.Value == Unlimited {
		return nil, nil
	}
	res, err := resources.Parse(node.Value)
	if err != nil {
		return nil, fmt.Errorf("%q: %w (or %s)", node.Value, err, Unlimited)
	}
	if res.IsEmpty() {
		return nil, fmt.Errorf("%q caps every resource at zero: name the resources an agent may register, or %s", node.Value, Unlimited)
	}
	return &res, nil
}

// parseMatcher reads a list of names or one of the keywords.
func parseMatcher(node *yaml.Node, keywords ...string) (matcher, error) {
	var m matcher
	switch node.Kind {
	case yaml.ScalarNode:
		if !slices.Contains(keywords, node.Value) {
			return m, fmt.Errorf("%q: want a list or one of %s", node.Value, strings.Join(keywords, ", "))
		}
		m.any, m.agents, m.self = node.Value == "any", node.Value == "agents", node.Value == "self"
		return m, nil
	case yaml.SequenceNode:
		if err := node.Decode(&m.names); err != nil {
			return m, err
		}
		for _, n := range m.names {
			if n == "" {
				return m, errors.New("empty name in the list")
			}
		}
		return m, nil
	}
	return m, errors.New("want a list or a keyword")
}

// validPrincipalName checks a token principal's name.
func validPrincipalName(name string) error {
	switch {
	case name == "" || len(name) > 128:
		return fmt.Errorf("principal name %q must be 1 to 128 bytes", name)
	case strings.HasPrefix(name, AgentPrefix):
		return fmt.Errorf("principal %q: names starting with %q are agents' (certificates only)", name, AgentPrefix)
	case strings.HasPrefix(name, CoordinatorPrefix):
		return fmt.Errorf("principal %q: names starting with %q are the coordinator's (certificates only)", name, CoordinatorPrefix)
	case strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("principal name %q has spaces or control characters", name)
	}
	return nil
}

func actionList() string {
	names := make([]string, 0, len(objectKeys))
	for _, a := range Actions() {
		names = append(names, string(a))
	}
	return strings.Join(names, ", ")
}

// LoadPolicy reads and parses an authorization file.
func LoadPolicy(file string) (*Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read authorization file: %w", err)
	}
	pol, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return pol, nil
}
