package coordinator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/imageref"
	"github.com/slackline/slackline/internal/taskspec"
	"github.com/slackline/slackline/resources"
)

// maxUpdatesPerCall and maxAcknowledgementsPerCall bound a batch of
// UpdateStatus and Acknowledge (#30), as maxTasksPerAccept bounds an
// Accept; the request size limit bounds it too. Agents and the SDK send
// at most 256 per call.
const (
	maxUpdatesPerCall          = 10000
	maxAcknowledgementsPerCall = 10000
)

// Limits on request contents, on top of the transport's message size limit.
const (
	maxIDLength        = 255
	maxRoles           = 64
	maxTasksPerAccept  = 10000
	maxOffersPerCall   = 10000
	maxLabels          = 64
	maxLabelLength     = 4096
	maxCommandLength   = 64 << 10
	maxNameLength      = 1024
	maxHostnameLength  = 253
	maxUserLength      = 32
	maxFailoverSeconds = 365 * 24 * 3600
	defaultRole        = "*"
)

var errInvalid = errors.New("invalid argument")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, args...)...)
}

// validateID checks an id given by a client (task ids, agent ids): 1 to
// maxIDLength bytes of printable ASCII without spaces and '/', never "." or
// ".." (ids name files and cgroups).
func validateID(kind, id string) error {
	if id == "" {
		return invalidf("%s is empty", kind)
	}
	if len(id) > maxIDLength {
		return invalidf("%s %.32q... is longer than %d bytes", kind, id, maxIDLength)
	}
	for _, r := range id {
		if r <= ' ' || r == '/' || r == 0x7f || r > 0x7e {
			return invalidf("%s %q contains %q (allowed: printable ASCII without spaces and '/')", kind, id, r)
		}
	}
	if id == "." || id == ".." {
		return invalidf("%s %q is not an id", kind, id)
	}
	return nil
}

// validateHostname checks an agent's hostname as RFC 1123 has it: labels
// of 1 to 63 letters, digits and '-' (not first or last), joined by dots,
// at most maxHostnameLength bytes.
func validateHostname(kind, host string) error {
	if host == "" || len(host) > maxHostnameLength {
		return invalidf("%s %.64q must be 1 to %d bytes", kind, host, maxHostnameLength)
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return invalidf("%s %q has an invalid label %q (want 1 to 63 characters, not starting or ending with '-')", kind, host, label)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return invalidf("%s %q contains %q (allowed: letters, digits, '-', and '.' between labels)", kind, host, r)
			}
		}
	}
	return nil
}

// validateText checks a human-readable string from a client (names, label
// keys and values, attribute names): valid UTF-8 of at most max bytes,
// without control characters, so nothing printed from it can steer a
// terminal (escape sequences begin with one).
func validateText(kind, text string, max int) error {
	if len(text) > max {
		return invalidf("%s %.32q... is longer than %d bytes", kind, text, max)
	}
	if !utf8.ValidString(text) {
		return invalidf("%s %q is not valid UTF-8", kind, text)
	}
	for _, r := range text {
		if unicode.IsControl(r) {
			return invalidf("%s %q contains the control character %U", kind, text, r)
		}
	}
	return nil
}

// validateUser checks the Unix user a task runs as: a portable user name,
// 1 to maxUserLength letters, digits, '.', '_' and '-', not starting with
// '-'. Whether the user exists is the agent's to say.
func validateUser(kind, user string) error {
	if user == "" || len(user) > maxUserLength || user[0] == '-' {
		return invalidf("%s %q must be 1 to %d characters, not starting with '-'", kind, user, maxUserLength)
	}
	for _, r := range user {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return invalidf("%s %q contains %q (allowed: letters, digits, '.', '_', '-')", kind, user, r)
		}
	}
	return nil
}

// validateRole checks a role name: "*" or a path of components like
// "eng/web" made of letters, digits, '-', '_' and '.', never "." or "..".
func validateRole(role string) error {
	if role == defaultRole {
		return nil
	}
	if role == "" || len(role) > maxIDLength {
		return invalidf("role %q must be \"*\" or a path like \"eng/web\" of at most %d bytes", role, maxIDLength)
	}
	for part := range strings.SplitSeq(role, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, "-") {
			return invalidf("role %q has an invalid component %q", role, part)
		}
		for _, r := range part {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return invalidf("role %q contains %q (allowed: letters, digits, '-', '_', '.', and '/' between components)", role, r)
			}
		}
	}
	return nil
}

// normalizeFrameworkInfo validates a FrameworkInfo from Subscribe and fills
// defaults (roles ["*"]). It returns a copy.
func normalizeFrameworkInfo(info *slacklinev1.FrameworkInfo) (*slacklinev1.FrameworkInfo, error) {
	if info == nil {
		return nil, invalidf("framework_info is required")
	}
	out := proto.CloneOf(info)
	if out.GetName() == "" {
		return nil, invalidf("framework_info.name is empty")
	}
	if err := validateText("framework_info.name", out.GetName(), maxNameLength); err != nil {
		return nil, err
	}
	if err := validateText("framework_info.hostname", out.GetHostname(), maxHostnameLength); err != nil {
		return nil, err
	}
	if u := out.GetUser(); u != "" {
		if err := validateUser("framework_info.user", u); err != nil {
			return nil, err
		}
	}
	if out.GetId() != "" {
		if err := validateID("framework_info.id", out.GetId()); err != nil {
			return nil, err
		}
	}
	if len(out.Roles) == 0 {
		out.Roles = []string{defaultRole}
	}
	if len(out.Roles) > maxRoles {
		return nil, invalidf("framework_info.roles has %d roles, at most %d allowed", len(out.Roles), maxRoles)
	}
	seen := map[string]bool{}
	for _, role := range out.Roles {
		if err := validateRole(role); err != nil {
			return nil, err
		}
		if seen[role] {
			return nil, invalidf("framework_info.roles lists %q twice", role)
		}
		seen[role] = true
	}
	ft := out.GetFailoverTimeoutSeconds()
	if math.IsNaN(ft) || ft < 0 || ft > maxFailoverSeconds {
		return nil, invalidf("framework_info.failover_timeout_seconds %v must be between 0 and %d", ft, maxFailoverSeconds)
	}
	for _, c := range out.GetCapabilities() {
		if _, ok := slacklinev1.FrameworkCapability_name[int32(c)]; !ok || c == slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_UNSPECIFIED {
			return nil, invalidf("framework_info.capabilities has unknown capability %d", int32(c))
		}
	}
	return out, nil
}

func hasCapability(info *slacklinev1.FrameworkInfo, c slacklinev1.FrameworkCapability) bool {
	return slices.Contains(info.GetCapabilities(), c)
}

// refuseSeconds returns the filter duration in seconds: unset means 5 s.
func refuseSeconds(f *slacklinev1.Filters) (float64, error) {
	if f == nil || f.RefuseSeconds == nil {
		return 5, nil
	}
	v := f.GetRefuseSeconds()
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, invalidf("filters.refuse_seconds %v must be a finite number >= 0", v)
	}
	return min(v, maxFailoverSeconds), nil
}

// offeredPool is what the accepted offers hold together: regular and
// revocable resources apart (offers never mix them, but one Accept may name a
// regular and a revocable offer of the same agent, so that a task runs on
// revocable cpus with regular memory, as in Mesos).
type offeredPool struct {
	agentID   string
	role      string
	regular   resources.Resources
	revocable resources.Resources
}

// launchRejection is a task that cannot be launched, with its status.
type launchRejection struct {
	task    *slacklinev1.TaskInfo
	state   slacklinev1.TaskState
	reason  slacklinev1.Reason
	message string
}

// acceptedTask is a task that passed validation with its parsed resources.
type acceptedTask struct {
	info      *slacklinev1.TaskInfo
	regular   resources.Resources
	revocable resources.Resources
}

// validateLaunch checks the tasks of LAUNCH operations against the pool of
// accepted offers, one task after the other (each consumes what it uses).
// taskExists reports whether the framework already has a live task with an
// id. It never panics on any input: invalid tasks are returned as rejections
// with TASK_STATE_ERROR and a reason naming the fault.
func validateLaunch(pool offeredPool, tasks []*slacklinev1.TaskInfo, taskExists func(string) bool) ([]acceptedTask, []launchRejection) {
	var accepted []acceptedTask
	var rejected []launchRejection
	reject := func(t *slacklinev1.TaskInfo, format string, args ...any) {
		rejected = append(rejected, launchRejection{
			task: t, state: slacklinev1.TaskState_TASK_STATE_ERROR,
			reason: slacklinev1.Reason_REASON_TASK_INVALID, message: fmt.Sprintf(format, args...),
		})
	}
	seen := map[string]bool{}
	remaining, remainingRevocable := pool.regular, pool.revocable
	for _, t := range tasks {
		if t == nil {
			continue
		}
		id := t.GetTaskId()
		if err := validateID("task_id", id); err != nil {
			reject(t, "%v", trimInvalid(err))
			continue
		}
		if seen[id] || taskExists(id) {
			reject(t, "task id %q is already in use", id)
			continue
		}
		seen[id] = true
		if a := t.GetAgentId(); a != "" && a != pool.agentID {
			reject(t, "task agent_id %q differs from the offers' agent %q", a, pool.agentID)
			continue
		}
		if err := validateText("task name", t.GetName(), maxNameLength); err != nil {
			reject(t, "%v", trimInvalid(err))
			continue
		}
		if u := t.GetUser(); u != "" {
			if err := validateUser("task user", u); err != nil {
				reject(t, "task %q: %v", id, trimInvalid(err))
				continue
			}
		}
		if img := t.GetImage(); img != "" {
			if _, err := imageref.Parse(img); err != nil {
				reject(t, "task %q image: %v", id, err)
				continue
			}
		}
		cmd := t.GetCommand()
		// With an image, an empty command value runs the image's entrypoint and cmd.
		if cmd.GetValue() == "" && t.GetImage() == "" {
			reject(t, "task %q has no command value (and no image)", id)
			continue
		}
		if size := commandSize(cmd); size > maxCommandLength {
			reject(t, "task %q command is %d bytes, at most %d allowed", id, size, maxCommandLength)
			continue
		}
		if err := taskspec.Task(t); err != nil {
			reject(t, "task %q: %s", id, strings.TrimPrefix(err.Error(), taskspec.ErrInvalid.Error()+": "))
			continue
		}
		if len(t.GetLabels()) > maxLabels {
			reject(t, "task %q has %d labels, at most %d allowed", id, len(t.GetLabels()), maxLabels)
			continue
		}
		if msg := checkLabels(t.GetLabels()); msg != "" {
			reject(t, "task %q: %s", id, msg)
			continue
		}
		regular, revocable, err := resources.FromProto(t.GetResources())
		if err != nil {
			reject(t, "task %q resources: %v", id, err)
			continue
		}
		if badRole := roleMismatch(t.GetResources(), pool.role); badRole != "" {
			reject(t, "task %q resources are allocated to role %q, the offers to %q", id, badRole, pool.role)
			continue
		}
		if all := regular.Add(revocable); all.CPUs() <= 0 && all.Mem() <= 0 {
			reject(t, "task %q needs some cpus or mem, has %q", id, all.String())
			continue
		}
		if !remaining.Contains(regular) {
			reject(t, "task %q needs %s, the offers have %s left", id, regular, remaining)
			continue
		}
		if !remainingRevocable.Contains(revocable) {
			reject(t, "task %q needs revocable %s, the offers have revocable %s left", id, revocable, remainingRevocable)
			continue
		}
		remaining, remainingRevocable = remaining.Sub(regular), remainingRevocable.Sub(revocable)
		accepted = append(accepted, acceptedTask{info: t, regular: regular, revocable: revocable})
	}
	return accepted, rejected
}

func trimInvalid(err error) string {
	return strings.TrimPrefix(err.Error(), errInvalid.Error()+": ")
}

func commandSize(cmd *slacklinev1.CommandInfo) int {
	n := len(cmd.GetValue())
	for _, a := range cmd.GetArguments() {
		n += len(a)
	}
	for k, v := range cmd.GetEnvironment() {
		n += len(k) + len(v)
	}
	return n
}

func checkLabels(labels map[string]string) string {
	for k, v := range labels {
		if k == "" {
			return "label with an empty key"
		}
		if len(k)+len(v) > maxLabelLength {
			return fmt.Sprintf("label %.32q is longer than %d bytes", k, maxLabelLength)
		}
		if err := validateText("label key", k, maxLabelLength); err != nil {
			return trimInvalid(err)
		}
		if err := validateText(fmt.Sprintf("label %q", k), v, maxLabelLength); err != nil {
			return trimInvalid(err)
		}
	}
	return ""
}

// roleMismatch returns the first role named in list that is neither empty
// nor role.
func roleMismatch(list []*slacklinev1.Resource, role string) string {
	for _, r := range list {
		if r.GetRole() != "" && r.GetRole() != role {
			return r.GetRole()
		}
	}
	return ""
}
