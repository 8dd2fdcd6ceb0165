package containerizer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// imageDir is the directory of a task's sandbox that holds its root's
// writable upper layer, overlayfs's work directory and the mount point;
// root's, 0700: the task writes to its root only through the overlay.
const imageDir = ".image"

// Image is a task's root filesystem: the unpacked layers of an OCI image
// (agent/images) and what of its config applies to the task.
type Image struct {
	// Reference and Digest name the image (for logs and the checkpoint).
	Reference, Digest string
	// LayerDirs are the layers' directories, bottom first.
	LayerDirs []string
	// Entrypoint and Cmd run when the task's command has no value (its
	// arguments, when it has some, replace Cmd).
	Entrypoint, Cmd []string
	// Env ("KEY=value") comes first in the task's environment.
	Env []string
	// WorkingDir is the task's working directory (default SandboxMount).
	WorkingDir string
	// User is the image's USER: honoured only where it is the user the
	// task runs as anyway (see imageUserHonoured).
	User string
}

// imageCommand returns the executable and argv of a task with an image:
// a shell command runs as /bin/sh -c of the image; a command value is the
// executable (arguments its argv, as without an image); no value runs
// the image's entrypoint followed by the task's arguments, else by the
// image's cmd. Names without a slash are looked up in the task's PATH
// inside the root, by the shim (lookup true).
func imageCommand(spec Spec) (exe string, argv []string, lookup bool, err error) {
	cmd, img := spec.Command, spec.Image
	switch {
	case cmd.GetValue() != "" && cmd.GetShell():
		return "/bin/sh", []string{"/bin/sh", "-c", cmd.GetValue()}, false, nil
	case cmd.GetValue() != "":
		argv = slices.Clone(cmd.GetArguments())
		if len(argv) == 0 {
			argv = []string{cmd.GetValue()}
		}
		exe = cmd.GetValue()
	default:
		argv = slices.Clone(img.Entrypoint)
		if args := cmd.GetArguments(); len(args) > 0 {
			argv = append(argv, args...)
		} else {
			argv = append(argv, img.Cmd...)
		}
		if len(argv) == 0 {
			return "", nil, false, fmt.Errorf("%w: no command, and image %s has no entrypoint or cmd", ErrInvalidSpec, img.Reference)
		}
		exe = argv[0]
	}
	if strings.Contains(exe, "/") {
		if !path.IsAbs(exe) {
			exe = path.Join(SandboxMount, exe) // relative to the sandbox, as without an image
		}
		return exe, argv, false, nil
	}
	return exe, argv, true, nil
}

// imageEnv is an image task's environment: the image's Env, PATH (the
// image's, else a default), HOME and SLACKLINE_SANDBOX at SandboxMount,
// USER and LOGNAME, then Command.Environment, Spec.Env and the other
// SLACKLINE_ variables, later ones winning.
func imageEnv(spec Spec, id string) []string {
	m := map[string]string{}
	for _, kv := range spec.Image.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	if m["PATH"] == "" {
		m["PATH"] = defaultPath
	}
	m["HOME"], m["USER"], m["LOGNAME"] = SandboxMount, spec.User, spec.User
	for k, v := range spec.Command.GetEnvironment() {
		m[k] = v
	}
	for k, v := range spec.Env {
		m[k] = v
	}
	m["SLACKLINE_SANDBOX"] = SandboxMount
	m["SLACKLINE_TASK_ID"] = spec.TaskID
	m["SLACKLINE_FRAMEWORK_ID"] = spec.FrameworkID
	m["SLACKLINE_CONTAINER_ID"] = id
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// imageUserHonoured reports whether an image's USER ("name", "uid",
// "name:group" or "uid:gid") names the user u the task runs as. The
// image's USER never chooses a host user by itself: which user a task
// may run as is the coordinator's decision (TaskInfo.user, the
// framework's user, its ACLs) or the agent's (--task-user, dynamic uids);
// a USER that names another is ignored, and the launch logs it.
func imageUserHonoured(imageUser string, u *taskUser) bool {
	name, _, _ := strings.Cut(imageUser, ":")
	if name == "" {
		return true
	}
	if uid, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(uid) == u.UID
	}
	return name == u.Name
}

// makeImageDirs creates the sandbox's imageDir with the overlay's upper,
// work and mount point directories (root's; the upper 0755, the root
// directory of the task's filesystem).
func makeImageDirs(sandbox string) (upper, work, merged string, err error) {
	dir := filepath.Join(sandbox, imageDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", "", "", err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", "", "", err
	}
	if !st.IsDir() {
		return "", "", "", fmt.Errorf("%s exists and is not a directory", dir)
	}
	if err := errors.Join(os.Lchown(dir, 0, 0), os.Chmod(dir, 0o700)); err != nil {
		return "", "", "", err
	}
	upper, work, merged = filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", "", "", err
		}
	}
	return upper, work, merged, os.Chmod(upper, 0o755)
}
