package containerizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The revocable I/O cap's companion (#28): while the cap is on, the
// sandbox disk's largest request (queue/max_sectors_kb) is lowered, so
// that a guaranteed task's fsync, at each of its steps (its data, the
// journal commit, the flush), waits behind at most one short revocable
// command instead of a long one. blk-throttle paces the revocable
// subtree's bios, but once released a 1 MiB bio is split into requests
// of max_sectors_kb and each holds the device for its whole transfer. On
// a disk that serves one command at a time (the io benchmark's model, an
// HDD's head, a cloud volume's single queue) the fsync's wait behind the
// writer is that command's service time. The device's own value is saved
// under the state directory before the first change, so that it is put
// back when the cap comes off, even by an agent restarted in between.

// diskRequestState is the file under StateDir holding the sandbox disk's
// own max_sectors_kb ("MAJ:MIN KIB" lines) while it is lowered.
const diskRequestState = "disk-request-kib"

// diskRequests guards the saved values.
var diskRequests sync.Mutex

func (c *Containerizer) maxSectorsFile(dev, name string) string {
	return filepath.Join(c.cfg.SysRoot, "dev", "block", dev, "queue", name)
}

func readKiB(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// requestSizeSupport says whether the sandbox disk's largest request can
// be lowered (its queue/max_sectors_kb exists and is writable), and why not.
func requestSizeSupport(sysRoot string, devices []string) (bool, string) {
	if len(devices) == 0 {
		return false, "no sandbox disk"
	}
	var names []string
	for _, dev := range devices {
		path := filepath.Join(sysRoot, "dev", "block", dev, "queue", "max_sectors_kb")
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return false, fmt.Sprintf("cannot write %s: %v", path, err)
		}
		_ = f.Close()
		names = append(names, dev)
	}
	return true, "queue/max_sectors_kb of " + strings.Join(names, ", ") + " lowered while revocable I/O is capped"
}

// savedRequestKiB returns the saved own values by device (nil: none saved).
func (c *Containerizer) savedRequestKiB() (map[string]uint64, error) {
	data, err := os.ReadFile(filepath.Join(c.cfg.StateDir, diskRequestState))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	out := make(map[string]uint64)
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		dev, v, ok := strings.Cut(line, " ")
		kib, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil || kib == 0 {
			return nil, fmt.Errorf("%s: bad line %q", diskRequestState, line)
		}
		out[dev] = kib
	}
	return out, nil
}

// SetDiskRequestKiB lowers the largest request of the sandbox's disks to
// kib KiB (never above the device's own value or its hardware limit),
// saving the device's own value first; 0 puts the saved value back. It
// wraps ErrUnsupported where the host cannot (DiskIOSupport.RequestSize).
func (c *Containerizer) SetDiskRequestKiB(kib uint64) error {
	if !c.diskIO.RequestSize {
		return fmt.Errorf("%w: %s", ErrUnsupported, c.diskIO.RequestSizeWhy)
	}
	diskRequests.Lock()
	defer diskRequests.Unlock()
	saved, err := c.savedRequestKiB()
	if err != nil {
		return err
	}
	state := filepath.Join(c.cfg.StateDir, diskRequestState)
	if kib == 0 {
		if saved == nil {
			return nil
		}
		var errs []error
		for _, dev := range c.diskIO.Devices {
			if own, ok := saved[dev]; ok {
				if err := os.WriteFile(c.maxSectorsFile(dev, "max_sectors_kb"), []byte(strconv.FormatUint(own, 10)), 0); err != nil {
					errs = append(errs, fmt.Errorf("restore %s max_sectors_kb %d: %w", dev, own, err))
				}
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return os.Remove(state)
	}
	if saved == nil {
		saved = make(map[string]uint64)
		var b strings.Builder
		for _, dev := range c.diskIO.Devices {
			own, err := readKiB(c.maxSectorsFile(dev, "max_sectors_kb"))
			if err != nil {
				return err
			}
			saved[dev] = own
			fmt.Fprintf(&b, "%s %d\n", dev, own)
		}
		tmp := state + ".tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, state); err != nil {
			return err
		}
	}
	for _, dev := range c.diskIO.Devices {
		v := min(kib, saved[dev])
		if hw, err := readKiB(c.maxSectorsFile(dev, "max_hw_sectors_kb")); err == nil {
			v = min(v, hw)
		}
		if err := os.WriteFile(c.maxSectorsFile(dev, "max_sectors_kb"), []byte(strconv.FormatUint(v, 10)), 0); err != nil {
			return fmt.Errorf("lower %s max_sectors_kb to %d: %w", dev, v, err)
		}
	}
	return nil
}

// DiskRequestKiB returns the sandbox disk's largest request now, in KiB,
// and whether it is lowered (its own value saved).
func (c *Containerizer) DiskRequestKiB() (kib uint64, lowered bool, err error) {
	if !c.diskIO.RequestSize {
		return 0, false, fmt.Errorf("%w: %s", ErrUnsupported, c.diskIO.RequestSizeWhy)
	}
	diskRequests.Lock()
	saved, err := c.savedRequestKiB()
	diskRequests.Unlock()
	if err != nil {
		return 0, false, err
	}
	kib, err = readKiB(c.maxSectorsFile(c.diskIO.Devices[0], "max_sectors_kb"))
	return kib, saved != nil, err
}

// reconcileDiskRequests puts the sandbox disk's own largest request back
// at start when a previous agent lowered it and the revocable cap is off
// (the cap and the lowered request go together). An agent that stops
// puts it back itself (Agent.Close); this covers one that was killed.
func (c *Containerizer) reconcileDiskRequests() {
	if !c.diskIO.RequestSize || !c.diskIO.Cap {
		return
	}
	if limit, err := c.RevocableIOLimit(); err != nil || limit > 0 {
		return
	}
	if err := c.SetDiskRequestKiB(0); err != nil {
		c.log.Warn("containerizer: cannot put the sandbox disk's own request size back", "err", err)
	}
}
