// Package cgrouptest cleans up after tests and benchmarks that run real
// agents: tasks outlive their agent by design, so what a test started under
// its own cgroup root must be killed and removed explicitly.
package cgrouptest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Mountpoint is where the cgroup hierarchies are mounted.
const Mountpoint = "/sys/fs/cgroup"

// RemoveRoot kills every process under root and under its revocable
// sibling <root>-revocable in the v2 tree (cgroup.kill) and removes their
// cgroups, children first, from the v2 tree and the v1 cpu, memory, cpuset,
// pids and blkio hierarchies. It touches nothing else.
func RemoveRoot(root string) {
	if root == "" || filepath.IsAbs(root) {
		return // never the whole hierarchy
	}
	// The revocable subtree lives beside the root (containerizer/cgroups.Subtree).
	removeTree(root + "-revocable")
	removeTree(root)
}

func removeTree(root string) {
	unified := filepath.Join(Mountpoint, "unified")
	if _, err := os.Stat(unified); err != nil {
		unified = Mountpoint
	}
	_ = filepath.WalkDir(filepath.Join(unified, root), func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
		}
		return nil
	})
	deadline := time.Now().Add(5 * time.Second)
	for _, h := range []string{"cpu", "memory", "cpuset", "pids", "blkio", "unified", ""} {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(Mountpoint, h, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for unix.Rmdir(dirs[i]) == unix.EBUSY && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// WorkDir returns a new directory for an agent under test and arranges, at
// the test's end, to kill what runs under root (RemoveRoot) and only then to
// remove the directory. Task supervisors live outside the cgroups and write
// a killed task's exit status into the directory as they finish, so the
// removal is retried for a few seconds instead of racing them.
func WorkDir(t testing.TB, root string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "slackline-agent-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		RemoveRoot(root)
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("remove %s: %v", dir, err)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return dir
}
