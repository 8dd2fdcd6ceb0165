package agent

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/slackline/slackline/agent/network"
	"github.com/slackline/slackline/resources"
)

// defaultPorts is the port range offered when --resources names none.
var defaultPorts = resources.Ranges{{Begin: 31000, End: 32000}}

// MemoryBound returns the limit (bytes) that bounds the node's memory below
// the host's hostTotal bytes and the cgroup that sets it, 0 and "" when none
// does: (*monitor.Monitor).MemoryLimit, the bound the monitor's node samples
// use.
type MemoryBound func(hostTotal uint64) (limit uint64, cgroup string, err error)

// DetectResources returns the host's resources as Mesos computes them:
// every CPU; memory less a reserve for the system (1 GiB, or half when the
// host has less than 2 GiB); the disk of workDir less a reserve (5 GiB, or
// half below 10 GiB); ports 31000-32000; bandwidth, the link speed of the
// default-route interface in Mbit/s (none, logged, when it reports no speed,
// as virtual NICs do). Scalars and ports named in override replace the
// detected ones.
//
// The node's memory is the host's MemTotal or, when memBound (may be nil)
// gives a lower limit (the agent's cgroup root or an ancestor has one,
// #28), that limit: the reserve is taken from it, and a mem named in
// override above it is lowered to it (logged), so that the agent never
// registers, and its estimator never offers as slack, memory the node
// cannot back. A bound that cannot be read is logged and the host's
// figure used. A mem named in override keeps no reserve, bounded or not:
// the operator chose it (the colocation benchmark registers its bounded
// node whole for one server), and the revocable slack no longer relies on
// a reserve to leave the kernel and the agent their memory: the estimate
// measures what the node holds beyond its containers and keeps the QoS
// controllers' lines free (estimator.NodeMemory, #28).
func DetectResources(workDir, override string, log *slog.Logger, memBound MemoryBound) (resources.Resources, error) {
	return detectResources(workDir, override, log, hostProbes{procRoot: "/proc", bandwidth: network.DetectBandwidth, memBound: memBound})
}

// hostProbes are the host figures detectResources reads, passed in so that
// tests can point them at fake trees.
type hostProbes struct {
	procRoot  string // where /proc/meminfo is read
	bandwidth func(sysRoot string) (network.Bandwidth, error)
	memBound  MemoryBound // nil: none
}

// detectResources is DetectResources with the host's probes passed in.
func detectResources(workDir, override string, log *slog.Logger, host hostProbes) (resources.Resources, error) {
	named, err := namedResources(override)
	if err != nil {
		return resources.Resources{}, err
	}
	over, err := resources.Parse(override)
	if err != nil {
		return resources.Resources{}, fmt.Errorf("--resources: %w", err)
	}
	var detected resources.Resources
	if !named[resources.NameCPUs] {
		detected = detected.With(resources.CPUs, float64(runtime.NumCPU()))
	}
	boundMiB, err := memoryBoundMiB(host, log)
	if err != nil {
		return resources.Resources{}, err
	}
	if !named[resources.NameMem] {
		total := boundMiB
		if total == 0 {
			if total, err = memTotalMiB(host.procRoot); err != nil {
				return resources.Resources{}, fmt.Errorf("detect memory (or set mem in --resources): %w", err)
			}
		}
		detected = detected.With(resources.Mem, total-reserve(total, 1024))
	} else if told := over.Mem(); boundMiB > 0 && told > boundMiB {
		log.Warn("--resources mem is more than the node's memory limit: registering the limit, since memory above it cannot be backed",
			"mem_mib", told, "limit_mib", boundMiB)
		over = over.With(resources.Mem, boundMiB)
	}
	if !named[resources.NameDisk] {
		var st syscall.Statfs_t
		if err := syscall.Statfs(workDir, &st); err != nil {
			return resources.Resources{}, fmt.Errorf("detect disk of %s (or set disk in --resources): %w", workDir, err)
		}
		total := float64(st.Blocks) * float64(st.Bsize) / (1 << 20)
		detected = detected.With(resources.Disk, total-reserve(total, 5*1024))
	}
	if !named[resources.NamePorts] {
		detected = detected.WithPorts(defaultPorts)
	}
	if !named[resources.NameBandwidth] {
		bw, err := host.bandwidth("")
		switch {
		case err == nil:
			detected = detected.With(resources.Bandwidth, bw.Mbps)
		case errors.Is(err, network.ErrUnknownSpeed):
			log.Info("no bandwidth resource: the default-route interface reports no link speed (a virtual NIC?); set bandwidth in --resources to register one",
				"interface", bw.Interface)
		default:
			log.Info("no bandwidth resource: set bandwidth in --resources to register one", "reason", err)
		}
	}
	return detected.Add(over), nil
}

// reserve is what the system keeps of total: want, or half of a small total.
func reserve(total, want float64) float64 {
	if total < 2*want {
		return total / 2
	}
	return want
}

func namedResources(text string) (map[string]bool, error) {
	named := map[string]bool{}
	for item := range strings.SplitSeq(text, ";") {
		if name, _, ok := strings.Cut(strings.TrimSpace(item), ":"); ok {
			named[strings.TrimSpace(name)] = true
		}
	}
	return named, nil
}

// memoryBoundMiB returns the limit bounding the node's memory in MiB (0:
// none, or it could not be read, which is logged). It fails only when the
// host's MemTotal, which the bound is compared with, cannot be read.
func memoryBoundMiB(host hostProbes, log *slog.Logger) (float64, error) {
	if host.memBound == nil {
		return 0, nil
	}
	hostMiB, err := memTotalMiB(host.procRoot)
	if err != nil {
		return 0, fmt.Errorf("detect memory: %w", err)
	}
	limit, cgroup, err := host.memBound(uint64(hostMiB * (1 << 20)))
	if err != nil {
		log.Warn("could not read every memory limit above the cgroup root; using what was read", "err", err)
	}
	if limit == 0 {
		return 0, nil
	}
	limitMiB := float64(limit) / (1 << 20)
	log.Info("node memory bounded by a cgroup limit", "cgroup", cgroup, "limit_mib", limitMiB, "host_mib", hostMiB)
	return limitMiB, nil
}

func memTotalMiB(procRoot string) (float64, error) {
	f, err := os.Open(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("parse MemTotal: %w", err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// ParseAttributes parses "rack=r1,zone=z2" into attributes (names unique).
func ParseAttributes(text string) (map[string]string, error) {
	out := map[string]string{}
	for item := range strings.SplitSeq(text, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("attribute %q is not name=value", item)
		}
		if _, dup := out[strings.TrimSpace(k)]; dup {
			return nil, fmt.Errorf("attribute %q is given twice", k)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}
