package containerizer

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fsInfo is what placing sandboxes needs to know of a directory: whether
// it exists as a directory, the device of its file system and that file
// system's type (statfs f_type).
type fsInfo struct {
	Exists, Dir bool
	Dev         uint64
	Type        int64
}

// statFS reads dir's fsInfo; a missing dir is not an error (Exists false).
func statFS(dir string) (fsInfo, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fsInfo{}, nil
		}
		return fsInfo{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return fsInfo{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return fsInfo{Exists: true, Dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, Dev: st.Dev, Type: sfs.Type}, nil
}

// checkRevocableSandboxDir says what is wrong, if anything, with
// revocable, the directory given for revocable tasks' sandboxes, beside
// the guaranteed sandboxes' directory sandbox: it must exist (it is meant
// to be a file system of its own, mounted by the operator: the agent does
// not create it) and be on another file system than sandbox, or it buys
// nothing (revocableJournal).
func checkRevocableSandboxDir(revocable string, rev, sandbox fsInfo) error {
	switch {
	case !rev.Exists:
		return fmt.Errorf("%s does not exist: mount a file system of its own there", revocable)
	case !rev.Dir:
		return fmt.Errorf("%s is not a directory", revocable)
	case rev.Dev == sandbox.Dev:
		return fmt.Errorf("%s is on the same file system as the guaranteed sandboxes (device %d:%d): revocable sandboxes need a file system of their own, with its own journal, so that a revocable writer cannot hold the journal commit guaranteed tasks' fsyncs wait for",
			revocable, unix.Major(rev.Dev), unix.Minor(rev.Dev))
	}
	return nil
}

// Magic numbers of the file systems whose metadata updates go through one
// journal (or log) per file system (statfs f_type, linux/magic.h).
const (
	ext4Magic = 0xEF53 // ext2, ext3 and ext4 share it
	xfsMagic  = 0x58465342
)

// journalName names the journal of a file system type, "" for one without
// a journal known to serialise commits across writers.
func journalName(fsType int64) string {
	switch fsType {
	case ext4Magic:
		return "ext4 journal (jbd2)"
	case xfsMagic:
		return "xfs log"
	}
	return ""
}

// revocableJournal says whether guaranteed and revocable sandboxes share
// one file system journal, and why that matters or does not. A shared
// journal is a priority inversion no cap, weight or request size reaches:
// a revocable writer at idle CPU priority, descheduled while it holds a
// journal handle (its write's inode update or block allocation), holds the
// running transaction's commit, and every guaranteed fsync waits behind it
// while the disk is idle (#28: 20-140 ms stalls on ext4).
func revocableJournal(sandbox, rev fsInfo, separate bool) (shared bool, why string) {
	name := journalName(sandbox.Type)
	switch {
	case separate && rev.Dev != sandbox.Dev:
		return false, "revocable sandboxes on a file system of their own (--revocable-sandbox-dir): guaranteed fsyncs do not wait for revocable writers' journal handles"
	case name == "":
		return false, fmt.Sprintf("guaranteed and revocable sandboxes share a file system (type %#x) with no journal known to serialise their commits", sandbox.Type)
	}
	return true, fmt.Sprintf("guaranteed and revocable sandboxes share one %s: a revocable writer descheduled at idle CPU priority while holding a journal handle delays every guaranteed fsync behind the commit, which no cap or weight prevents; give revocable sandboxes a file system of their own on the same disk (--revocable-sandbox-dir)", name)
}

// sandboxParent is where the sandboxes of revocable or guaranteed
// containers go.
func (c *Containerizer) sandboxParent(revocable bool) string {
	if revocable && c.cfg.RevocableSandboxDir != "" {
		return c.cfg.RevocableSandboxDir
	}
	return c.cfg.SandboxDir
}

// setupRevocableSandboxDir makes cfg.RevocableSandboxDir absolute and
// checks it against cfg.SandboxDir (which exists by then).
func setupRevocableSandboxDir(cfg *Config) error {
	if cfg.RevocableSandboxDir == "" {
		return nil
	}
	abs, err := filepath.Abs(cfg.RevocableSandboxDir)
	if err != nil {
		return err
	}
	cfg.RevocableSandboxDir = abs
	rev, err := statFS(abs)
	if err != nil {
		return err
	}
	sandbox, err := statFS(cfg.SandboxDir)
	if err != nil {
		return err
	}
	if err := checkRevocableSandboxDir(abs, rev, sandbox); err != nil {
		return fmt.Errorf("%w: %w", ErrRevocableSandboxDir, err)
	}
	return nil
}
