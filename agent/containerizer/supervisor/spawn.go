package supervisor

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// StartInCgroup starts the command newCmd builds (its SysProcAttr set) in
// the v2 cgroup dir where the kernel can: clone3 with CLONE_INTO_CGROUP
// (Linux 5.7+) places the child there as part of the fork, with
// cgroup_threadgroup_rwsem held only for reading, where a write of its pid
// to cgroup.procs afterwards takes it for writing and waits for an RCU
// grace period (milliseconds, tens of them on a busy host, unless the
// hierarchy is mounted with favordynmods). It reports whether the child
// was born there. If not (an older kernel, a cgroup that refuses it,
// dir ""), it starts the command again without, where the caller is, and
// the caller moves it.
func StartInCgroup(newCmd func() *exec.Cmd, dir string) (cmd *exec.Cmd, born bool, err error) {
	if dir != "" {
		// O_PATH would not do: the kernel wants a cgroupfs directory
		// opened for reading.
		fd, oerr := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if oerr == nil {
			cmd = newCmd()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
			err = cmd.Start()
			unix.Close(fd)
			if err == nil {
				return cmd, true, nil
			}
		}
	}
	cmd = newCmd()
	return cmd, false, cmd.Start()
}

// v1ProcsFiles returns the cgroup.procs files of cg's v1 directories.
func v1ProcsFiles(cg Cgroup) []string {
	var files []string
	for _, d := range cg.V1Dirs() {
		files = append(files, filepath.Join(d, "cgroup.procs"))
	}
	return files
}

// ownV2Cgroup returns the calling process's cgroup in the v2 tree (the
// "0::" line of /proc/self/cgroup, e.g. "/slackline/supervisors"), or "".
func ownV2Cgroup() string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	return v2CgroupOf(data)
}

func v2CgroupOf(procCgroup []byte) string {
	for line := range bytes.SplitSeq(procCgroup, []byte("\n")) {
		if rel, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			return string(rel)
		}
	}
	return ""
}

// splitSupervisorMoves splits the cgroup.procs files the supervisor moves
// itself into (LaunchSpec.SupervisorCgroup) into those it moves into
// before it reports the task and those after. A supervisor already in its
// v2 cgroup (own, as in /proc/self/cgroup; the agent started it there)
// leaves the rest, v1 hierarchies of hybrid hosts, until after; one
// elsewhere moves into every hierarchy before. unifiedMount is where the
// v2 tree is mounted.
func splitSupervisorMoves(files []string, unifiedMount, own string) (now, later []string) {
	for i, f := range files {
		dir := filepath.Dir(f)
		if unifiedMount == "" || !strings.HasPrefix(dir+"/", strings.TrimSuffix(unifiedMount, "/")+"/") {
			continue
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(dir, unifiedMount), "/")
		if own == "" || rel != own {
			return files, nil
		}
		return nil, append(append([]string{}, files[:i]...), files[i+1:]...)
	}
	return files, nil
}
