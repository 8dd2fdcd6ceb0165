package bpf

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// CgroupID returns the id of the v2 cgroup whose directory is path (for
// example /sys/fs/cgroup/unified/slackline/guaranteed/t1 on a hybrid host,
// /sys/fs/cgroup/slackline/guaranteed/t1 on a pure v2 host). It is the
// inode number of the directory, the number the kernel's
// bpf_get_current_cgroup_id() and bpf_skb_cgroup_id() return.
func CgroupID(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("cgroup id of %s: not in a cgroup v2 hierarchy (filesystem magic %#x)", path, st.Type)
	}
	var s unix.Stat_t
	if err := unix.Stat(path, &s); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", path, err)
	}
	return s.Ino, nil
}
