// Package cgrouptest cleans up after tests and benchmarks that run real
// agents: tasks outlive their agent by design, so what a test started under
// its own cgroup root must be killed and removed explicitly.
package cgrouptest

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Mountpoint is where the cgroup hierarchies are mounted.
const Mountpoint = "/sys/fs/cgroup"

// RemoveRoot kills every process under root in the v2 tree (cgroup.kill)
// and removes root's cgroups, children first, from the v2 tree and the v1
// cpu and memory hierarchies. It touches nothing outside root.
func RemoveRoot(root string) {
	if root == "" || filepath.IsAbs(root) {
		return // never the whole hierarchy
	}
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
	for _, h := range []string{"cpu", "memory", "unified", ""} {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(Mountpoint, h, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for syscall.Rmdir(dirs[i]) == syscall.EBUSY && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}
