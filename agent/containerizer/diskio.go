package containerizer

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// DiskIOSupport says what the host offers of disk I/O QoS for revocable
// work, and why not where it offers nothing.
type DiskIOSupport struct {
	// Cap: the revocable subtree's reads and writes can be capped per
	// device (v2 io.max, v1 blkio.throttle.*) on Devices.
	Cap    bool
	CapWhy string
	// Devices are the block devices ("MAJ:MIN", whole disks) of the
	// sandbox directories, where tasks write: the revocable sandboxes'
	// disk first, then the guaranteed sandboxes' if it is another.
	Devices []string
	// Weight: the revocable subtree has a low I/O weight that the disk's
	// I/O scheduler honours (BFQ, or io.cost on v2).
	Weight    bool
	WeightWhy string
	// RequestSize: the disk's largest request (queue/max_sectors_kb) can
	// be lowered while revocable I/O is capped (SetDiskRequestKiB).
	RequestSize    bool
	RequestSizeWhy string
	// SharedJournal: guaranteed and revocable sandboxes are on one file
	// system with a journal (ext4, xfs), so a revocable writer holding a
	// journal handle can stall guaranteed fsyncs whatever the cap and
	// weight (revocableJournal); JournalWhy says which, or why not.
	SharedJournal bool
	JournalWhy    string
	// Latency: guaranteed I/O on Devices has an io.latency target
	// (Config.DiskLatencyTarget), which orders revocable I/O behind it
	// while it is missed; LatencyWhy says which, or why not.
	Latency    bool
	LatencyWhy string
	// Mechanisms names the mechanisms in words (not the journal), for
	// GetFeatures.
	Mechanisms string
}

// setupDiskIO sets the revocable subtree up for disk I/O QoS (SetupIO)
// and finds the sandbox directory's disk. Failing that, it clears
// layout.Blkio (revocable tasks do not join a blkio cgroup) and says why.
func setupDiskIO(layout *cgroups.Layout, cfg Config) DiskIOSupport {
	var s DiskIOSupport
	// Whatever the controllers can do: a shared journal is beyond them.
	s.SharedJournal, s.JournalWhy = sandboxJournal(cfg)
	if err := layout.SetupIO(cfg.CgroupRoot); err != nil {
		layout.Blkio = ""
		s.CapWhy, s.WeightWhy = err.Error(), err.Error()
		s.Mechanisms = "none: " + err.Error()
		return s
	}
	dev, err := diskOf(cmp.Or(cfg.RevocableSandboxDir, cfg.SandboxDir), cfg.SysRoot)
	if err != nil {
		s.CapWhy = err.Error()
	} else {
		s.Cap, s.Devices = true, []string{dev}
		if cfg.RevocableSandboxDir != "" {
			if other, err := diskOf(cfg.SandboxDir, cfg.SysRoot); err == nil && other != dev {
				s.Devices = append(s.Devices, other)
			}
		}
		s.CapWhy = fmt.Sprintf("%s on %s", capMechanism(layout.Mode), strings.Join(s.Devices, ", "))
		s.RequestSize, s.RequestSizeWhy = requestSizeSupport(cfg.SysRoot, s.Devices)
		s.Latency, s.LatencyWhy = diskLatency(layout, cfg, s.Devices)
	}
	sched := "unknown"
	if dev != "" {
		sched = activeScheduler(cfg.SysRoot, dev)
	}
	files := layout.IOWeightFiles(cfg.CgroupRoot)
	switch {
	case len(files) == 0:
		s.WeightWhy = "no weight file in the revocable subtree (v1 blkio.weight and io.bfq.weight need BFQ; io.weight needs io.cost)"
	case sched == "bfq" || ioCostEnabled(layout, dev):
		s.Weight = true
		s.WeightWhy = fmt.Sprintf("%d in %s (scheduler %s)", cgroups.RevocableIOWeight, strings.Join(files, ", "), sched)
	default:
		s.WeightWhy = fmt.Sprintf("%s written, but %s's scheduler is %q: weights need bfq (or io.cost on v2)", strings.Join(files, ", "), dev, sched)
	}
	var parts []string
	if s.Cap {
		parts = append(parts, "cap: "+s.CapWhy)
		if layout.Mode != cgroups.ModeV2 {
			// v1 charges writeback to the flusher threads, in the root
			// blkio cgroup, and has no per-cgroup dirty limits.
			parts = append(parts, "buffered writes escape the cap (v1 writeback is charged to the root blkio cgroup): it holds direct and synchronous I/O only")
		}
	} else {
		parts = append(parts, "no cap: "+s.CapWhy)
	}
	if s.RequestSize {
		parts = append(parts, "request size: "+s.RequestSizeWhy)
	} else if s.Cap {
		parts = append(parts, "no request size: "+s.RequestSizeWhy)
	}
	if s.Weight {
		parts = append(parts, "weight: "+s.WeightWhy)
	} else {
		parts = append(parts, "no weight: "+s.WeightWhy)
	}
	switch {
	case s.Latency:
		parts = append(parts, "latency target: "+s.LatencyWhy)
	case s.LatencyWhy != "":
		parts = append(parts, "no latency target: "+s.LatencyWhy)
	}
	s.Mechanisms = strings.Join(parts, "; ")
	return s
}

// diskLatency sets CgroupRoot's io.latency target on devices, or removes
// it (Config.DiskLatencyTarget 0: a previous agent's must not linger),
// and says whether guaranteed I/O now has one, and which or why not ("",
// when none was asked for and the kernel has none to offer).
func diskLatency(layout *cgroups.Layout, cfg Config, devices []string) (bool, string) {
	target := cfg.DiskLatencyTarget
	err := layout.SetIOLatency(cfg.CgroupRoot, devices, target)
	switch {
	case target <= 0 && err == nil:
		return false, "off (the kernel offers io.latency: --diskio-latency-target)"
	case target <= 0:
		return false, ""
	case err != nil:
		return false, fmt.Sprintf("%v asked, not set: %v", target, err)
	}
	return true, fmt.Sprintf("io.latency target=%v on %s for %s: while guaranteed I/O misses it, the kernel cuts the queue depth of the root's peers without a target (the revocable subtree, and any other cgroup beside the root)",
		target, cfg.CgroupRoot, strings.Join(devices, ", "))
}

// sandboxJournal reads the sandbox directories' file systems and says
// whether guaranteed and revocable sandboxes share a journal
// (revocableJournal), or why it cannot tell.
func sandboxJournal(cfg Config) (bool, string) {
	sandbox, err := statFS(cfg.SandboxDir)
	if err != nil {
		return false, "journal sharing unknown: " + err.Error()
	}
	rev := sandbox
	if cfg.RevocableSandboxDir != "" {
		if rev, err = statFS(cfg.RevocableSandboxDir); err != nil {
			return false, "journal sharing unknown: " + err.Error()
		}
	}
	return revocableJournal(sandbox, rev, cfg.RevocableSandboxDir != "")
}

func capMechanism(mode cgroups.Mode) string {
	if mode == cgroups.ModeV2 {
		return "io.max"
	}
	return "blkio.throttle.{read,write}_bps_device"
}

// diskOf returns the whole disk ("MAJ:MIN") holding dir.
func diskOf(dir, sysRoot string) (string, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", dir, err)
	}
	major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
	if major == 0 {
		return "", fmt.Errorf("%s is on a file system without a block device (device %d:%d: overlay, tmpfs, btrfs subvolume?)", dir, major, minor)
	}
	dev := fmt.Sprintf("%d:%d", major, minor)
	block := filepath.Join(sysRoot, "dev", "block", dev)
	if _, err := os.Stat(filepath.Join(block, "partition")); err == nil {
		parent, err := os.ReadFile(filepath.Join(block, "..", "dev"))
		if err != nil {
			return "", fmt.Errorf("disk of partition %s: %w", dev, err)
		}
		dev = strings.TrimSpace(string(parent))
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("stat %s: %w", block, err)
	}
	if _, err := os.Stat(filepath.Join(sysRoot, "dev", "block", dev, "queue")); err != nil {
		return "", fmt.Errorf("device %s of %s is not a disk with a request queue (device-mapper or md?): %w", dev, dir, err)
	}
	return dev, nil
}

// activeScheduler returns the bracketed scheduler of a disk, "" unknown.
func activeScheduler(sysRoot, dev string) string {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	data, err := os.ReadFile(filepath.Join(sysRoot, "dev", "block", dev, "queue", "scheduler"))
	if err != nil {
		return ""
	}
	for f := range strings.FieldsSeq(string(data)) {
		if strings.HasPrefix(f, "[") {
			return strings.Trim(f, "[]")
		}
	}
	return ""
}

// ioCostEnabled reports whether io.cost is enabled for dev (v2 root's
// io.cost.qos "MAJ:MIN enable=1 ...").
func ioCostEnabled(layout *cgroups.Layout, dev string) bool {
	data, err := os.ReadFile(filepath.Join(layout.Unified, "io.cost.qos"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, dev+" ") && strings.Contains(line, "enable=1") {
			return true
		}
	}
	return false
}

// DiskIO returns what the host offers of disk I/O QoS.
func (c *Containerizer) DiskIO() DiskIOSupport { return c.diskIO }

// SetRevocableIOLimit caps the revocable subtree's reads and writes to bps
// bytes per second on each of the sandbox's disks (0: no cap). It wraps
// ErrUnsupported where the host cannot cap.
func (c *Containerizer) SetRevocableIOLimit(bps uint64) error {
	defer c.forgetLevers()
	if !c.diskIO.Cap {
		return fmt.Errorf("%w: %s", ErrUnsupported, c.diskIO.CapWhy)
	}
	if err := c.layout.SetIOLimit(c.RevocableCgroup(), c.diskIO.Devices, bps); err != nil {
		return fmt.Errorf("set revocable I/O cap: %w", err)
	}
	return nil
}

// RevocableIOLimit returns the revocable subtree's write cap on the
// sandbox's disk, in bytes per second (0: none).
func (c *Containerizer) RevocableIOLimit() (uint64, error) {
	if !c.diskIO.Cap {
		return 0, fmt.Errorf("%w: %s", ErrUnsupported, c.diskIO.CapWhy)
	}
	return c.leverLayout().IOLimit(c.RevocableCgroup(), c.diskIO.Devices[0])
}

// RevocableIOBytes returns the bytes the revocable subtree has read and
// written on the sandbox's disk (the capped device) since it was made.
func (c *Containerizer) RevocableIOBytes() (uint64, error) {
	if !c.diskIO.Cap {
		return 0, fmt.Errorf("%w: %s", ErrUnsupported, c.diskIO.CapWhy)
	}
	return c.polledLayout().IOBytes(c.RevocableCgroup(), c.diskIO.Devices[0])
}
