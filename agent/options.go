package agent

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/agent/fetcher"
	"github.com/slackline/slackline/agent/images"
	"github.com/slackline/slackline/agent/settings"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/internal/logging"
	"github.com/slackline/slackline/resources"
)

// Options are the agent's settings as an operator gives them: one field
// per slackline-agent flag (or key of its --config file), plus a few
// settings of embedders and tests that have no flag. AddFlags is the one
// place that declares each setting's flag name, default and help;
// DefaultOptions returns those defaults; Validate checks the settings,
// each error naming its flag; Build wires a runnable Agent from them.
// Start from DefaultOptions (or AddFlags): the zero Options is not valid.
//
// Config is the lower level: already-built subsystems (a containerizer, a
// monitor, eBPF programs, TLS and authorization) handed to New.
type Options struct {
	// Coordinator is the coordinator's URL or a coordinator group's
	// comma-separated URLs (--coordinator).
	Coordinator string
	// Listen is the NodeService address (--listen).
	Listen string
	// WorkDir holds the checkpoint, container state and sandboxes
	// (--work-dir).
	WorkDir string
	// RevocableSandboxDir, when set, holds revocable tasks' sandboxes
	// instead of <WorkDir>/sandboxes (--revocable-sandbox-dir): an
	// existing directory on a file system of its own, with its own
	// journal, typically on the same disk (containerizer.Config).
	RevocableSandboxDir string
	// DiskLatencyTarget is the io.latency target of guaranteed I/O on the
	// sandbox disks (--diskio-latency-target; v2 only; 0: none).
	DiskLatencyTarget time.Duration
	// Hostname is the name registered (--hostname; default the CN of Cert,
	// else the host's).
	Hostname string
	// CA, Cert and Key are the cluster's CA and the agent's certificate and
	// key (--ca, --cert, --key); Authz the NodeService's authorization file
	// (--authz) and ClientCRL its revocation list (--client-crl).
	CA, Cert, Key, Authz, ClientCRL string
	// Pprof serves the Go runtime's profiles (--pprof).
	Pprof bool
	// Insecure allows a NodeService without TLS and authorization
	// (--insecure; slackline-agent defaults it from SLACKLINE_INSECURE).
	Insecure bool
	// Resources overrides the detected resources (--resources).
	Resources string
	// Attributes are registered with the agent (--attributes
	// "rack=r1,zone=z2").
	Attributes map[string]string

	// CgroupRoot and CgroupMountpoint place the agent's cgroups
	// (--cgroup-root, --cgroup-mountpoint).
	CgroupRoot, CgroupMountpoint string
	// IsolateAgent moves the agent's own process into <root>/agent
	// (--isolate-agent).
	IsolateAgent bool
	// KillGracePeriod, CPUHardLimit, TaskUser, DynamicUIDs, DynamicUIDsDir,
	// TaskPidsMax, SubtreePidsMax, TaskIsolation, TaskOutputLimit and
	// AllowRootTasks configure the containerizer (the flags of the same
	// names; see containerizer.Config).
	KillGracePeriod time.Duration
	CPUHardLimit    bool
	TaskUser        string
	DynamicUIDs     containerizer.IDRange
	DynamicUIDsDir  string
	TaskPidsMax     int64
	SubtreePidsMax  int64
	TaskIsolation   containerizer.Isolation
	TaskOutputLimit int64
	AllowRootTasks  bool
	// Sandbox bounds the tasks' disk use (--gc-delay, --gc-disk-watermark,
	// --disk-check-interval).
	Sandbox SandboxConfig

	// LogLevel is the level of the agent's logs on stderr (--log-level),
	// when Logger is nil.
	LogLevel slog.Level
	// LogFormat is the format of those logs (--log-format): text or json.
	LogFormat logging.Format
	// MonitorInterval is the containers' sampling period
	// (--monitor-interval).
	MonitorInterval time.Duration
	// MonitorIdleRefresh is the monitor's safety net for idle containers
	// (--monitor-idle-refresh, #29): monitor.Config.IdleRefresh, and the
	// eBPF programs' full reads (bpf.Config.FullReadInterval).
	MonitorIdleRefresh time.Duration
	// EBPF loads the eBPF programs (--ebpf); EBPFAllCulprits splits waits
	// among every culprit (--ebpf-all-culprits); RunqueueLatencyThreshold
	// raises QoS events (--runqueue-latency-threshold), which
	// EBPFEventBatchWindow coalesces (--ebpf-event-batch-window, #29).
	EBPF                     bool
	EBPFAllCulprits          bool
	RunqueueLatencyThreshold time.Duration
	EBPFEventBatchWindow     time.Duration
	// NetworkInterfaces are where revocable egress is paced
	// (--network-interfaces; empty: the default-route interface; "none"
	// in the list: no network QoS).
	NetworkInterfaces []string

	// Settings are the estimator and QoS settings (--estimator*,
	// --fixed-revocable, --oversubscribe-memory, --qos-* but the loops'
	// intervals; agent/settings declares their flags): what shadows and
	// node profiles may set. EstimateInterval
	// (--oversubscribed-resources-interval) is how often the estimator
	// runs, and QoSIntervalMin (--qos-correction-interval-min) the least
	// time between QoS evaluations.
	settings.Settings
	EstimateInterval time.Duration
	QoSIntervalMin   time.Duration
	// QuietDeferMax (--quiet-defer-max) is how long an estimate or QoS
	// evaluation due at a monitor pass that changed nothing may wait.
	QuietDeferMax time.Duration
	// ProtectCgroups are services outside Slackline that the estimator
	// counts and QoS protects (--protect-cgroup, repeatable).
	ProtectCgroups []string

	// Shadow settings (#29 part 4): Shadows are candidate estimator and
	// QoS settings run in shadow beside the active ones (--shadow
	// NAME=FILE, repeatable, at most shadow.MaxShadows): each file is a
	// settings map (WithSettings) applied to a copy of these Options.
	Shadows []ShadowSpec

	// Fetched artifacts and health checks (#27).

	// FetchCacheBytes bounds the artifact cache (--fetch-cache-bytes;
	// negative: no cache), FetchMaxBytes one download
	// (--fetch-max-bytes), FetchTimeout one download's time
	// (--fetch-timeout). See agent/fetcher.
	FetchCacheBytes int64
	FetchMaxBytes   int64
	FetchTimeout    time.Duration
	// Images (#27): the image store of tasks' roots (TaskInfo.image).
	// ImageDir holds it (--image-dir; default <work-dir>/images);
	// ImageCredentials is a Docker config.json-style file of registry
	// credentials (--image-credentials); ImageDiskBudgetMiB bounds the
	// unpacked layers (--image-disk-budget); ImagePulls and
	// ImagePullTimeout bound pulls (--image-pulls, --image-pull-timeout);
	// ImageInsecureRegistries may be reached over plain http
	// (--image-insecure-registries; loopback always may); ImageLocalDirs
	// are where oci: layouts and docker-archive: tarballs may be read
	// (--image-local-dirs; none by default).
	ImageDir                string
	ImageCredentials        string
	ImageDiskBudgetMiB      int64
	ImagePulls              int
	ImagePullTimeout        time.Duration
	ImageInsecureRegistries []string
	ImageLocalDirs          []string
	// ImageRegistryCA (#27, jobs helper): a PEM file of CAs trusted for
	// registries beside the system's (--image-registry-ca).
	ImageRegistryCA string
	// Launch supervisor (#27): Supervisor is the supervisor and shim
	// binary every launch executes (--supervisor; default
	// slackline-supervisor next to the agent's executable, see
	// containerizer.FindSupervisor). SupervisorCommand, when set, wins.
	Supervisor string

	// Settings without a flag.

	// Logger receives the agent's logs (default: text on stderr at
	// LogLevel).
	Logger *slog.Logger
	// SupervisorCommand starts a task's supervisor (default: Supervisor;
	// tests name the built slackline-agent's "supervise").
	SupervisorCommand []string
	// MinBackoff and MaxBackoff bound re-registration backoff (see Config).
	MinBackoff, MaxBackoff time.Duration
}

// DefaultOptions returns the defaults of every setting: those of the flags
// AddFlags declares.
func DefaultOptions() Options {
	var o Options
	o.AddFlags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return o
}

// AddFlags declares one flag per setting on fs, bound to o's fields and
// setting them to their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Coordinator, "coordinator", "http://127.0.0.1:5050", "coordinator URL, or a comma-separated list of a coordinator group's URLs (the agent follows the leader)")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:5051", "NodeService address")
	fs.StringVar(&o.WorkDir, "work-dir", "/var/lib/slackline/agent", "checkpoint, container state and sandboxes")
	fs.StringVar(&o.RevocableSandboxDir, "revocable-sandbox-dir", "", "revocable tasks' sandboxes (their scratch) go here instead of <work-dir>/sandboxes: an existing directory on a file system of its own (own journal), e.g. a partition of the same disk, so that a revocable writer holding a journal handle cannot stall guaranteed tasks' fsyncs")
	fs.DurationVar(&o.DiskLatencyTarget, "diskio-latency-target", 0, "cgroup v2: an io.latency target for guaranteed tasks' I/O on the sandbox disks (e.g. 5ms for an SSD: a little above its latency when idle); while guaranteed I/O misses it, the kernel cuts the queue depth of revocable I/O (and of any other cgroup beside --cgroup-root), so that revocable requests wait behind guaranteed ones instead of only being capped by rate; 0: none (a target a previous agent set is removed). Needs a kernel built with CONFIG_BLK_CGROUP_IOLATENCY (Debian's are not); GetFeatures' disk_io says whether it holds")
	fs.StringVar(&o.Hostname, "hostname", "", "hostname to register (default: the CN of --cert, else the host's)")
	fs.StringVar(&o.CA, "ca", "", "CA certificate of the cluster: verifies the coordinator, and NodeService callers' client certificates")
	fs.StringVar(&o.Cert, "cert", "", "the agent's certificate (agent-NAME.crt): its identity towards the coordinator, and the NodeService's serving certificate")
	fs.StringVar(&o.Key, "key", "", "the agent's key (agent-NAME.key)")
	fs.StringVar(&o.Authz, "authz", "", "authorization file (authz.yaml) for NodeService callers; re-read on SIGHUP")
	fs.StringVar(&o.ClientCRL, "client-crl", "", "certificate revocation list signed by --ca (crl.pem): NodeService callers presenting a certificate it lists are refused; needs --authz; re-read on SIGHUP")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve the Go runtime's profiles (CPU, heap, goroutines, execution traces) at /debug/pprof/ on the NodeService's --listen; callers need debug_processes")
	fs.BoolVar(&o.Insecure, "insecure", false, "allow serving the NodeService without TLS and --authz, on loopback too (env "+auth.EnvInsecure+"=1): any local user, tasks included, could then read every task's output")
	fs.StringVar(&o.Resources, "resources", "", `resources overriding the detected ones, e.g. "cpus:4;mem:8192;ports:[31000-32000]"`)
	o.Attributes = map[string]string{}
	fs.Var(parsed(&o.Attributes, ParseAttributes, formatAttributes), "attributes", `agent attributes, e.g. "rack=r1,zone=z2"`)

	fs.StringVar(&o.CgroupRoot, "cgroup-root", "slackline", "the agent's cgroup subtree under each hierarchy")
	fs.StringVar(&o.CgroupMountpoint, "cgroup-mountpoint", "/sys/fs/cgroup", "where the cgroup hierarchies are mounted")
	fs.BoolVar(&o.IsolateAgent, "isolate-agent", true, "move the agent into <cgroup-root>/agent, a cgroup of its own with a small CPU weight and a one-core cap (task supervisors always live in <cgroup-root>/supervisors)")
	fs.DurationVar(&o.KillGracePeriod, "kill-grace-period", 3*time.Second, "time between SIGTERM and the cgroup-wide kill")
	fs.BoolVar(&o.CPUHardLimit, "cpu-hard-limit", false, "cap each task's CPU at its cpus (CFS quota), not only weight it")
	fs.StringVar(&o.TaskUser, "task-user", containerizer.DefaultTaskUser, `user a task runs as when neither its TaskInfo nor its framework names one; "dynamic": a user of each task's own, from --dynamic-uids (tasks cannot signal each other or read each other's sandboxes)`)
	o.DynamicUIDs = containerizer.DefaultDynamicIDs
	fs.Var(parsed(&o.DynamicUIDs, containerizer.ParseIDRange, containerizer.IDRange.String), "dynamic-uids", `uids (and gids) of dynamic task users, FIRST-LAST: none of them in the host's user database`)
	fs.Int64Var(&o.TaskPidsMax, "task-pids-max", containerizer.DefaultPidsMax, "processes and threads a task may have (pids.max; negative: unbounded)")
	fs.Int64Var(&o.SubtreePidsMax, "subtree-pids-max", 0, "processes and threads all tasks of one subtree (guaranteed, revocable) may have together (pids.max of the subtree; 0: 3/8 of the smaller of kernel.pid_max and kernel.threads-max; negative: unbounded)")
	o.TaskIsolation = containerizer.DefaultIsolation
	fs.Var(parsed(&o.TaskIsolation, containerizer.ParseIsolation, containerizer.Isolation.String), "task-isolation", `what isolates each task besides its cgroups and user: "namespaces" (PID, mount and IPC namespaces, a private tmpfs at /tmp, /var/tmp and /dev/shm), "seccomp" (the default seccomp filter), both comma-separated, or "none"`)
	fs.StringVar(&o.DynamicUIDsDir, "dynamic-uids-dir", containerizer.DefaultDynamicIDsDir, "the host-wide state of dynamic uids (lock, cursor, leases), shared by every agent of the host")
	fs.Int64Var(&o.TaskOutputLimit, "task-output-limit", containerizer.DefaultOutputLimit, "bytes of each task output stream (stdout, stderr) kept in the sandbox, the newest, rotated through stdout.1 (negative: unlimited)")
	fs.DurationVar(&o.Sandbox.GCDelay, "gc-delay", DefaultSandboxGCDelay, "how long an ended task's sandbox is kept")
	fs.Float64Var(&o.Sandbox.DiskWatermark, "gc-disk-watermark", DefaultSandboxDiskWatermark, "fraction of the work dir's file system in use beyond which ended tasks' sandboxes are removed before --gc-delay, oldest first (1: never)")
	fs.DurationVar(&o.Sandbox.CheckInterval, "disk-check-interval", DefaultSandboxCheckInterval, "how often sandboxes are measured against their tasks' disk resource (a task over it is killed) and collected")
	fs.BoolVar(&o.AllowRootTasks, "allow-root-tasks", false, "let tasks run as root (uid 0); without it the agent fails such launches even when the coordinator's ACLs allowed them (defence in depth)")

	// Fetched artifacts and health checks (#27).
	fs.Int64Var(&o.FetchCacheBytes, "fetch-cache-bytes", fetcher.DefaultCacheBytes, "bytes of tasks' artifacts (CommandInfo.uris with cache and sha256) kept in <work-dir>/fetch, least recently used evicted first (negative: no cache)")
	fs.Int64Var(&o.FetchMaxBytes, "fetch-max-bytes", fetcher.DefaultMaxBytes, "largest artifact a task may fetch, in bytes")
	fs.DurationVar(&o.FetchTimeout, "fetch-timeout", fetcher.DefaultTimeout, "longest download of one artifact")
	// Images (#27).
	fs.StringVar(&o.ImageDir, "image-dir", "", "where the image store keeps unpacked layers (default <work-dir>/images)")
	fs.StringVar(&o.ImageCredentials, "image-credentials", "", `registry credentials, a Docker config.json-style file ({"auths": {"registry:5000": {"auth": "<base64 user:password>"}}}), not readable by others`)
	fs.Int64Var(&o.ImageDiskBudgetMiB, "image-disk-budget", images.DefaultBudgetBytes>>20, "MiB of unpacked image layers kept; least recently used images no live task runs from are removed beyond it (negative: no bound)")
	fs.IntVar(&o.ImagePulls, "image-pulls", images.DefaultPulls, "image pulls under way at once (others wait)")
	fs.DurationVar(&o.ImagePullTimeout, "image-pull-timeout", images.DefaultPullTimeout, "longest an image pull may take before the tasks waiting for it fail")
	fs.Var(parsed(&o.ImageInsecureRegistries, splitList, joinList), "image-insecure-registries", "registries (host:port, comma separated) that may be reached over plain http; loopback ones always may")
	// Images (#27, jobs helper): a registry's private CA.
	fs.StringVar(&o.ImageRegistryCA, "image-registry-ca", "", "PEM file of CA certificates trusted for image registries' TLS, beside the system's (a registry with a private CA)")
	fs.Var(parsed(&o.ImageLocalDirs, splitList, joinList), "image-local-dirs", "directories (comma separated) under which tasks' oci: layouts and docker-archive: tarballs may be read; none by default (local images refused)")
	// Launch supervisor (#27).
	fs.StringVar(&o.Supervisor, "supervisor", "", "the slackline-supervisor binary every task launch runs (supervisor and shim; default: slackline-supervisor next to this executable)")

	fs.TextVar(&o.LogLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	// Operators (#31): the log format.
	fs.Var(&o.LogFormat, "log-format", logging.FormatUsage)
	fs.DurationVar(&o.MonitorInterval, "monitor-interval", 100*time.Millisecond, "how often every container is sampled (the estimator and QoS see nothing faster)")
	// Agent CPU (#29): the monitor's safety net for idle containers.
	fs.DurationVar(&o.MonitorIdleRefresh, "monitor-idle-refresh", 5*time.Second, "how long at most a container that eBPF says has not run has its cpu.stat and memory.current repeated before they are read again anyway, every container's in the sample after each multiple of it on the clock (the safety net that finds what eBPF cannot see: tasks in a child cgroup, memory reclaimed while it slept), and how long at most eBPF's counters go without a full read of their maps (the safety net of its changed marks); containers eBPF cannot see, and running ones, are read at every sample")
	fs.BoolVar(&o.EBPF, "ebpf", true, "load the eBPF programs (without them the agent runs on cgroupfs, PSI and procfs)")
	fs.BoolVar(&o.EBPFAllCulprits, "ebpf-all-culprits", false, "split guaranteed tasks' and protected services' run-queue waits among everything that held the CPU (other containers, the agent, other cgroups, kernel threads, idle CPUs waking up), not only revocable tasks (GetUsage delayed_by); about 30 ns more per context switch")
	fs.Var(parsed(&o.NetworkInterfaces, splitList, joinList), "network-interfaces", `interfaces on which revocable egress is paced, comma separated ("none": no network QoS); default: the default-route interface, when the node has a bandwidth resource`)
	fs.DurationVar(&o.RunqueueLatencyThreshold, "runqueue-latency-threshold", time.Millisecond, "guaranteed tasks' run-queue waits at or above this raise an event for the QoS controller")
	fs.DurationVar(&o.EBPFEventBatchWindow, "ebpf-event-batch-window", bpf.DefaultEventBatchWindow, "run-queue latency events are read in batches: after the first of a batch the agent waits this long, then delivers it and all that came since (each with its own time), waking once per batch instead of once per event; it delays the QoS controller's reaction by at most this much (0: read each event as it comes)")

	// The estimator and QoS settings (agent/settings).
	o.Settings.AddFlags(fs)
	fs.DurationVar(&o.EstimateInterval, "oversubscribed-resources-interval", 100*time.Millisecond, "how often the estimate is computed (and sent when it changed)")
	// Shadow settings (#29 part 4).
	fs.Var(shadowsValue{&o.Shadows}, "shadow", "NAME=FILE: run the estimator and QoS settings of FILE (a YAML or JSON map of --estimator* and --qos-* flag names to values, as in a --config file) in shadow beside the active ones, reporting what they would have offered and corrected (slacklinectl get shadows, /metrics); repeatable, at most 2")
	fs.Var(repeated{&o.ProtectCgroups}, "protect-cgroup", "cgroup of a service outside Slackline (relative to each hierarchy) that the estimator counts and QoS protects; repeatable")

	fs.DurationVar(&o.QoSIntervalMin, "qos-correction-interval-min", 250*time.Millisecond, "shortest time between QoS evaluations")
	fs.DurationVar(&o.QuietDeferMax, "quiet-defer-max", time.Second, "longest an estimate or QoS evaluation may wait while the monitor's passes change nothing (every container idle for 2s, the node not sampled); 0: never wait")
}

// Validate checks the settings without touching the host, and returns
// every problem found, each naming its flag.
func (o *Options) Validate() error {
	var errs []error
	check := func(ok bool, flag, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flag}, args...)...))
		}
	}
	checkErr := func(err error, flag string) {
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		}
	}
	check(strings.TrimSpace(o.Coordinator) != "", "coordinator", "required")
	_, _, err := net.SplitHostPort(o.Listen)
	checkErr(err, "listen")
	check(o.WorkDir != "", "work-dir", "required")
	check(o.RevocableSandboxDir == "" || filepath.IsAbs(o.RevocableSandboxDir), "revocable-sandbox-dir", "%q is not an absolute path", o.RevocableSandboxDir)
	check(o.DiskLatencyTarget >= 0, "diskio-latency-target", "must not be negative, got %v", o.DiskLatencyTarget)
	check((o.Cert == "") == (o.Key == ""), "cert", "--cert and --key go together")
	check(o.ClientCRL == "" || o.Authz != "", "client-crl", "needs --authz: without it a client certificate grants nothing to take back")
	check(o.ClientCRL == "" || (o.CA != "" && o.Cert != ""), "client-crl", "needs --ca and --cert (TLS that verifies client certificates)")
	checkErr(auth.CheckListen("--listen", o.Listen, o.Cert != "", o.Authz != "", o.Insecure), "insecure")
	_, err = resources.Parse(o.Resources)
	checkErr(err, "resources")
	checkErr(cgroups.ValidateRoot(o.CgroupRoot), "cgroup-root")
	check(o.CgroupMountpoint != "", "cgroup-mountpoint", "required")
	check(o.KillGracePeriod > 0, "kill-grace-period", "must be positive, got %v", o.KillGracePeriod)
	check(o.TaskUser != "", "task-user", "required (a user name, or %q)", containerizer.DynamicTaskUser)
	check(o.DynamicUIDs.Count > 0, "dynamic-uids", "empty range")
	check(o.DynamicUIDsDir != "", "dynamic-uids-dir", "required")
	check(o.Sandbox.GCDelay > 0, "gc-delay", "must be positive, got %v", o.Sandbox.GCDelay)
	check(o.Sandbox.DiskWatermark > 0 && o.Sandbox.DiskWatermark <= 1, "gc-disk-watermark", "must be in (0, 1], got %v", o.Sandbox.DiskWatermark)
	check(o.Sandbox.CheckInterval > 0, "disk-check-interval", "must be positive, got %v", o.Sandbox.CheckInterval)
	check(o.FetchCacheBytes != 0, "fetch-cache-bytes", "0 is ambiguous: negative turns the cache off")
	check(o.FetchMaxBytes > 0, "fetch-max-bytes", "must be positive, got %d", o.FetchMaxBytes)
	check(o.FetchTimeout > 0, "fetch-timeout", "must be positive, got %v", o.FetchTimeout)
	check(o.MonitorInterval >= 10*time.Millisecond, "monitor-interval", "must be at least 10ms, got %v", o.MonitorInterval)
	check(o.MonitorIdleRefresh > 0 && o.MonitorIdleRefresh <= time.Minute, "monitor-idle-refresh", "must be in (0, 1m], got %v", o.MonitorIdleRefresh)
	check(o.EBPFEventBatchWindow >= 0, "ebpf-event-batch-window", "must not be negative, got %v", o.EBPFEventBatchWindow)
	check(o.RunqueueLatencyThreshold >= 0, "runqueue-latency-threshold", "must not be negative, got %v", o.RunqueueLatencyThreshold)
	check(o.EstimateInterval > 0, "oversubscribed-resources-interval", "must be positive, got %v", o.EstimateInterval)
	check(o.QoSIntervalMin > 0, "qos-correction-interval-min", "must be positive, got %v", o.QoSIntervalMin)
	check(o.QuietDeferMax >= 0 && o.QuietDeferMax <= time.Minute, "quiet-defer-max", "must be in [0, 1m], got %v", o.QuietDeferMax)
	check(o.ImageDiskBudgetMiB != 0, "image-disk-budget", "must not be 0 (negative: no bound)")
	check(o.ImagePulls > 0, "image-pulls", "must be positive, got %d", o.ImagePulls)
	check(o.ImagePullTimeout > 0, "image-pull-timeout", "must be positive, got %v", o.ImagePullTimeout)
	for _, d := range o.ImageLocalDirs {
		check(filepath.IsAbs(d), "image-local-dirs", "%q is not an absolute path", d)
	}
	errs = append(errs, o.ValidateSettings(), o.validateShadows())
	if len(o.NetworkInterfaces) > 1 && networkOff(o.NetworkInterfaces) {
		errs = append(errs, errors.New(`--network-interfaces: "none" names no other interface`))
	}
	return errors.Join(errs...)
}

// sandboxConfig is the sandbox subsystem's configuration: Sandbox, with
// the revocable sandboxes' directory.
func (o *Options) sandboxConfig() SandboxConfig {
	c := o.Sandbox
	c.RevocableDir = o.RevocableSandboxDir
	return c
}

// ValidateSettings checks the estimator and QoS settings alone (the
// flags IsSettingFlag accepts), as Validate does; each error names its
// flag. Settings applied in place of the flags' (WithSettings) are checked
// with it.
func (o *Options) ValidateSettings() error { return o.Settings.Validate() }

// networkOff tells whether --network-interfaces turns network QoS off.
func networkOff(interfaces []string) bool {
	for _, i := range interfaces {
		if i == "none" {
			return true
		}
	}
	return false
}

// parsed is a flag.Value of a type with a parser (cliconfig.Parsed).
func parsed[T any](p *T, parse func(string) (T, error), format func(T) string) cliconfig.ParsedValue[T] {
	return cliconfig.Parsed(p, parse, format)
}

// repeated is a repeatable string flag.
type repeated struct{ l *[]string }

func (r repeated) String() string {
	if r.l == nil {
		return ""
	}
	return strings.Join(*r.l, ",")
}

func (r repeated) Set(v string) error {
	*r.l = append(*r.l, v)
	return nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) ([]string, error) {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out, nil
}

func joinList(l []string) string { return strings.Join(l, ",") }

func formatAttributes(attrs map[string]string) string {
	var parts []string
	for k, v := range attrs {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// defaultLogger is the daemon's logger: text or JSON (format) on stderr
// at level. The format was checked by its flag.
func defaultLogger(level slog.Level, format logging.Format) *slog.Logger {
	logger, err := logging.New(os.Stderr, string(format), level)
	if err != nil {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return logger
}
