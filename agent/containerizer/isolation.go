package containerizer

import (
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
