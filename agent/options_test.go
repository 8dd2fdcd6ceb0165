package agent

import (
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/resources"
)

// TestDefaultOptions pins the defaults that scripts, manifests and docs
// rely on: they are the flags' defaults, and valid once the NodeService is
// secured or --insecure.
func TestDefaultOptions(t *testing.T) {
	t.Parallel()
	o := DefaultOptions()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"coordinator", o.Coordinator, "http://127.0.0.1:5050"},
		{"listen", o.Listen, "127.0.0.1:5051"},
		{"work-dir", o.WorkDir, "/var/lib/slackline/agent"},
		{"cgroup-root", o.CgroupRoot, "slackline"},
		{"cgroup-mountpoint", o.CgroupMountpoint, "/sys/fs/cgroup"},
		{"isolate-agent", o.IsolateAgent, true},
		{"kill-grace-period", o.KillGracePeriod, 3 * time.Second},
		{"image-disk-budget", o.ImageDiskBudgetMiB, int64(10240)},
		{"image-pulls", o.ImagePulls, 3},
		{"image-pull-timeout", o.ImagePullTimeout, 10 * time.Minute},
		{"task-user", o.TaskUser, containerizer.DefaultTaskUser},
		{"dynamic-uids", o.DynamicUIDs, containerizer.DefaultDynamicIDs},
		{"task-isolation", o.TaskIsolation, containerizer.DefaultIsolation},
		{"task-pids-max", o.TaskPidsMax, int64(containerizer.DefaultPidsMax)},
		{"task-output-limit", o.TaskOutputLimit, int64(containerizer.DefaultOutputLimit)},
		{"gc-delay", o.Sandbox.GCDelay, DefaultSandboxGCDelay},
		{"log-level", o.LogLevel, slog.LevelInfo},
		{"monitor-interval", o.MonitorInterval, 100 * time.Millisecond},
		{"monitor-idle-refresh", o.MonitorIdleRefresh, 5 * time.Second},
		{"ebpf", o.EBPF, true},
		{"runqueue-latency-threshold", o.RunqueueLatencyThreshold, time.Millisecond},
		{"estimator", o.Estimator, "calibrated"},
		{"estimator-target-violation", o.EstimatorConfig.Calibration.TargetViolation, 0.01},
		{"estimator-rise-interval", o.EstimatorConfig.RiseInterval, 500 * time.Millisecond},
		{"oversubscribed-resources-interval", o.EstimateInterval, 100 * time.Millisecond},
		{"qos-controller", strings.Join(o.QoSControllers, ","), "cpuset,interference,reclaim,diskio"},
		{"qos-correction-interval-min", o.QoSIntervalMin, 250 * time.Millisecond},
		{"insecure", o.Insecure, false},
		{"network-interfaces", len(o.NetworkInterfaces), 0},
	} {
		if c.got != c.want {
			t.Errorf("default --%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--insecure") || !strings.Contains(err.Error(), "refusing to listen") {
		t.Errorf("defaults without credentials: %v, want the NodeService refused without --insecure", err)
	}
	o.Insecure = true
	if err := o.Validate(); err != nil {
		t.Errorf("defaults with --insecure: %v", err)
	}
	o = DefaultOptions()
	o.Cert, o.Key, o.Authz = "agent.crt", "agent.key", "authz.yaml"
	if err := o.Validate(); err != nil {
		t.Errorf("defaults with credentials: %v", err)
	}
}

// TestOptionsValidate: every bad setting is reported, naming its flag.
func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		modify func(*Options)
		want   []string
	}{
		{"no coordinator", func(o *Options) { o.Coordinator = " " }, []string{"--coordinator: required"}},
		{"listen without port", func(o *Options) { o.Listen = "127.0.0.1" }, []string{"--listen: address 127.0.0.1: missing port"}},
		{"no work dir", func(o *Options) { o.WorkDir = "" }, []string{"--work-dir: required"}},
		{"relative revocable sandbox dir", func(o *Options) { o.RevocableSandboxDir = "scratch" }, []string{`--revocable-sandbox-dir: "scratch" is not an absolute path`}},
		{"negative latency target", func(o *Options) { o.DiskLatencyTarget = -time.Millisecond }, []string{"--diskio-latency-target: must not be negative, got -1ms"}},
		{"cert without key", func(o *Options) { o.Cert = "a.crt" }, []string{"--cert: --cert and --key go together"}},
		{"crl without authz", func(o *Options) { o.ClientCRL = "crl.pem" }, []string{"--client-crl: needs --authz", "--client-crl: needs --ca and --cert"}},
		{"bad resources", func(o *Options) { o.Resources = "cpus:many" }, []string{"--resources: "}},
		{"absolute cgroup root", func(o *Options) { o.CgroupRoot = "/slackline" }, []string{"--cgroup-root: invalid cgroup root"}},
		{"zero grace", func(o *Options) { o.KillGracePeriod = 0 }, []string{"--kill-grace-period: must be positive"}},
		{"no task user", func(o *Options) { o.TaskUser = "" }, []string{"--task-user: required"}},
		{"watermark above 1", func(o *Options) { o.Sandbox.DiskWatermark = 1.5 }, []string{"--gc-disk-watermark: must be in (0, 1], got 1.5"}},
		{"no gc delay", func(o *Options) { o.Sandbox.GCDelay = -time.Second }, []string{"--gc-delay: must be positive"}},
		{"fast monitor", func(o *Options) { o.MonitorInterval = time.Millisecond }, []string{"--monitor-interval: must be at least 10ms"}},
		{"no idle refresh", func(o *Options) { o.MonitorIdleRefresh = 0 }, []string{"--monitor-idle-refresh: must be in (0, 1m]"}},
		{"idle refresh past the blind hold", func(o *Options) { o.MonitorIdleRefresh = 2 * time.Minute }, []string{"--monitor-idle-refresh: must be in (0, 1m]"}},
		{"negative threshold", func(o *Options) { o.RunqueueLatencyThreshold = -1 }, []string{"--runqueue-latency-threshold: must not be negative"}},
		{"zero estimate interval", func(o *Options) { o.EstimateInterval = 0 }, []string{"--oversubscribed-resources-interval: must be positive"}},
		{"unknown estimator", func(o *Options) { o.Estimator = "magic" }, []string{"--estimator magic", "unknown estimator"}},
		{"bad percentile", func(o *Options) { o.Estimator = "usage"; o.EstimatorConfig.Percentile = 120 }, []string{"--estimator usage", "percentile 120"}},
		{"unknown qos controller", func(o *Options) { o.QoSControllers = []string{"cpuset", "magic"} }, []string{"--qos-controller cpuset,magic"}},
		{"no qos controller", func(o *Options) { o.QoSControllers = nil }, []string{"--qos-controller", "no qos controller named"}},
		{"negative memory floor", func(o *Options) { o.QoSMemoryMinAvailableMiB = -1 }, []string{"--qos-memory-min-available: must not be negative"}},
		{"none with interfaces", func(o *Options) { o.NetworkInterfaces = []string{"eth0", "none"} }, []string{`--network-interfaces: "none"`}},
		{"zero image budget", func(o *Options) { o.ImageDiskBudgetMiB = 0 }, []string{"--image-disk-budget: must not be 0"}},
		{"no image pulls", func(o *Options) { o.ImagePulls = 0 }, []string{"--image-pulls: must be positive"}},
		{"no pull timeout", func(o *Options) { o.ImagePullTimeout = 0 }, []string{"--image-pull-timeout: must be positive"}},
		{"relative local dir", func(o *Options) { o.ImageLocalDirs = []string{"images"} }, []string{`--image-local-dirs: "images" is not an absolute path`}},
		{"two problems at once", func(o *Options) { o.WorkDir, o.KillGracePeriod = "", 0 }, []string{"--work-dir", "--kill-grace-period"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := DefaultOptions()
			o.Insecure = true
			tc.modify(&o)
			err := o.Validate()
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestOptionsFromConfigFile reads the agent's settings from a config file
// and the command line, as slackline-agent does.
func TestOptionsFromConfigFile(t *testing.T) {
	t.Parallel()
	file := `
coordinator: https://coordinator-0:5050,https://coordinator-1:5050
listen: 0.0.0.0:5051
attributes: rack=r1,zone=z2
resources: cpus:4;mem:8192;ports:[31000-32000]
dynamic-uids: 700000-700999
task-isolation: [namespaces]
log-level: debug
ebpf: false
network-interfaces: [eth0, eth1]
fixed-revocable: cpus:2;bandwidth:500
estimator: fixed
qos-controller: [interference, memory]
qos-runqueue-p99: 2ms
qos-cpu-pressure: 50
qos-event-count: 0
qos-network-saturation: 0.5
qos-memory-min-available: 512
protect-cgroup: [system.slice/etcd.service, system.slice/nginx.service]
insecure: true
`
	var o Options
	fs := flag.NewFlagSet("slackline-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--listen", "10.0.0.1:5051", "--protect-cgroup", "cli.slice"}); err != nil {
		t.Fatal(err)
	}
	if err := cliconfig.Apply(fs, "agent.yaml", []byte(file)); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	fixed := resources.MustParse("cpus:2;bandwidth:500")
	qc := o.QoSConfig()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"coordinator", o.Coordinator, "https://coordinator-0:5050,https://coordinator-1:5050"},
		{"listen (command line)", o.Listen, "10.0.0.1:5051"},
		{"attributes", formatAttributes(o.Attributes), "rack=r1,zone=z2"},
		{"resources", o.Resources, "cpus:4;mem:8192;ports:[31000-32000]"},
		{"dynamic-uids", o.DynamicUIDs, containerizer.IDRange{First: 700000, Count: 1000}},
		{"task-isolation", o.TaskIsolation, containerizer.Isolation{NoSeccomp: true}},
		{"log-level", o.LogLevel, slog.LevelDebug},
		{"ebpf", o.EBPF, false},
		{"network-interfaces", strings.Join(o.NetworkInterfaces, ","), "eth0,eth1"},
		{"fixed-revocable", o.EstimatorConfig.Fixed.String(), fixed.String()},
		{"estimator", o.Estimator, "fixed"},
		{"qos-controller", strings.Join(o.QoSControllers, ","), "interference,memory"},
		{"qos-runqueue-p99", qc.Interference.RunqP99Enter, 2 * time.Millisecond},
		{"qos-runqueue-p99 exit", qc.Interference.RunqP99Exit, time.Millisecond},
		{"qos-cpu-pressure", qc.Interference.CPUPressureEnter, 50.0},
		{"qos-cpu-pressure exit", qc.Interference.CPUPressureExit, 20.0},
		{"qos-event-count", qc.Interference.EventCount, 0},
		{"qos-network-saturation exit", qc.Network.SaturationExit, 0.4},
		{"qos-memory-min-available", qc.Memory.MinAvailableBytes, uint64(512 << 20)},
		{"qos-memory fraction", qc.Memory.MinAvailableFraction, 0.0},
		{"protect-cgroup (command line)", strings.Join(o.ProtectCgroups, ","), "cli.slice"},
		{"insecure", o.Insecure, true},
		{"estimator-window (default)", o.EstimatorConfig.Window, DefaultOptions().EstimatorConfig.Window},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// A setting's own syntax is checked by its flag.
	for key, want := range map[string]string{
		"dynamic-uids: 5":             "dynamic-uids: invalid value",
		"task-isolation: [chroot]":    "task-isolation: invalid value \"chroot\"",
		"attributes: rack":            "attribute \"rack\" is not name=value",
		"log-level: loud":             "log-level: invalid value \"loud\"",
		"qos-kill-after: 5":           "want a duration",
		"estimator-percentile: high":  "want a number",
		"network-interface: eth0":     "did you mean network-interfaces?",
		"fixed-revocable: cpus:-1;;":  "fixed-revocable: invalid value",
		"subtree-pids-max: 1.5":       "want an integer",
		"oversubscribe-memory: maybe": "want true or false",
	} {
		var o Options
		fs := flag.NewFlagSet("slackline-agent", flag.ContinueOnError)
		o.AddFlags(fs)
		err := cliconfig.Apply(fs, "agent.yaml", []byte(key+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", key, err, want)
		}
	}
}
