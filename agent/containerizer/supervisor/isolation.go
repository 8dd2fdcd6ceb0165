package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

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

// UnderPrivate reports whether path lies in one of the directories a
// task's tmpfs hides.
func UnderPrivate(path string) bool {
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
		if p == "" || !UnderPrivate(p) || slices.ContainsFunc(keeps, func(k kept) bool { return k.path == p }) {
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
