package containerizer

import (
	"fmt"
	"os"
	"path/filepath"
)

// SupervisorBinary is the file name of the supervisor and shim binary
// (cmd/slackline-supervisor), which FindSupervisor looks for next to the
// running executable.
const SupervisorBinary = "slackline-supervisor"

// FindSupervisor returns the SupervisorCommand that runs the supervisor
// binary at path or, when path is empty, SupervisorBinary in the directory
// of the running executable (symbolic links resolved). It fails, naming the
// path and the fix, when that is not an executable regular file.
func FindSupervisor(path string) ([]string, error) {
	where := "--supervisor"
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the supervisor: locate this executable: %w", err)
		}
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		path, where = filepath.Join(filepath.Dir(exe), SupervisorBinary), "next to "+exe
	}
	info, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("supervisor %s (%s): %w; install %s beside the agent (make build, the image and the packages ship it) or name it with --supervisor",
			path, where, err, SupervisorBinary)
	case !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0:
		return nil, fmt.Errorf("supervisor %s (%s) is not an executable file (mode %v)", path, where, info.Mode())
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return []string{abs}, nil
}
