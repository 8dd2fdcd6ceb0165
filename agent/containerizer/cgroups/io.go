package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Disk I/O of revocable work: a low weight, so that it yields the disk to
// guaranteed work where the I/O scheduler honours weights, and a per-device
// cap on the revocable subtree that the disk I/O QoS controller lowers and
// raises.
//
//	              cgroup v2                               hybrid (v1 blkio)
//	weight        io.weight "default 10" (io.cost),       blkio.weight / blkio.bfq.weight 10
//	              io.bfq.weight 10 (BFQ)                  (BFQ only)
//	cap           io.max "MAJ:MIN rbps=N wbps=N"          blkio.throttle.{read,write}_bps_device
//	membership    the revocable subtree's children        revocable tasks join <blkio>/<root>-revocable
//	                                                      (Paths.Blkio), guaranteed ones stay at the root
//	latency       io.latency "MAJ:MIN target=US" on the   none (io.latency is v2 only)
//	              root: its peers without a target, the
//	              revocable subtree among them, get their
//	              queue depth cut while it misses it
//
// A weight file the kernel lacks (no BFQ, no io.cost) is skipped, and
// IOMechanisms says so.

// RevocableIOWeight is the revocable subtree's I/O weight (of 1-10000 on
// v2 and BFQ, 10-1000 on v1 CFQ; the default is 100).
const RevocableIOWeight = 10

// detectBlkio returns the v1 blkio hierarchy of a hybrid host with
// throttling, or "".
func detectBlkio(mountpoint string) string {
	dir := filepath.Join(mountpoint, "blkio")
	if exists(filepath.Join(dir, "blkio.throttle.read_bps_device")) {
		return dir
	}
	return ""
}

// SetupIO prepares root's revocable subtree for disk I/O QoS: on hybrid
// hosts with the blkio hierarchy it creates the subtree there (revocable
// containers join it, Paths.Blkio); on v2 the subtree's parent must
// delegate the io controller. It sets the subtree's weight where a weight
// file exists. It wraps ErrUnsupported without a usable io or blkio
// controller, and never changes a cgroup that is not Slackline's.
func (l Layout) SetupIO(root string) error {
	if err := ValidateRoot(root); err != nil {
		return err
	}
	revocable := Subtree(root, Revocable)
	var dir string
	var weights []string
	switch l.Mode {
	case ModeV2:
		parent := filepath.Dir(filepath.Join(l.Unified, revocable))
		data, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
		if err != nil {
			return wrap("read", filepath.Join(parent, "cgroup.subtree_control"), err)
		}
		if !slices.Contains(strings.Fields(string(data)), "io") {
			return fmt.Errorf("%w: %s does not delegate the io controller (cgroup.subtree_control: %q)",
				ErrUnsupported, parent, strings.TrimSpace(string(data)))
		}
		dir = filepath.Join(l.Unified, revocable)
		weights = []string{"io.weight", "io.bfq.weight"}
	default:
		if l.Blkio == "" {
			return fmt.Errorf("%w: no blkio hierarchy with throttling at %s", ErrUnsupported, filepath.Join(l.Mountpoint, "blkio"))
		}
		dir = filepath.Join(l.Blkio, revocable)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return wrap("create", dir, err)
		}
		weights = []string{"blkio.weight", "blkio.bfq.weight"}
	}
	for _, name := range weights {
		file := filepath.Join(dir, name)
		if !exists(file) {
			continue
		}
		value := strconv.Itoa(RevocableIOWeight)
		if name == "io.weight" {
			value = "default " + value
		}
		if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
			return wrap("write", file, err)
		}
	}
	return nil
}

// IOWeightFiles returns the weight files of the revocable subtree that
// exist (SetupIO wrote them): empty when no scheduler honours weights.
func (l Layout) IOWeightFiles(root string) []string {
	revocable := Subtree(root, Revocable)
	var out []string
	for _, f := range []string{filepath.Join(l.Unified, revocable, "io.weight"), filepath.Join(l.Unified, revocable, "io.bfq.weight")} {
		if l.Mode == ModeV2 && exists(f) {
			out = append(out, f)
		}
	}
	if l.Blkio != "" {
		for _, name := range []string{"blkio.weight", "blkio.bfq.weight"} {
			if f := filepath.Join(l.Blkio, revocable, name); exists(f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// SetIOLimit caps the reads and the writes of the cgroup at rel to bps
// bytes per second on each device ("MAJ:MIN"); bps 0 removes the caps. It
// wraps ErrUnsupported without io.max (v2) or blkio throttling (hybrid).
func (l Layout) SetIOLimit(rel string, devices []string, bps uint64) error {
	for _, dev := range devices {
		if err := validDevice(dev); err != nil {
			return err
		}
		switch l.Mode {
		case ModeV2:
			file := filepath.Join(l.Unified, rel, "io.max")
			if !exists(file) {
				return fmt.Errorf("%w: %s does not exist (io controller not delegated)", ErrUnsupported, file)
			}
			value := dev + " rbps=max wbps=max"
			if bps > 0 {
				value = fmt.Sprintf("%s rbps=%d wbps=%d", dev, bps, bps)
			}
			if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
				return wrap("write", file, err)
			}
		default:
			if l.Blkio == "" {
				return fmt.Errorf("%w: no blkio hierarchy with throttling", ErrUnsupported)
			}
			for _, name := range []string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"} {
				file := filepath.Join(l.Blkio, rel, name)
				if err := os.WriteFile(file, []byte(fmt.Sprintf("%s %d", dev, bps)), 0o644); err != nil {
					return wrap("write", file, err)
				}
			}
		}
	}
	return nil
}

// SetIOLatency sets the io.latency target of the cgroup at rel on each
// device ("MAJ:MIN"); target 0 removes it ("target=max"). The kernel's
// blk-iolatency then cuts the queue depth of rel's peers (its parent's
// other children) that have no target, or a looser one, whenever rel's
// I/O misses the target (its mean latency over a window on a rotational
// disk, the share of late requests on others), and gives it back as the
// target is met again. Set on the root, whose peer is the revocable
// subtree (root+RevocableSuffix), it orders revocable I/O behind
// guaranteed I/O at the disk's pace rather than capping its rate. It wraps
// ErrUnsupported off v2, or where the kernel has no io.latency (no
// CONFIG_BLK_CGROUP_IOLATENCY, or the io controller not delegated to rel).
// The target is rounded down to whole microseconds.
func (l Layout) SetIOLatency(rel string, devices []string, target time.Duration) error {
	if l.Mode != ModeV2 {
		return fmt.Errorf("%w: io.latency is cgroup v2 only (this host's blkio is v1)", ErrUnsupported)
	}
	if target < 0 {
		return fmt.Errorf("io.latency target %v: must not be negative", target)
	}
	file := filepath.Join(l.Unified, rel, "io.latency")
	if !exists(file) {
		return fmt.Errorf("%w: %s does not exist (the kernel lacks io.latency, or the io controller is not delegated)", ErrUnsupported, file)
	}
	value := "max"
	if target > 0 {
		value = strconv.FormatInt(max(target.Microseconds(), 1), 10)
	}
	for _, dev := range devices {
		if err := validDevice(dev); err != nil {
			return err
		}
		if err := os.WriteFile(file, []byte(dev+" target="+value), 0o644); err != nil {
			return wrap("write", file, err)
		}
	}
	return nil
}

// IOLatency reads the io.latency target SetIOLatency set on device dev of
// the cgroup at rel (0: none).
func (l Layout) IOLatency(rel, dev string) (time.Duration, error) {
	if l.Mode != ModeV2 {
		return 0, fmt.Errorf("%w: io.latency is cgroup v2 only", ErrUnsupported)
	}
	file := filepath.Join(l.Unified, rel, "io.latency")
	v, err := l.deviceValue(file, dev, "target=")
	if err != nil || v == "" {
		return 0, err
	}
	us, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %s target=%q", file, dev, v)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// IOLimit reads the write cap SetIOLimit set on device dev of the cgroup
// at rel, in bytes per second (0: none).
func (l Layout) IOLimit(rel, dev string) (uint64, error) {
	var file, key string
	switch l.Mode {
	case ModeV2:
		file, key = filepath.Join(l.Unified, rel, "io.max"), "wbps="
	default:
		if l.Blkio == "" {
			return 0, fmt.Errorf("%w: no blkio hierarchy with throttling", ErrUnsupported)
		}
		file = filepath.Join(l.Blkio, rel, "blkio.throttle.write_bps_device")
	}
	v, err := l.deviceValue(file, dev, key)
	if err != nil || v == "" {
		return 0, err
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %s %s%q", file, dev, key, v)
	}
	return n, nil
}

// deviceValue reads a per-device cgroup file (v2's "MAJ:MIN key=value
// ...", v1's "MAJ:MIN value" with key "") and returns dev's value of key:
// "" when the device, or the key, is not listed or is "max". A missing
// file wraps ErrUnsupported.
func (l Layout) deviceValue(file, dev, key string) (string, error) {
	data, err := l.Files.ReadFile(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %s does not exist", ErrUnsupported, file)
		}
		return "", wrap("read", file, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != dev {
			continue
		}
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, key); ok && v != "max" {
				return v, nil
			}
		}
	}
	return "", nil
}

// validDevice checks a "MAJ:MIN" device number.
func validDevice(dev string) error {
	major, minor, ok := strings.Cut(dev, ":")
	if _, err := strconv.ParseUint(major, 10, 32); err != nil || !ok {
		return fmt.Errorf("invalid device %q: want MAJ:MIN", dev)
	}
	if _, err := strconv.ParseUint(minor, 10, 32); err != nil {
		return fmt.Errorf("invalid device %q: want MAJ:MIN", dev)
	}
	return nil
}

// IOBytes reads the bytes the cgroup at rel has read and written on device
// dev since it was made: v2 io.stat rbytes + wbytes, v1
// blkio.throttle.io_service_bytes Read + Write (on v1, buffered writeback
// is charged to the root, so direct and synchronous I/O only).
func (l Layout) IOBytes(rel, dev string) (uint64, error) {
	var file string
	switch l.Mode {
	case ModeV2:
		file = filepath.Join(l.Unified, rel, "io.stat")
	default:
		if l.Blkio == "" {
			return 0, fmt.Errorf("%w: no blkio hierarchy", ErrUnsupported)
		}
		file = filepath.Join(l.Blkio, rel, "blkio.throttle.io_service_bytes")
	}
	data, err := l.Files.ReadFile(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("%w: %s does not exist", ErrUnsupported, file)
		}
		return 0, wrap("read", file, err)
	}
	var total uint64
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != dev {
			continue
		}
		if l.Mode == ModeV2 {
			for _, f := range fields[1:] {
				key, v, _ := strings.Cut(f, "=")
				if key != "rbytes" && key != "wbytes" {
					continue
				}
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse %s: %q", file, line)
				}
				total += n
			}
			continue
		}
		if len(fields) == 3 && (fields[1] == "Read" || fields[1] == "Write") {
			n, err := strconv.ParseUint(fields[2], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s: %q", file, line)
			}
			total += n
		}
	}
	return total, nil
}
