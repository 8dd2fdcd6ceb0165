package containerizer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheckRevocableSandboxDir(t *testing.T) {
	t.Parallel()
	sandbox := fsInfo{Exists: true, Dir: true, Dev: unix.Mkdev(7, 0), Type: ext4Magic}
	for _, tc := range []struct {
		name    string
		rev     fsInfo
		wantErr string // "" for none
	}{
		{"own file system", fsInfo{Exists: true, Dir: true, Dev: unix.Mkdev(7, 1), Type: ext4Magic}, ""},
		{"missing", fsInfo{}, "does not exist"},
		{"a file", fsInfo{Exists: true, Dev: unix.Mkdev(7, 1)}, "not a directory"},
		{"same file system", fsInfo{Exists: true, Dir: true, Dev: unix.Mkdev(7, 0), Type: ext4Magic}, "same file system as the guaranteed sandboxes (device 7:0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkRevocableSandboxDir("/srv/revocable", tc.rev, sandbox)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestRevocableJournal(t *testing.T) {
	t.Parallel()
	const tmpfsMagic = 0x01021994
	at := func(minor uint32, fsType int64) fsInfo {
		return fsInfo{Exists: true, Dir: true, Dev: unix.Mkdev(7, minor), Type: fsType}
	}
	for _, tc := range []struct {
		name         string
		sandbox, rev fsInfo
		separate     bool
		wantShared   bool
		wantInWhy    string
	}{
		{"ext4, one directory", at(0, ext4Magic), at(0, ext4Magic), false, true, "share one ext4 journal (jbd2)"},
		{"xfs, one directory", at(0, xfsMagic), at(0, xfsMagic), false, true, "share one xfs log"},
		{"ext4, revocable on a partition of its own", at(1, ext4Magic), at(2, ext4Magic), true, false, "file system of their own"},
		{"no journal", at(0, tmpfsMagic), at(0, tmpfsMagic), false, false, "no journal known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			shared, why := revocableJournal(tc.sandbox, tc.rev, tc.separate)
			if shared != tc.wantShared || !strings.Contains(why, tc.wantInWhy) {
				t.Errorf("revocableJournal = %v, %q; want %v and a reason saying %q", shared, why, tc.wantShared, tc.wantInWhy)
			}
		})
	}
}

// TestRevocableSandboxDir: with RevocableSandboxDir on an ext4 file system
// of its own (a loop device the test makes), a revocable container's
// sandbox is made there and a guaranteed one's under SandboxDir, on
// another ext4 file system; the disk I/O support says the journal is not
// shared, and New refuses a RevocableSandboxDir on SandboxDir's file
// system, or one that does not exist.
func TestRevocableSandboxDir(t *testing.T) {
	cfg := testConfig(t)
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is needed", tool)
		}
	}
	base := traversableTempDir(t)
	guaranteed, revocable := mountExt4(t, base, "guaranteed"), mountExt4(t, base, "revocable")
	cfg.SandboxDir = filepath.Join(guaranteed, "sandboxes")
	cfg.RevocableSandboxDir = filepath.Join(revocable, "sandboxes")
	if err := os.Mkdir(cfg.RevocableSandboxDir, 0o755); err != nil {
		t.Fatal(err)
	}

	c := newTest(t, cfg)
	if io := c.DiskIO(); io.SharedJournal || !strings.Contains(io.JournalWhy, "file system of their own") {
		t.Errorf("DiskIO journal = %v, %q; want not shared", io.SharedJournal, io.JournalWhy)
	}
	r := launch(t, c, Spec{TaskID: "r", Revocable: true, Command: shell("echo scratch > scratch")})
	waitExit(t, c, r.ID)
	g := launch(t, c, Spec{TaskID: "g", Command: shell("echo commit > commit")})
	waitExit(t, c, g.ID)
	for _, tc := range []struct {
		ct     *Container
		parent string
		file   string
	}{{r, cfg.RevocableSandboxDir, "scratch"}, {g, cfg.SandboxDir, "commit"}} {
		if want := filepath.Join(tc.parent, tc.ct.ID); tc.ct.Sandbox != want {
			t.Errorf("task %s: sandbox %s, want %s", tc.ct.Spec.TaskID, tc.ct.Sandbox, want)
		}
		if same, err := sameFileSystem(filepath.Join(tc.ct.Sandbox, tc.file), tc.parent); err != nil || !same {
			t.Errorf("task %s wrote %s on another file system than %s (%v)", tc.ct.Spec.TaskID, tc.file, tc.parent, err)
		}
	}
	if same, _ := sameFileSystem(r.Sandbox, g.Sandbox); same {
		t.Errorf("revocable and guaranteed sandboxes on one file system")
	}

	for name, dir := range map[string]string{
		"same file system": filepath.Join(guaranteed, "also-guaranteed"),
		"missing":          filepath.Join(revocable, "missing"),
	} {
		bad := testConfig(t)
		bad.SandboxDir = filepath.Join(guaranteed, "sandboxes-"+randomSuffix())
		bad.RevocableSandboxDir = dir
		if name == "same file system" {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if c, err := New(bad); !errors.Is(err, ErrRevocableSandboxDir) {
			if err == nil {
				c.Close()
			}
			t.Errorf("%s: New = %v, want ErrRevocableSandboxDir", name, err)
		}
	}
}

// mountExt4 makes a 64 MiB ext4 file system in an image file under base,
// on a loop device, mounted at base/name (mode 0755), all undone when the
// test ends.
func mountExt4(t *testing.T, base, name string) string {
	t.Helper()
	img, dir := filepath.Join(base, name+".img"), filepath.Join(base, name)
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", loop).Run() })
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", loop).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", loop, err, out)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(loop, dir, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", loop, err)
	}
	// Lazily: a task's last file may still be open as the test ends.
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sameFileSystem says whether a and b are on one file system.
func sameFileSystem(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, err
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev, nil
}
