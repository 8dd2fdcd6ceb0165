package sim

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/agent/session"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Defaults applied by NewFleet to zero fields of Config.
const (
	DefaultCoordinator        = "http://127.0.0.1:5050"
	DefaultHostnamePrefix     = "sim-"
	DefaultAgentsPerTransport = 100
	DefaultTickInterval       = 500 * time.Millisecond
	DefaultRPCTimeout         = session.DefaultRPCTimeout
	DefaultBackoffMin         = session.DefaultBackoffMin
	DefaultBackoffMax         = session.DefaultBackoffMax
	DefaultStatusRetryMin     = 10 * time.Second
	DefaultStatusRetryMax     = time.Minute
	DefaultMaxHeartbeats      = 256
	// DefaultHeartbeatInterval is used when the coordinator's
	// RegisterResponse carries no heartbeat interval.
	DefaultHeartbeatInterval = session.DefaultHeartbeatInterval
)

// Labels of a TaskInfo that script a simulated task.
const (
	// LabelDuration is a Go duration ("1s", "250ms"): the task ends that long
	// after it starts running. Without it the task runs until killed.
	LabelDuration = "sim.duration"
	// LabelExitCode is the exit code of a task with LabelDuration: 0 (the
	// default) ends it TASK_STATE_FINISHED, anything else TASK_STATE_FAILED
	// with the message "exited with code N".
	LabelExitCode = "sim.exit_code"
	// LabelFailLaunch, present with any value but "false" or "0", makes the
	// launch fail at once: TASK_STATE_FAILED with
	// REASON_CONTAINER_LAUNCH_FAILED.
	LabelFailLaunch = "sim.fail_launch"
	// LabelUsage is the fraction (0 to 1) of its cpus and mem a running
	// task reports using through the NodeService (DefaultUsage).
	LabelUsage = "sim.usage"
)

// Config configures a Fleet. Only Resources and Count are required; every
// other zero field takes the default named in its comment.
type Config struct {
	// Coordinator is the coordinator's base URL (DefaultCoordinator), or a
	// comma-separated list of a coordinator group's URLs, whose leader the
	// agents follow.
	Coordinator string
	// HTTPClient, when set, carries every agent's calls. When nil, the fleet
	// creates one cleartext HTTP/2 (h2c) transport per AgentsPerTransport
	// agents, so the command streams multiplex over a few connections
	// without exceeding a server's per-connection stream limit.
	HTTPClient *http.Client
	// ClientOptions are added to the Connect clients (for example
	// connect.WithGRPC()). By default the sim speaks the Connect protocol
	// with binary protobuf and does not accept compressed responses, which
	// keeps both sides' CPU low.
	ClientOptions []connect.ClientOption

	// Resources is what every agent registers as its total resources.
	Resources resources.Resources
	// Revocable, when not empty, is reported by every agent as its
	// oversubscribable estimate right after each registration.
	Revocable resources.Resources
	// HostnamePrefix names the agents: agent i is HostnamePrefix+i, i from 0
	// (DefaultHostnamePrefix).
	HostnamePrefix string
	// Attributes are registered by every agent.
	Attributes map[string]string
	// Profile, when set, simulates node profiles (#29): agents apply the
	// profiles the coordinator sends them as it decides and report their
	// signals on heartbeats. Without it agents ignore profiles.
	Profile ProfileFunc
	// ProfileShadows, with Profile, makes agents run a rollout's shadows
	// (ProfileShadowCommand) and report them as the real agent does: a
	// shadow of a version scores what Profile says that version's
	// estimator would, beside the active version's, both restarting when
	// either changes. Without it agents report they cannot shadow.
	ProfileShadows bool
	// Count is the number of agents (at least 1).
	Count int
	// WorkDir, when set, holds one file per agent with its id, so a
	// restarted fleet re-registers with the same ids.
	WorkDir string
	// Logger receives the fleet's logs (discarded when nil). Per-agent
	// session changes log at Debug so that 10,000 agents do not flood it.
	Logger *slog.Logger
	// OnEvent, when set, is called for every Event, from the agents'
	// goroutines, concurrently and never with a lock held. It must be quick;
	// it may call the Fleet's and Agents' methods.
	OnEvent func(Event)

	// TLS configures the fleet's transports for an https:// coordinator
	// when HTTPClient is nil: the CA to trust and the client certificate
	// every agent presents. The fleet shares one identity: the coordinator's
	// authorization file must let it register as each of the fleet's
	// hostnames (register_agents, e.g. hostnames: ["sim-*"]).
	TLS *tls.Config
	// NodeEndpoint, when set, is the base URL of the fleet's NodeService
	// (Fleet.NodeHandler, served by the caller) that every agent registers,
	// e.g. "https://127.0.0.1:5052". A coordinator with authorization
	// keeps only its scheme and port, and reaches it over https only.
	NodeEndpoint string
	// AgentsPerTransport is how many agents share one HTTP transport when
	// HTTPClient is nil (DefaultAgentsPerTransport).
	AgentsPerTransport int
	// TickInterval is the period of the fleet's one shared ticker, which
	// re-sends unacknowledged status updates when due (DefaultTickInterval).
	// Heartbeats run on each agent's own timer.
	TickInterval time.Duration
	// RPCTimeout bounds every unary call (DefaultRPCTimeout).
	RPCTimeout time.Duration
	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// between registration attempts (DefaultBackoffMin, DefaultBackoffMax).
	// A registration refused with PermissionDenied or FailedPrecondition
	// (a machine that is DOWN) is retried after about BackoffMax.
	BackoffMin, BackoffMax time.Duration
	// StatusRetryMin and StatusRetryMax bound the exponential backoff with
	// which an unacknowledged status update is re-sent
	// (DefaultStatusRetryMin, DefaultStatusRetryMax).
	StatusRetryMin, StatusRetryMax time.Duration
	// MaxConcurrentHeartbeats caps the heartbeats in flight across the
	// fleet (DefaultMaxHeartbeats); a due heartbeat waits for a slot.
	MaxConcurrentHeartbeats int
	// RestartAfterShutdown, when positive, makes an agent that the
	// coordinator shut down come back after this long as a fresh agent (new
	// id, no tasks), like a node agent restarted by its supervisor. When
	// zero a shut-down agent stays stopped.
	RestartAfterShutdown time.Duration
}

// withDefaults returns cfg with defaults filled in, or an error naming the
// first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Count < 1 {
		return cfg, fmt.Errorf("agent count %d: must be at least 1", cfg.Count)
	}
	if cfg.Resources.IsEmpty() {
		return cfg, errors.New("agent resources are empty")
	}
	if cfg.Coordinator == "" {
		cfg.Coordinator = DefaultCoordinator
	}
	if cfg.HostnamePrefix == "" {
		cfg.HostnamePrefix = DefaultHostnamePrefix
	}
	if cfg.WorkDir != "" && strings.ContainsAny(cfg.HostnamePrefix, `/\`) {
		return cfg, fmt.Errorf("hostname prefix %q: must not contain path separators", cfg.HostnamePrefix)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&cfg.AgentsPerTransport, DefaultAgentsPerTransport)
	setDefault(&cfg.MaxConcurrentHeartbeats, DefaultMaxHeartbeats)
	setDefault(&cfg.TickInterval, DefaultTickInterval)
	setDefault(&cfg.RPCTimeout, DefaultRPCTimeout)
	setDefault(&cfg.BackoffMin, DefaultBackoffMin)
	setDefault(&cfg.BackoffMax, DefaultBackoffMax)
	setDefault(&cfg.StatusRetryMin, DefaultStatusRetryMin)
	setDefault(&cfg.StatusRetryMax, DefaultStatusRetryMax)
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = cfg.BackoffMin
	}
	if cfg.StatusRetryMax < cfg.StatusRetryMin {
		cfg.StatusRetryMax = cfg.StatusRetryMin
	}
	return cfg, nil
}

func setDefault[T int | time.Duration](field *T, value T) {
	if *field <= 0 {
		*field = value
	}
}

// ParseAttributes parses "k=v,k2=v2" (the --attributes flag). Spaces around
// names and values are trimmed; an empty string gives no attributes.
func ParseAttributes(text string) (map[string]string, error) {
	attrs := map[string]string{}
	for item := range strings.SplitSeq(text, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("attribute %q: want name=value", item)
		}
		if _, dup := attrs[name]; dup {
			return nil, fmt.Errorf("attribute %q: given twice", name)
		}
		attrs[name] = strings.TrimSpace(value)
	}
	return attrs, nil
}

// attributesProto returns attrs sorted by name.
func attributesProto(attrs map[string]string) []*slacklinev1.Attribute {
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]*slacklinev1.Attribute, len(names))
	for i, name := range names {
		out[i] = &slacklinev1.Attribute{Name: name, Value: attrs[name]}
	}
	return out
}
