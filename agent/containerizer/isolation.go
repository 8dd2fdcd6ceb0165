package containerizer

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Isolation turns parts of what isolates a task off. The zero value is
// everything on (DefaultIsolation): namespaces and the seccomp filter.
type Isolation struct {
	// NoNamespaces: tasks share the host's mount, IPC and PID namespaces
	// (no private /tmp, /var/tmp and /dev/shm, System V objects that outlive
	// them, every host process visible), as before they had namespaces.
	NoNamespaces bool
	// NoSeccomp: no task gets the seccomp filter.
	NoSeccomp bool
}

// DefaultIsolation is every isolation on.
var DefaultIsolation = Isolation{}

// ParseIsolation reads the agent's --task-isolation: a comma-separated list
// of what tasks get, from "namespaces" and "seccomp", or "none".
func ParseIsolation(s string) (Isolation, error) {
	iso := Isolation{NoNamespaces: true, NoSeccomp: true}
	if strings.TrimSpace(s) == "none" {
		return iso, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(part) {
		case "namespaces":
			iso.NoNamespaces = false
		case "seccomp":
			iso.NoSeccomp = false
		default:
			return Isolation{}, fmt.Errorf("task isolation %q: want a comma-separated list of namespaces and seccomp, or none (unknown %q)", s, part)
		}
	}
	return iso, nil
}

// String is the isolation as ParseIsolation reads it.
func (i Isolation) String() string {
	var parts []string
	if !i.NoNamespaces {
		parts = append(parts, "namespaces")
	}
	if !i.NoSeccomp {
		parts = append(parts, "seccomp")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// DefaultTmpfsBytes sizes a task's private /tmp, /var/tmp and /dev/shm
// when it has neither a memory limit nor a disk resource.
const DefaultTmpfsBytes = 64 << 20

// tmpfsBytes is the size of the one tmpfs behind a task's /tmp, /var/tmp
// and /dev/shm (they share it, so together they hold at most this much):
// half the task's memory limit, since tmpfs pages are memory charged to
// the task's cgroup and the other half is left to its processes; no more
// than its disk resource when it has one, since files count as disk; and
// DefaultTmpfsBytes when it has neither. Never less than a page.
func tmpfsBytes(memoryBytes int64, diskMiB float64) int64 {
	size := int64(math.MaxInt64)
	if memoryBytes > 0 {
		size = memoryBytes / 2
	}
	if diskMiB > 0 {
		size = min(size, int64(math.Round(diskMiB*1024*1024)))
	}
	if size == math.MaxInt64 {
		size = DefaultTmpfsBytes
	}
	return max(size, int64(os.Getpagesize()))
}

// privateDirs are the directories that get the task's tmpfs, and the
// directory of each inside that tmpfs: the host's world-writable ones
// (/var/lock is a link to /run/lock), where a task's files would outlive
// it and escape its limits.
var privateDirs = []struct{ target, sub string }{
	{"/var/tmp", "var-tmp"},
	{"/dev/shm", "shm"},
	{"/run/lock", "run-lock"},
	{"/tmp", "tmp"}, // last: the staging mount is at /tmp
}

// underPrivate reports whether path lies in one of the directories a
// task's tmpfs hides.
func underPrivate(path string) bool {
	for _, d := range privateDirs {
		if path == d.target || strings.HasPrefix(path, d.target+"/") {
			return true
		}
	}
	return false
}

// kept is a path of the host's that a task needs (its sandbox, its
// executable) and that its private tmpfs would hide: it is opened before
// the tmpfs is mounted and bound back at its place after.
type kept struct {
	path string
	fd   int
	dir  bool
}

// enterNamespaces is run by the shim, pid 1 of the task's new PID, mount
// and IPC namespaces, after it joined the task's cgroups (so that what it
// and the task write to tmpfs is charged there): it stops mounts from
// propagating to the host, mounts one tmpfs of size bytes and binds its
// directories at /tmp, /var/tmp, /dev/shm and /run/lock (those that exist), binds
// back the paths of keep that these hid, and mounts a /proc of the new PID
// namespace over /proc, so that the task sees only its own processes.
func enterNamespaces(size int64, keep []string) error {
	// Mounts made here stay here; the host's still propagate in.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the mount namespace a slave of the host's: %w", err)
	}
	var keeps []kept
	defer func() {
		for _, k := range keeps {
			unix.Close(k.fd)
		}
	}()
	for _, p := range keep {
		if p == "" || !underPrivate(p) || slices.ContainsFunc(keeps, func(k kept) bool { return k.path == p }) {
			continue
		}
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s to keep it visible: %w", p, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fmt.Errorf("stat %s: %w", p, err)
		}
		keeps = append(keeps, kept{path: p, fd: fd, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR})
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", flags, fmt.Sprintf("size=%d,mode=755", size)); err != nil {
		return fmt.Errorf("mount the task's tmpfs on /tmp: %w", err)
	}
	for _, d := range privateDirs {
		src := filepath.Join("/tmp", d.sub)
		if err := os.Mkdir(src, 0o777); err != nil {
			return fmt.Errorf("create %s in the task's tmpfs: %w", d.sub, err)
		}
		if err := os.Chmod(src, os.ModeSticky|0o777); err != nil { // Mkdir's mode is subject to the umask
			return err
		}
		if st, err := os.Stat(d.target); err != nil || !st.IsDir() {
			continue // a host without /var/tmp or /dev/shm: nothing to hide
		}
		if err := unix.Mount(src, d.target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the task's tmpfs on %s: %w", d.target, err)
		}
	}
	for _, k := range keeps {
		if err := bindBack(k); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc of the task's PID namespace: %w", err)
	}
	// Where the host mounts POSIX message queues (systemd does, at
	// /dev/mqueue), that mount shows the host's IPC namespace: the task
	// gets one of its own namespace's instead.
	if st, err := os.Stat("/dev/mqueue"); err == nil && st.IsDir() {
		if err := unix.Mount("mqueue", "/dev/mqueue", "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount the task's IPC namespace's message queues on /dev/mqueue: %w", err)
		}
	}
	return nil
}

// bindBack binds k (opened before the tmpfs hid it) at its path again.
func bindBack(k kept) error {
	if err := os.MkdirAll(filepath.Dir(k.path), 0o755); err != nil {
		return fmt.Errorf("keep %s visible: %w", k.path, err)
	}
	if k.dir {
		if err := os.Mkdir(k.path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("keep %s visible: %w", k.path, err)
		}
	} else if f, err := os.OpenFile(k.path, os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
		return fmt.Errorf("keep %s visible: %w", k.path, err)
	} else {
		f.Close()
	}
	// The host's /proc is still mounted: its magic link names the opened file.
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", k.fd), k.path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s back over the task's tmpfs: %w", k.path, err)
	}
	return nil
}

// searchable reports whether a user (uid, groups) may search a directory
// of owner uid:gid and mode perm, by its permission bits (root may).
func searchable(uid uint32, groups []uint32, owner, group uint32, perm os.FileMode) bool {
	switch {
	case uid == 0:
		return true
	case uid == owner:
		return perm&0o100 != 0
	case slices.Contains(groups, group):
		return perm&0o010 != 0
	}
	return perm&0o001 != 0
}

// reachable reports whether u may search every directory from / down to
// path's (so that the path itself resolves for it).
func reachable(path string, u *taskUser) bool {
	groups := append([]uint32{u.GID}, u.Groups...)
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) != nil || !searchable(u.UID, groups, st.Uid, st.Gid, os.FileMode(st.Mode)&os.ModePerm) {
			return false
		}
		if d == "/" || d == "." {
			return true
		}
	}
}
