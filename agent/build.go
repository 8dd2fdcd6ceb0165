package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/fetcher"
	"github.com/slackline/slackline/agent/images"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
	"github.com/slackline/slackline/internal/auth"
)

// Build validates the options and wires an agent from them, as
// slackline-agent runs it: credentials (TLS, authorization, revocation
// list), the containerizer (and the agent's own cgroup with IsolateAgent),
// the estimator and QoS controllers, the eBPF programs and network QoS as
// far as the kernel allows (it logs what it runs without), and the
// monitor. Run the agent with Run and release it with Close, which also
// closes what Build opened. Build must run as root.
func (o Options) Build() (a *Agent, err error) {
	startup := newStartupTimeline(time.Now)
	began := startup.start
	if err := o.Validate(); err != nil {
		return nil, err
	}
	logger := o.Logger
	if logger == nil {
		logger = defaultLogger(o.LogLevel, o.LogFormat)
	}
	cfg := Config{
		Coordinator: o.Coordinator, Listen: o.Listen, Hostname: o.Hostname, Resources: o.Resources,
		Attributes: o.Attributes, Logger: logger, MinBackoff: o.MinBackoff, MaxBackoff: o.MaxBackoff,
		Sandbox: o.sandboxConfig(), EstimateInterval: o.EstimateInterval, QoSIntervalMin: o.QoSIntervalMin, QuietDeferMax: o.QuietDeferMax,
		ProtectCgroups: o.ProtectCgroups, EstimatorName: o.Estimator, Pprof: o.Pprof, startup: startup,
		Fetch: fetcher.Config{CacheBytes: o.FetchCacheBytes, MaxBytes: o.FetchMaxBytes, Timeout: o.FetchTimeout},
	}
	if err := o.credentials(&cfg); err != nil {
		return nil, err
	}
	began = startup.phase("credentials", began)
	cfg.ReloadOnHangup = cfg.Authz != nil
	if o.Insecure && (cfg.TLS == nil || cfg.Authz == nil) {
		logger.Warn("running insecure: without TLS and --authz any local user, tasks included, can read every task's output through the NodeService", "listen", cfg.Listen)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("must run as root: the agent creates cgroups and starts tasks in them; run it with sudo or as the systemd unit in scripts/systemd")
	}
	if cfg.WorkDir, err = filepath.Abs(o.WorkDir); err != nil {
		return nil, fmt.Errorf("--work-dir: %w", err)
	}
	// What Build opened is closed on failure, and by Agent.Close after Run.
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()

	supervisor := o.SupervisorCommand
	if len(supervisor) == 0 {
		if supervisor, err = containerizer.FindSupervisor(o.Supervisor); err != nil {
			return nil, err
		}
	}
	cz, err := containerizer.New(containerizer.Config{
		CgroupRoot: o.CgroupRoot, CgroupMountpoint: o.CgroupMountpoint,
		StateDir: filepath.Join(cfg.WorkDir, "containers"), SandboxDir: filepath.Join(cfg.WorkDir, "sandboxes"),
		RevocableSandboxDir: o.RevocableSandboxDir, DiskLatencyTarget: o.DiskLatencyTarget,
		KillGracePeriod: o.KillGracePeriod, CPUHardLimit: o.CPUHardLimit, Logger: logger, SupervisorCommand: supervisor,
		TaskUser: o.TaskUser, DynamicIDs: o.DynamicUIDs, DynamicIDsDir: o.DynamicUIDsDir, AllowRootTasks: o.AllowRootTasks,
		OutputLimit: o.TaskOutputLimit, PidsMax: o.TaskPidsMax, SubtreePidsMax: o.SubtreePidsMax, Isolation: o.TaskIsolation,
	})
	if errors.Is(err, containerizer.ErrRevocableSandboxDir) {
		return nil, fmt.Errorf("--revocable-sandbox-dir: %w", err)
	}
	if err != nil {
		return nil, err
	}
	// Its Close ends the warm supervisors it keeps (the containers run on).
	closers = append(closers, cz.Close)
	if o.IsolateAgent {
		if err := cz.IsolateAgent(os.Getpid()); err != nil {
			return nil, fmt.Errorf("move the agent into its own cgroup (or run with --isolate-agent=false): %w", err)
		}
	}
	cfg.Containerizer = cz
	imageDir := o.ImageDir
	if imageDir == "" {
		imageDir = filepath.Join(cfg.WorkDir, "images")
	}
	budget := o.ImageDiskBudgetMiB << 20
	if o.ImageDiskBudgetMiB < 0 {
		budget = -1
	}
	if cfg.Images, err = images.Open(images.Config{
		Dir: imageDir, BudgetBytes: budget, Pulls: o.ImagePulls, PullTimeout: o.ImagePullTimeout,
		CredentialsFile: o.ImageCredentials, InsecureRegistries: o.ImageInsecureRegistries,
		LocalDirs: o.ImageLocalDirs, CAFile: o.ImageRegistryCA, Logger: logger,
	}); err != nil {
		return nil, fmt.Errorf("--image-dir, --image-registry-ca: %w", err)
	}
	cfg.UnifiedMount = cz.Layout().Unified
	began = startup.phase("containerizer", began)
	ctl, err := o.NewControllers()
	if err != nil {
		return nil, err
	}
	cfg.Estimator, cfg.QoS, cfg.QoSControllerNames = ctl.Estimator, ctl.QoS, ctl.QoSNames
	cfg.profiles = o.profileBuilder()
	if cfg.Shadows, err = o.NewShadows(); err != nil {
		return nil, err
	}

	// eBPF: the monitor's programs (whose verification is most of the
	// agent's start) are probed and loaded in the background: the agent
	// registers meanwhile, GetFeatures says they are loading, and their
	// signals join when loaded (lateEBPF). Without --ebpf only the probes
	// run, for GetFeatures.
	var ebpfStats monitor.EBPF
	if o.EBPF {
		late := newLateEBPF()
		cfg.EBPF, cfg.lateEBPF = late, late
		ebpfStats = MonitorStats(late)
		closers = append(closers, late.close)
	} else {
		cfg.Features = bpf.Probe()
		logProbes(logger, cfg.Features, slog.LevelDebug)
		began = startup.phase("ebpf_probes", began)
	}
	// Network QoS: the classifier and the TCP signals (bpf/netqos); the
	// agent paces revocable egress on the interfaces, or says why not.
	// They load before registration (network QoS is set up with the
	// classifier) and take tens of milliseconds.
	if !networkOff(o.NetworkInterfaces) {
		unified := cz.Layout().Unified
		q := &NetworkQoS{Interfaces: o.NetworkInterfaces, RevocableCgroup: filepath.Join(unified, cz.RevocableCgroup()),
			UnifiedRoot: unified, QdiscMajor: network.HandleMajor(cz.Root())}
		probes := netqos.Probe()
		logProbes(logger, probes, slog.LevelInfo-1) // only failures, at info
		cfg.Features = append(cfg.Features, probes...)
		if o.EBPF {
			progs, err := netqos.Load(netqos.Config{CgroupRoot: netRoot(cz), FullReadInterval: o.MonitorIdleRefresh, Logger: logger})
			if err != nil {
				q.ClassifierErr = err
			} else {
				closers = append(closers, progs.Close)
				q.Classifier, cfg.TCP = progs, progs
			}
		} else {
			q.ClassifierErr = errors.New("--ebpf=false")
		}
		cfg.NetworkQoS = q
		if cfg.EBPF != nil && cfg.TCP != nil {
			ebpfStats = MonitorStatsWithTCP(cfg.EBPF, cfg.TCP)
		}
		began = startup.phase("network_qos_programs", began)
	}
	mon, err := monitor.New(monitor.Config{Mode: string(cz.Mode()), CgroupMountpoint: o.CgroupMountpoint, CgroupRoot: o.CgroupRoot, Interval: o.MonitorInterval,
		IdleRefresh: o.MonitorIdleRefresh, EBPF: ebpfStats, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	closers = append(closers, mon.Close)
	cfg.Monitor = mon

	began = startup.phase("monitor", began)
	if a, err = New(cfg); err != nil {
		return nil, err
	}
	startup.phase("agent", began)
	a.closers = closers
	// Started once the rest is built: on a host short of CPU (a test
	// guest) the verification slowed what registration waits for.
	if late := cfg.lateEBPF; late != nil {
		loadStart := time.Now()
		late.start(func() {
			probes := bpf.Probe()
			logProbes(logger, probes, slog.LevelDebug)
			m, err := bpf.Load(bpf.Config{CgroupRoot: netRoot(cz), LatencyThreshold: o.RunqueueLatencyThreshold, EventBatchWindow: o.EBPFEventBatchWindow, AllCulprits: o.EBPFAllCulprits,
				FullReadInterval: o.MonitorIdleRefresh, Logger: logger})
			if err != nil {
				logger.Warn("running without eBPF: measuring with cgroupfs, PSI and procfs alone", "reason", err)
			}
			var loaded loadedEBPF
			if m != nil {
				loaded = m
			}
			if err := late.done(loaded, err, probes); err != nil {
				logger.Warn("eBPF monitor: tracking the containers started while it loaded", "err", err)
			}
			startup.phase("ebpf_monitor", loadStart)
			logger.Info("eBPF monitor ready", "loaded", loaded != nil, "took", time.Since(loadStart).Round(time.Millisecond),
				"since_start", startup.sinceStart().Round(time.Millisecond))
			bpf.ReleaseKernelBTF()
		})
	}
	logger.Info("agent configured", "hostname", a.cfg.Hostname, "resources", a.Resources().String(), "cgroup_mode", string(cz.Mode()), "work_dir", cfg.WorkDir)
	return a, nil
}

// logProbes logs eBPF feature probes: failures at info, successes at
// okLevel (below info: not at all at the default level).
func logProbes(logger *slog.Logger, probes []bpf.FeatureResult, okLevel slog.Level) {
	for _, f := range probes {
		if f.Err != nil {
			logger.Info("eBPF feature probe", "feature", f.Name, "status", f.Status().String(), "detail", f.Err.Error())
		} else {
			logger.Log(context.Background(), okLevel, "eBPF feature probe", "feature", f.Name, "status", f.Status().String())
		}
	}
}

// credentials configures the agent's identity: the client certificate it
// dials the coordinator with, the same certificate serving its
// NodeService, and the authorization of NodeService callers (revoked
// client certificates refused).
func (o Options) credentials(cfg *Config) error {
	if o.Cert != "" || o.Key != "" {
		creds := auth.ClientCredentials{CAFile: o.CA, CertFile: o.Cert, KeyFile: o.Key}
		client, err := creds.HTTPClient()
		if err != nil {
			return err
		}
		cfg.HTTPClient = client
		if cfg.TLS, err = auth.ServerTLS(o.Cert, o.Key, o.CA); err != nil {
			return err
		}
		leaf := cfg.TLS.Certificates[0].Leaf
		if cfg.Hostname == "" {
			cfg.Hostname = leaf.Subject.CommonName
		}
		if err := leaf.VerifyHostname(cfg.Hostname); err != nil {
			return fmt.Errorf("--cert is not valid for --hostname %s (the coordinator would refuse it): %w", cfg.Hostname, err)
		}
	} else if o.CA != "" {
		client, err := auth.ClientCredentials{CAFile: o.CA}.HTTPClient()
		if err != nil {
			return err
		}
		cfg.HTTPClient = client
	}
	if o.Authz != "" {
		authz, err := auth.Load(o.Authz)
		if err != nil {
			return err
		}
		cfg.Authz = authz
	}
	if o.ClientCRL != "" {
		if err := cfg.Authz.LoadCRL(o.ClientCRL, o.CA, cfg.TLS); err != nil {
			return fmt.Errorf("--client-crl: %w", err)
		}
	}
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
