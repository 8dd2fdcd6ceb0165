package containerizer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/slackline/slackline/internal/filelock"
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
// writer is that command's service time.
//
// The setting belongs to the whole device, which every agent of a host
// may share (tests run several), so its bookkeeping is host-wide, in
// Config.DiskRequestDir under an flock: <dev>.own holds the device's own
// value, saved by the first agent to lower it, and <dev>.holders/ one
// file per agent (named by its state directory) that holds it lowered.
// An agent that puts the size back only drops its hold; the own value is
// written back by the last holder. A holder survives its agent's restart,
// so a restarted agent (reconcileDiskRequests) still puts it back; an
// agent killed for good leaves the device lowered until the host reboots
// (/run is a tmpfs) or an agent with its state directory starts again.

// DefaultDiskRequestDir is Config.DiskRequestDir's default.
const DefaultDiskRequestDir = "/run/slackline/disk-request"

// diskRequestLockTimeout bounds the wait for the host-wide lock.
const diskRequestLockTimeout = 10 * time.Second

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

// diskRequestFile is dev's entry in the host-wide directory ("7:0" is
// written "7_0").
func (c *Containerizer) diskRequestFile(dev, suffix string) string {
	return filepath.Join(c.cfg.DiskRequestDir, strings.ReplaceAll(dev, ":", "_")+suffix)
}

// holderName names this agent among the device's holders: a digest of
// its state directory, which a restarted agent keeps.
func (c *Containerizer) holderName() string {
	sum := sha256.Sum256([]byte(c.cfg.StateDir))
	return hex.EncodeToString(sum[:12])
}

// diskRequestLocked runs fn holding the host-wide lock of the request
// sizes.
func (c *Containerizer) diskRequestLocked(fn func() error) error {
	if err := os.MkdirAll(c.cfg.DiskRequestDir, 0o700); err != nil {
		return fmt.Errorf("disk request size: %w", err)
	}
	return filelock.Locked(filepath.Join(c.cfg.DiskRequestDir, "lock"), diskRequestLockTimeout, fn)
}

// holds says whether this agent holds dev's size lowered.
func (c *Containerizer) holds(dev string) (bool, error) {
	_, err := os.Stat(filepath.Join(c.diskRequestFile(dev, ".holders"), c.holderName()))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// SetDiskRequestKiB lowers the largest request of the sandbox's disks to
// kib KiB (never above the device's own value or its hardware limit, and
// never above what another agent holding it lowered set), saving the
// device's own value first; 0 drops this agent's hold, and the last
// holder puts the own value back. It wraps ErrUnsupported where the host
// cannot (DiskIOSupport.RequestSize).
func (c *Containerizer) SetDiskRequestKiB(kib uint64) error {
	if !c.diskIO.RequestSize {
		return fmt.Errorf("%w: %s", ErrUnsupported, c.diskIO.RequestSizeWhy)
	}
	return c.diskRequestLocked(func() error {
		var errs []error
		for _, dev := range c.diskIO.Devices {
			var err error
			if kib == 0 {
				err = c.releaseDiskRequest(dev)
			} else {
				err = c.lowerDiskRequest(dev, kib)
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

// lowerDiskRequest lowers dev's largest request to kib KiB and records
// this agent's hold (the host-wide lock held).
func (c *Containerizer) lowerDiskRequest(dev string, kib uint64) error {
	ownFile, holders := c.diskRequestFile(dev, ".own"), c.diskRequestFile(dev, ".holders")
	own, err := readKiB(ownFile)
	if errors.Is(err, os.ErrNotExist) {
		// No agent holds it lowered: what the device has now is its own.
		if own, err = readKiB(c.maxSectorsFile(dev, "max_sectors_kb")); err != nil {
			return err
		}
		if err := writeFileAtomic(ownFile, strconv.FormatUint(own, 10)+"\n"); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := os.MkdirAll(holders, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(holders, c.holderName()), []byte(c.cfg.StateDir+"\n"), 0o600); err != nil {
		return err
	}
	v := min(kib, own)
	if hw, err := readKiB(c.maxSectorsFile(dev, "max_hw_sectors_kb")); err == nil {
		v = min(v, hw)
	}
	if others, _ := os.ReadDir(holders); len(others) > 1 {
		// Another agent holds it lowered, perhaps further: the smaller wins.
		if now, err := readKiB(c.maxSectorsFile(dev, "max_sectors_kb")); err == nil {
			v = min(v, now)
		}
	}
	// Only a change is written: a write of queue/max_sectors_kb freezes
	// the device's queue (new I/O, a guaranteed fsync's too, waits while
	// the requests in flight drain), and every Unthrottle that keeps a
	// cap carries the size again.
	if now, err := readKiB(c.maxSectorsFile(dev, "max_sectors_kb")); err == nil && now == v {
		return nil
	}
	if err := os.WriteFile(c.maxSectorsFile(dev, "max_sectors_kb"), []byte(strconv.FormatUint(v, 10)), 0); err != nil {
		return fmt.Errorf("lower %s max_sectors_kb to %d: %w", dev, v, err)
	}
	return nil
}

// releaseDiskRequest drops this agent's hold of dev's size and, when no
// agent holds it any more, puts the device's own size back (the
// host-wide lock held).
func (c *Containerizer) releaseDiskRequest(dev string) error {
	ownFile, holders := c.diskRequestFile(dev, ".own"), c.diskRequestFile(dev, ".holders")
	if err := os.Remove(filepath.Join(holders, c.holderName())); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if others, err := os.ReadDir(holders); err == nil && len(others) > 0 {
		return nil
	}
	own, err := readKiB(ownFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nobody lowered it
	} else if err != nil {
		return err
	}
	if err := os.WriteFile(c.maxSectorsFile(dev, "max_sectors_kb"), []byte(strconv.FormatUint(own, 10)), 0); err != nil {
		return fmt.Errorf("restore %s max_sectors_kb %d: %w", dev, own, err)
	}
	_ = os.Remove(holders)
	return os.Remove(ownFile)
}

// writeFileAtomic writes data to path through a renamed temporary file.
func writeFileAtomic(path, data string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// DiskRequestKiB returns the sandbox disk's largest request now, in KiB,
// and whether this agent holds it lowered.
func (c *Containerizer) DiskRequestKiB() (kib uint64, lowered bool, err error) {
	if !c.diskIO.RequestSize {
		return 0, false, fmt.Errorf("%w: %s", ErrUnsupported, c.diskIO.RequestSizeWhy)
	}
	dev := c.diskIO.Devices[0]
	if lowered, err = c.holds(dev); err != nil {
		return 0, false, err
	}
	kib, err = readKiB(c.maxSectorsFile(dev, "max_sectors_kb"))
	return kib, lowered, err
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
