package supervisor

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// SandboxMount is where a task with an image finds its sandbox inside its
// root (its HOME, SLACKLINE_SANDBOX, and its working directory unless the
// image names one).
const SandboxMount = "/mnt/sandbox"

// RootSpec is how the shim builds an image task's root (launch.json).
type RootSpec struct {
	// Lower are the layers, top first (overlayfs's order).
	Lower []string `json:"lower"`
	// Upper, Work and Merged are in the sandbox's imageDir.
	Upper  string `json:"upper"`
	Work   string `json:"work"`
	Merged string `json:"merged"`
	// Sandbox is bound at SandboxMount.
	Sandbox string `json:"sandbox"`
	// WorkingDir is created if missing and entered before the task starts.
	WorkingDir string `json:"working_dir"`
	// Lookup: Path is a name to find in the task's PATH inside the root.
	Lookup bool `json:"lookup,omitempty"`
}

// devices are the character devices of an image task's /dev.
var devices = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// enterImageRoot is run by the shim (pid 1 of the task's PID, mount and
// IPC namespaces, in the task's cgroups) instead of enterNamespaces for a
// task with an image: it mounts the overlay of the image's layers with
// the task's upper directory, and inside it /proc of the task's PID
// namespace, a /dev (tmpfs: null, zero, full, random, urandom, tty, a
// devpts instance of its own with ptmx, shm, mqueue), the task's one
// tmpfs at /tmp, /var/tmp (when the image has it) and /dev/shm, the
// sandbox at SandboxMount, and the host's /etc/hosts and /etc/resolv.conf
// read-only; then it pivots into the overlay, detaches the host's root
// and enters the working directory.
//
// Every directory and file created inside the new root, and every mount
// point there, is reached through an os.Root at the overlay (then named
// by /proc/self/fd): a symbolic link of the image can never make the
// shim create or mount anything outside it.
func enterImageRoot(r *RootSpec, tmpfsSize int64) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the mount namespace a slave of the host's: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(r.Lower, ":"), r.Upper, r.Work)
	if len(opts) >= os.Getpagesize() {
		return fmt.Errorf("mount the image's root: overlay options of %d bytes (%d layers) exceed a page", len(opts), len(r.Lower))
	}
	if err := unix.Mount("overlay", r.Merged, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the image's root (overlay of %d layers): %w", len(r.Lower), err)
	}
	root, err := os.OpenRoot(r.Merged)
	if err != nil {
		return err
	}
	defer root.Close()
	const noexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	steps := []struct {
		target string
		dir    bool
		mount  func(target string) error
	}{
		{"proc", true, func(t string) error { return unix.Mount("proc", t, "proc", noexec, "") }},
		{"dev", true, func(t string) error {
			return unix.Mount("tmpfs", t, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_STRICTATIME, "mode=755,size=65536")
		}},
		{"dev/pts", true, func(t string) error {
			return unix.Mount("devpts", t, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
		}},
		{"dev/mqueue", true, func(t string) error { return unix.Mount("mqueue", t, "mqueue", noexec, "") }},
		{"tmp", true, func(t string) error {
			return unix.Mount("tmpfs", t, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=1777", tmpfsSize))
		}},
		{SandboxMount[1:], true, func(t string) error { return unix.Mount(r.Sandbox, t, "", unix.MS_BIND|unix.MS_REC, "") }},
	}
	for _, s := range steps {
		if err := mountIn(root, s.target, s.dir, s.mount); err != nil {
			return err
		}
		if s.target == "dev" {
			if err := populateDev(root); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{"etc/hosts", "etc/resolv.conf"} {
		if err := bindReadOnly(root, name, "/"+name); err != nil {
			return err
		}
	}
	// /dev/shm and /var/tmp share the task's one tmpfs with /tmp.
	for _, d := range []string{"tmp/.shm", "tmp/.var-tmp"} {
		if err := root.Mkdir(d, 0o777); err != nil {
			return fmt.Errorf("create /%s in the task's tmpfs: %w", d, err)
		}
		if err := root.Chmod(d, os.ModeSticky|0o777); err != nil {
			return err
		}
	}
	shared := []struct{ src, target string }{{"tmp/.shm", "dev/shm"}}
	if st, err := root.Lstat("var/tmp"); err == nil && st.IsDir() {
		shared = append(shared, struct{ src, target string }{"tmp/.var-tmp", "var/tmp"})
	}
	for _, s := range shared {
		src, err := root.Open(s.src)
		if err != nil {
			return err
		}
		err = mountIn(root, s.target, true, func(t string) error {
			return unix.Mount(fdPath(src), t, "", unix.MS_BIND, "")
		})
		src.Close()
		if err != nil {
			return err
		}
	}
	merged, err := root.Open(".")
	if err != nil {
		return err
	}
	defer merged.Close()
	if err := unix.Fchdir(int(merged.Fd())); err != nil {
		return fmt.Errorf("enter the image's root: %w", err)
	}
	// pivot_root(".", "."): the old root is stacked under the new one,
	// then detached; nothing of the host's file system stays reachable.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into the image's root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := os.MkdirAll(r.WorkingDir, 0o755); err != nil {
		return fmt.Errorf("create the working directory %s: %w", r.WorkingDir, err)
	}
	if err := os.Chdir(r.WorkingDir); err != nil {
		return fmt.Errorf("enter the working directory %s: %w", r.WorkingDir, err)
	}
	return nil
}

// mountIn creates name in root (a directory, or an empty file), opens it
// and mounts over it through its /proc/self/fd path.
func mountIn(root *os.Root, name string, dir bool, mount func(target string) error) error {
	var f *os.File
	var err error
	if dir {
		if err = root.MkdirAll(name, 0o755); err == nil {
			f, err = root.Open(name)
		}
	} else {
		if err = root.MkdirAll(path.Dir(name), 0o755); err == nil {
			f, err = root.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o644)
		}
	}
	if err != nil {
		return fmt.Errorf("create /%s in the image's root: %w", name, err)
	}
	defer f.Close()
	if err := mount(fdPath(f)); err != nil {
		return fmt.Errorf("mount /%s in the image's root: %w", name, err)
	}
	return nil
}

// bindReadOnly binds a host file read-only at name in root.
func bindReadOnly(root *os.Root, name, src string) error {
	if _, err := os.Stat(src); err != nil {
		return nil // the host has none: the image's stays
	}
	err := mountIn(root, name, false, func(target string) error { return unix.Mount(src, target, "", unix.MS_BIND, "") })
	if err != nil {
		return err
	}
	// The descriptor mountIn used names the file under the bind; the
	// path, opened again, names the bind.
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Mount("", fdPath(f), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make /%s read-only in the image's root: %w", name, err)
	}
	return nil
}

// populateDev fills the new /dev tmpfs.
func populateDev(root *os.Root) error {
	dev, err := root.Open("dev")
	if err != nil {
		return err
	}
	defer dev.Close()
	fd := int(dev.Fd())
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, d := range devices {
		if err := unix.Mknodat(fd, d.name, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("create /dev/%s: %w", d.name, err)
		}
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := unix.Symlinkat(target, fd, name); err != nil {
			return fmt.Errorf("create /dev/%s: %w", name, err)
		}
	}
	return nil
}

func fdPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// lookPathIn finds file in pathEnv's directories of the current root
// (the shim calls it after pivot_root).
func lookPathIn(file, pathEnv string) (string, error) {
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in the image's PATH %q", file, pathEnv)
}
