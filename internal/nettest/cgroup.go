package nettest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// V2Root returns the mount point of the cgroup v2 hierarchy: the unified
// directory on hybrid hosts, /sys/fs/cgroup on pure v2 ones.
func V2Root() (string, error) {
	for _, dir := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy mounted")
}

// NewCgroupRoot creates <v2 root>/<prefix>-<random> and the directories
// rel below it; RemoveCgroups removes it.
func NewCgroupRoot(prefix string, rel ...string) (string, error) {
	v2, err := V2Root()
	if err != nil {
		return "", err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	root := filepath.Join(v2, prefix+"-"+hex.EncodeToString(b))
	for _, dir := range append([]string{""}, rel...) {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			return "", errors.Join(err, RemoveCgroups(root))
		}
	}
	return root, nil
}

// RemoveCgroups kills every process below the v2 cgroup directory root
// and removes it, children first.
func RemoveCgroups(root string) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
			dirs = append(dirs, path)
		}
		return nil
	})
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for i := len(dirs) - 1; i >= 0; i-- {
		for err = unix.Rmdir(dirs[i]); err == unix.EBUSY && time.Now().Before(deadline); err = unix.Rmdir(dirs[i]) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if errors.Is(err, unix.ENOENT) {
		err = nil
	}
	return err
}
