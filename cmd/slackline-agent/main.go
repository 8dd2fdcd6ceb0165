// Command slackline-agent runs the Slackline node agent: it registers this
// host's resources with the coordinator, runs tasks in cgroups and serves
// the NodeService. It must run as root (or with a delegated cgroup tree).
//
// Its NodeService refuses to start without TLS (--cert, --key) and --authz,
// on loopback too (tasks are local users), unless --insecure (or
// SLACKLINE_INSECURE=1) is given.
//
// "slackline-agent supervise ..." is the per-task supervisor the agent
// starts itself; it is not meant to be run by hand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/slackline/slackline/agent"
	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/qos"
	"github.com/slackline/slackline/resources"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		os.Exit(containerizer.SuperviseMain(os.Args[2:]))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slackline-agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("slackline-agent", flag.ContinueOnError)
	var cfg agent.Config
	fs.StringVar(&cfg.Coordinator, "coordinator", "http://127.0.0.1:5050", "coordinator URL, or a comma-separated list of a coordinator group's URLs (the agent follows the leader)")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:5051", "NodeService address")
	fs.StringVar(&cfg.WorkDir, "work-dir", "/var/lib/slackline/agent", "checkpoint, container state and sandboxes")
	fs.StringVar(&cfg.Hostname, "hostname", "", "hostname to register (default: the CN of --cert, else the host's)")
	caFile := fs.String("ca", "", "CA certificate of the cluster: verifies the coordinator, and NodeService callers' client certificates")
	certFile := fs.String("cert", "", "the agent's certificate (agent-NAME.crt): its identity towards the coordinator, and the NodeService's serving certificate")
	keyFile := fs.String("key", "", "the agent's key (agent-NAME.key)")
	authzFile := fs.String("authz", "", "authorization file (authz.yaml) for NodeService callers; re-read on SIGHUP")
	crlFile := fs.String("client-crl", "", "certificate revocation list signed by --ca (crl.pem): NodeService callers presenting a certificate it lists are refused; needs --authz; re-read on SIGHUP")
	insecureDefault, err := auth.InsecureFromEnv()
	if err != nil {
		return err
	}
	insecure := fs.Bool("insecure", insecureDefault, "allow serving the NodeService without TLS and --authz, on loopback too (env "+auth.EnvInsecure+"=1): any local user, tasks included, could then read every task's output")
	fs.StringVar(&cfg.Resources, "resources", "", `resources overriding the detected ones, e.g. "cpus:4;mem:8192;ports:[31000-32000]"`)
	attributes := fs.String("attributes", "", `agent attributes, e.g. "rack=r1,zone=z2"`)
	cgroupRoot := fs.String("cgroup-root", "slackline", "the agent's cgroup subtree under each hierarchy")
	cgroupMount := fs.String("cgroup-mountpoint", "/sys/fs/cgroup", "where the cgroup hierarchies are mounted")
	isolate := fs.Bool("isolate-agent", true, "move the agent into <cgroup-root>/agent, a cgroup of its own with a small CPU weight and a one-core cap (task supervisors always live in <cgroup-root>/supervisors)")
	grace := fs.Duration("kill-grace-period", 3*time.Second, "time between SIGTERM and the cgroup-wide kill")
	cpuLimit := fs.Bool("cpu-hard-limit", false, "cap each task's CPU at its cpus (CFS quota), not only weight it")
	taskUser := fs.String("task-user", containerizer.DefaultTaskUser, `user a task runs as when neither its TaskInfo nor its framework names one; "dynamic": a user of each task's own, from --dynamic-uids (tasks cannot signal each other or read each other's sandboxes)`)
	dynamicIDs := containerizer.DefaultDynamicIDs.String()
	fs.StringVar(&dynamicIDs, "dynamic-uids", dynamicIDs, `uids (and gids) of dynamic task users, FIRST-LAST: none of them in the host's user database`)
	pidsMax := fs.Int64("task-pids-max", containerizer.DefaultPidsMax, "processes and threads a task may have (pids.max; negative: unbounded)")
	subtreePidsMax := fs.Int64("subtree-pids-max", 0, "processes and threads all tasks of one subtree (guaranteed, revocable) may have together (pids.max of the subtree; 0: 3/8 of the smaller of kernel.pid_max and kernel.threads-max; negative: unbounded)")
	isolation := fs.String("task-isolation", containerizer.DefaultIsolation.String(), `what isolates each task besides its cgroups and user: "namespaces" (PID, mount and IPC namespaces, a private tmpfs at /tmp, /var/tmp and /dev/shm), "seccomp" (the default seccomp filter), both comma-separated, or "none"`)
	dynamicIDsDir := fs.String("dynamic-uids-dir", containerizer.DefaultDynamicIDsDir, "the host-wide state of dynamic uids (lock, cursor, leases), shared by every agent of the host")
	outputLimit := fs.Int64("task-output-limit", containerizer.DefaultOutputLimit, "bytes of each task output stream (stdout, stderr) kept in the sandbox, the newest, rotated through stdout.1 (negative: unlimited)")
	fs.DurationVar(&cfg.Sandbox.GCDelay, "gc-delay", agent.DefaultSandboxGCDelay, "how long an ended task's sandbox is kept")
	fs.Float64Var(&cfg.Sandbox.DiskWatermark, "gc-disk-watermark", agent.DefaultSandboxDiskWatermark, "fraction of the work dir's file system in use beyond which ended tasks' sandboxes are removed before --gc-delay, oldest first (1: never)")
	fs.DurationVar(&cfg.Sandbox.CheckInterval, "disk-check-interval", agent.DefaultSandboxCheckInterval, "how often sandboxes are measured against their tasks' disk resource (a task over it is killed) and collected")
	allowRoot := fs.Bool("allow-root-tasks", false, "let tasks run as root (uid 0); without it the agent fails such launches even when the coordinator's ACLs allowed them (defence in depth)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	monitorInterval := fs.Duration("monitor-interval", 100*time.Millisecond, "how often every container is sampled (the estimator and QoS see nothing faster)")
	useEBPF := fs.Bool("ebpf", true, "load the eBPF programs (without them the agent runs on cgroupfs, PSI and procfs)")
	allCulprits := fs.Bool("ebpf-all-culprits", false, "split guaranteed tasks' and protected services' run-queue waits among everything that held the CPU (other containers, the agent, other cgroups, kernel threads, idle CPUs waking up), not only revocable tasks (GetUsage delayed_by); about 30 ns more per context switch")
	netInterfaces := fs.String("network-interfaces", "", `interfaces on which revocable egress is paced, comma separated ("none": no network QoS); default: the default-route interface, when the node has a bandwidth resource`)
	runqThreshold := fs.Duration("runqueue-latency-threshold", time.Millisecond, "guaranteed tasks' run-queue waits at or above this raise an event for the QoS controller")
	estimatorName := fs.String("estimator", estimator.DefaultName, "oversubscription estimator: "+strings.Join(estimator.Names(), ", "))
	fs.DurationVar(&cfg.EstimateInterval, "oversubscribed-resources-interval", 100*time.Millisecond, "how often the estimate is computed (and sent when it changed)")
	fixed := fs.String("fixed-revocable", "", `resources the "fixed" estimator reports, e.g. "cpus:2;bandwidth:500" (with network QoS, revocable egress is paced to its bandwidth: 1% of the link without)`)
	oversubscribeMem := fs.Bool("oversubscribe-memory", false, "estimate memory slack too (with a larger margin)")
	estCfg := estimator.DefaultConfig()
	fs.DurationVar(&estCfg.Window, "estimator-window", estCfg.Window, "how far back the usage estimators look for peaks (shorter: slack is offered sooner after usage drops, with less safety)")
	fs.Float64Var(&estCfg.Percentile, "estimator-percentile", estCfg.Percentile, "percentile of CPU samples in the window taken as a container's peak")
	fs.DurationVar(&estCfg.PeakHalfLife, "estimator-peak-half-life", estCfg.PeakHalfLife, "half-life of the decaying peak hold")
	fs.DurationVar(&estCfg.Fast.Confirm, "estimator-confirm", estCfg.Fast.Confirm, "fast: how long slack must last before it is offered (a rise shrinks the estimate at once)")
	fs.Float64Var(&estCfg.Fast.Margin, "estimator-safety-margin", estCfg.Fast.Margin, "fast: fraction of each guaranteed CPU allocation never offered")
	fs.DurationVar(&estCfg.Fast.ReclaimTime, "estimator-reclaim-time", estCfg.Fast.ReclaimTime, "fast: how long QoS takes to take CPU back; recurring bursts due within it are held back in advance")
	var protect stringList
	fs.Var(&protect, "protect-cgroup", "cgroup of a service outside Slackline (relative to each hierarchy) that the estimator counts and QoS protects; repeatable")
	qosNames := fs.String("qos-controller", qos.DefaultControllers, "QoS controllers, comma separated: "+strings.Join(qos.Names(), ", "))
	fs.DurationVar(&cfg.QoSIntervalMin, "qos-correction-interval-min", 250*time.Millisecond, "shortest time between QoS evaluations")
	qosCfg := qos.DefaultConfig()
	fs.DurationVar(&qosCfg.Interference.RunqP99Enter, "qos-runqueue-p99", qosCfg.Interference.RunqP99Enter, "interference: guaranteed run-queue p99 above this throttles revocable work (calm below half of it)")
	fs.DurationVar(&qosCfg.Interference.MinAttributedDelay, "qos-min-attributed-delay", qosCfg.Interference.MinAttributedDelay, "interference: with eBPF, act only on latency that revocable tasks caused at least this much of per interval (0: act on any)")
	fs.DurationVar(&qosCfg.Interference.KillAfter, "qos-kill-after", qosCfg.Interference.KillAfter, "interference: kill revocable work after this long throttled to the floor without relief")
	fs.DurationVar(&qosCfg.Interference.ThrottlePeriod, "qos-throttle-period", qosCfg.Interference.ThrottlePeriod, "interference: CFS period of the revocable subtree's CPU limit (0: the kernel's 100ms); shorter periods make throttled spells shorter")
	fs.DurationVar(&qosCfg.Interference.EffectWindow, "qos-effect-window", qosCfg.Interference.EffectWindow, "interference, cpuset: with eBPF, how long after a correction its effect on the delay revocable work causes is judged (corrections that did not help are undone)")
	fs.Float64Var(&qosCfg.Interference.MinWaitGain, "qos-min-wait-gain", qosCfg.Interference.MinWaitGain, "interference, cpuset: with eBPF, a correction is kept only if guaranteed work's whole run-queue wait fell by this fraction (else undone and backed off)")
	fs.DurationVar(&qosCfg.Network.RTTIncrease, "qos-network-rtt-increase", qosCfg.Network.RTTIncrease, "network: guaranteed TCP round-trip p99 this far above its baseline (and 3x it) slows revocable egress down")
	fs.Float64Var(&qosCfg.Network.SaturationEnter, "qos-network-saturation", qosCfg.Network.SaturationEnter, "network: fraction of the bandwidth resource at which the link counts as saturated (calm 0.1 below)")
	minAvailMiB := fs.Float64("qos-memory-min-available", 0, "memory: kill revocable work when MemAvailable falls below this many MiB (0: max(256 MiB, 5% of memory))")
	fs.Float64Var(&qosCfg.Load.Threshold5Min, "qos-load-threshold-5min", 0, "load: 5-minute load average above which revocable work is killed (Mesos load_threshold_5min)")
	fs.Float64Var(&qosCfg.Load.Threshold15Min, "qos-load-threshold-15min", 0, "load: 15-minute load average threshold (Mesos load_threshold_15min)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = logger
	if cfg.Attributes, err = agent.ParseAttributes(*attributes); err != nil {
		return fmt.Errorf("--attributes: %w", err)
	}
	if err := agentCredentials(&cfg, *caFile, *certFile, *keyFile, *authzFile, *crlFile); err != nil {
		return err
	}
	if err := auth.CheckListen("--listen", cfg.Listen, cfg.TLS != nil, cfg.Authz != nil, *insecure); err != nil {
		return err
	}
	if *insecure && (cfg.TLS == nil || cfg.Authz == nil) {
		logger.Warn("running insecure: without TLS and --authz any local user, tasks included, can read every task's output through the NodeService", "listen", cfg.Listen)
	}
	if os.Geteuid() != 0 {
		return errors.New("must run as root: the agent creates cgroups and starts tasks in them; run it with sudo or as the systemd unit in scripts/systemd")
	}
	workDir, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return err
	}
	cfg.WorkDir = workDir
	dynamic, err := containerizer.ParseIDRange(dynamicIDs)
	if err != nil {
		return fmt.Errorf("--dynamic-uids: %w", err)
	}
	iso, err := containerizer.ParseIsolation(*isolation)
	if err != nil {
		return fmt.Errorf("--task-isolation: %w", err)
	}
	cz, err := containerizer.New(containerizer.Config{
		CgroupRoot: *cgroupRoot, CgroupMountpoint: *cgroupMount,
		StateDir: filepath.Join(workDir, "containers"), SandboxDir: filepath.Join(workDir, "sandboxes"),
		KillGracePeriod: *grace, CPUHardLimit: *cpuLimit, Logger: logger,
		TaskUser: *taskUser, DynamicIDs: dynamic, DynamicIDsDir: *dynamicIDsDir, AllowRootTasks: *allowRoot,
		OutputLimit: *outputLimit, PidsMax: *pidsMax, SubtreePidsMax: *subtreePidsMax, Isolation: iso,
	})
	if err != nil {
		return err
	}
	if *isolate {
		if err := cz.IsolateAgent(os.Getpid()); err != nil {
			return fmt.Errorf("move the agent into its own cgroup (or run with --isolate-agent=false): %w", err)
		}
	}
	cfg.Containerizer = cz
	cfg.UnifiedMount = cz.Layout().Unified
	cfg.ProtectCgroups = protect

	estCfg.Memory = *oversubscribeMem
	if estCfg.Fixed, err = resources.Parse(*fixed); err != nil {
		return fmt.Errorf("--fixed-revocable: %w", err)
	}
	if cfg.Estimator, err = estimator.New(*estimatorName, estCfg); err != nil {
		return fmt.Errorf("--estimator: %w", err)
	}
	cfg.EstimatorName = *estimatorName
	qosCfg.Interference.RunqP99Exit = qosCfg.Interference.RunqP99Enter / 2
	qosCfg.Network.SaturationExit = max(qosCfg.Network.SaturationEnter-0.1, qosCfg.Network.SaturationEnter/2)
	if *minAvailMiB > 0 {
		qosCfg.Memory.MinAvailableBytes, qosCfg.Memory.MinAvailableFraction = uint64(*minAvailMiB*(1<<20)), 0
	}
	if cfg.QoS, err = qos.NewSet(qos.ParseNames(*qosNames), qosCfg); err != nil {
		return fmt.Errorf("--qos-controller: %w", err)
	}

	// eBPF: probe once, log, and load what the kernel and privileges allow.
	cfg.Features = bpf.Probe()
	for _, f := range cfg.Features {
		if f.Err != nil {
			logger.Info("eBPF feature probe", "feature", f.Name, "status", f.Status().String(), "detail", f.Err.Error())
		} else {
			logger.Debug("eBPF feature probe", "feature", f.Name, "status", f.Status().String())
		}
	}
	var ebpfStats monitor.EBPF
	if *useEBPF {
		m, err := bpf.Load(bpf.Config{CgroupRoot: netRoot(cz), LatencyThreshold: *runqThreshold, AllCulprits: *allCulprits, Logger: logger})
		if err != nil {
			logger.Warn("running without eBPF: measuring with cgroupfs, PSI and procfs alone", "reason", err)
		} else {
			defer m.Close()
			cfg.EBPF = m
			ebpfStats = agent.MonitorStats(m)
		}
	}
	// Network QoS: the classifier and the TCP signals (bpf/netqos); the
	// agent paces revocable egress on the interfaces, or says why not.
	if *netInterfaces != "none" {
		unified := cz.Layout().Unified
		q := &agent.NetworkQoS{Interfaces: splitList(*netInterfaces), RevocableCgroup: filepath.Join(unified, cz.RevocableCgroup()),
			UnifiedRoot: unified, QdiscMajor: network.HandleMajor(cz.Root())}
		for _, f := range netqos.Probe() {
			if f.Err != nil {
				logger.Info("eBPF feature probe", "feature", f.Name, "status", f.Status().String(), "detail", f.Err.Error())
			}
			cfg.Features = append(cfg.Features, f)
		}
		if *useEBPF {
			progs, err := netqos.Load(netqos.Config{CgroupRoot: netRoot(cz), Logger: logger})
			if err != nil {
				q.ClassifierErr = err
			} else {
				defer progs.Close()
				q.Classifier, cfg.TCP = progs, progs
			}
		} else {
			q.ClassifierErr = errors.New("--ebpf=false")
		}
		cfg.NetworkQoS = q
		if cfg.EBPF != nil && cfg.TCP != nil {
			ebpfStats = agent.MonitorStatsWithTCP(cfg.EBPF, cfg.TCP)
		}
	}
	mon, err := monitor.New(monitor.Config{Mode: string(cz.Mode()), CgroupMountpoint: *cgroupMount, Interval: *monitorInterval,
		EBPF: ebpfStats, Logger: logger})
	if err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	defer mon.Close()
	cfg.Monitor = mon

	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	logger.Info("starting agent", "hostname", cfg.Hostname, "resources", a.Resources().String(), "cgroup_mode", string(cz.Mode()), "work_dir", workDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go cfg.Authz.ReloadOnHangup(ctx, logger)
	return a.Run(ctx)
}

// agentCredentials configures the agent's identity: the client
// certificate it dials the coordinator with, the same certificate serving
// its NodeService, and the authorization of NodeService callers (revoked
// client certificates refused).
func agentCredentials(cfg *agent.Config, caFile, certFile, keyFile, authzFile, crlFile string) error {
	if certFile != "" || keyFile != "" {
		creds := auth.ClientCredentials{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
		client, err := creds.HTTPClient()
		if err != nil {
			return err
		}
		cfg.HTTPClient = client
		if cfg.TLS, err = auth.ServerTLS(certFile, keyFile, caFile); err != nil {
			return err
		}
		leaf := cfg.TLS.Certificates[0].Leaf
		if cfg.Hostname == "" {
			cfg.Hostname = leaf.Subject.CommonName
		}
		if err := leaf.VerifyHostname(cfg.Hostname); err != nil {
			return fmt.Errorf("--cert is not valid for --hostname %s (the coordinator would refuse it): %w", cfg.Hostname, err)
		}
	} else if caFile != "" {
		client, err := auth.ClientCredentials{CAFile: caFile}.HTTPClient()
		if err != nil {
			return err
		}
		cfg.HTTPClient = client
	}
	if authzFile != "" {
		authz, err := auth.Load(authzFile)
		if err != nil {
			return err
		}
		cfg.Authz = authz
	}
	if crlFile != "" {
		if err := cfg.Authz.LoadCRL(crlFile, caFile, cfg.TLS); err != nil {
			return fmt.Errorf("--client-crl: %w", err)
		}
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// netRoot is where the network programs are attached in the v2 tree: the
// parent of the agent's root, so that they see the guaranteed subtree under
// the root and the revocable subtree beside it (cgroups.Subtree). With the
// root at the top of the hierarchy that is the whole tree; untracked
// cgroups cost each packet a map lookup.
func netRoot(cz *containerizer.Containerizer) string {
	return filepath.Dir(filepath.Join(cz.Layout().Unified, cz.Root()))
}
