package containerizer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

// defaultPath is the task's PATH when the agent has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var validID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Launch starts spec's command in a new container and returns once the
// task's process has exec'd the command inside all its cgroups.
//
// In order: the spec is checked (command present, executable found, user
// known and allowed), the sandbox (<SandboxDir>/<id> with stdout and
// stderr, owned by the task's user) is created, the
// container is checkpointed in StateDir, its cgroups are created with their
// limits, and a detached supervisor is started; the supervisor starts the
// task through a shim that joins the cgroups before exec'ing the command,
// and reports the task's pid back. The checkpoint is then updated with the
// supervisor's and the task's pids and start times.
//
// Errors: ErrInvalidSpec (no command, bad id, executable not found),
// ErrTaskUser (unknown user, or root without Config.AllowRootTasks),
// ErrExists, ErrPermission, or the supervisor's report of a failed exec. On
// error the cgroups and the checkpoint are removed; the sandbox stays.
func (c *Containerizer) Launch(ctx context.Context, spec Spec) (_ *Container, err error) {
	began := time.Now()
	id := spec.ContainerID
	if id == "" {
		id = newID()
		spec.ContainerID = id
	}
	if !validID.MatchString(id) || id == "." || id == ".." {
		return nil, fmt.Errorf("%w: container id %q: want 1-128 characters of [A-Za-z0-9._-]", ErrInvalidSpec, id)
	}
	if spec.Image != nil {
		if c.cfg.Isolation.NoNamespaces {
			return nil, fmt.Errorf("%w: image %s: a task with an image needs the namespaces isolation (--task-isolation)", ErrInvalidSpec, spec.Image.Reference)
		}
		if len(spec.Image.LayerDirs) == 0 {
			return nil, fmt.Errorf("%w: image %s has no layers", ErrInvalidSpec, spec.Image.Reference)
		}
	} else if spec.Command == nil || spec.Command.GetValue() == "" {
		return nil, fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	if spec.User == "" {
		spec.User = c.cfg.TaskUser
	}
	var usr *taskUser
	if spec.User == DynamicTaskUser {
		usr, err = c.dynamicUser(id, spec.Revocable)
		if err == nil {
			spec.User = usr.Name
			leased := usr
			defer func() {
				if err != nil { // the lease of a container that never ran
					c.releaseUser(&checkpoint{ID: id, Revocable: spec.Revocable, User: leased})
				}
			}()
		}
	} else {
		usr, err = resolveUser(spec.User, c.cfg.AllowRootTasks)
	}
	if err != nil {
		return nil, err
	}
	userAt := time.Now()
	sandbox := filepath.Join(c.sandboxParent(spec.Revocable), id)
	var env, argv []string
	var path string
	var root *rootSpec
	if spec.Image != nil {
		if u := spec.Image.User; u != "" && !imageUserHonoured(u, usr) {
			c.log.Info("containerizer: the image's USER is not the task's user: ignored", "container", id,
				"image", spec.Image.Reference, "image_user", u, "user", usr.Name)
		}
		env = imageEnv(spec, id)
		var lookup bool
		path, argv, lookup, err = imageCommand(spec)
		if err != nil {
			return nil, err
		}
		root = &rootSpec{Sandbox: sandbox, WorkingDir: cmp.Or(spec.Image.WorkingDir, SandboxMount), Lookup: lookup}
		for _, l := range slices.Backward(spec.Image.LayerDirs) {
			root.Lower = append(root.Lower, l)
		}
	} else {
		env = taskEnv(spec, id, sandbox)
	}
	if spec.Image == nil && spec.Fetch == nil {
		// Checked before anything is created; with artifacts to fetch,
		// the executable may be one of them: looked up after the fetch.
		if path, argv, err = commandLine(spec, supervisor.EnvValue(env, "PATH"), sandbox); err != nil {
			return nil, err
		}
	}

	resolved := time.Now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if c.containers[id] != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrExists, id)
	}
	// Reserve the id while launching.
	ct := &container{dir: filepath.Join(c.cfg.StateDir, id), ended: make(chan struct{})}
	c.containers[id] = ct
	c.mu.Unlock()
	release := func() {
		c.mu.Lock()
		delete(c.containers, id)
		c.mu.Unlock()
	}

	if err := os.Mkdir(ct.dir, 0o700); err != nil {
		release()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %q (state directory %s exists)", ErrExists, id, ct.dir)
		}
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	var ps prepareStages
	cp, err := c.prepare(spec, usr, sandbox, ct.dir, &ps)
	if err == nil && root != nil {
		root.Upper, root.Work, root.Merged, err = makeImageDirs(sandbox)
		if err != nil {
			err = fmt.Errorf("create the image's upper directory: %w", err)
			_ = cp.Cgroup.Remove()
		}
	}
	if err != nil {
		_ = os.RemoveAll(ct.dir)
		release()
		return nil, err
	}
	ct.cp = cp
	if spec.Fetch != nil {
		err := spec.Fetch(ctx, sandbox, int(usr.UID), int(usr.GID))
		if err == nil && spec.Image == nil {
			path, argv, err = commandLine(spec, supervisor.EnvValue(env, "PATH"), sandbox)
		}
		if err != nil {
			noteInSandbox(sandbox, "slackline: "+err.Error())
			c.abortLaunch(ct)
			release()
			return nil, fmt.Errorf("launch container %s: %w", id, err)
		}
	}
	prepared := time.Now()
	lspec := launchSpec{
		Path: path, Argv: argv, Env: env, Dir: sandbox,
		Stdout: filepath.Join(sandbox, "stdout"), Stderr: filepath.Join(sandbox, "stderr"),
		Cgroup: supervisorCgroup(cp.Cgroup), User: usr, SupervisorArgv: c.cfg.SupervisorCommand,
		OutputLimit:      max(c.cfg.OutputLimit, 0),
		SupervisorCgroup: c.supervisors.ProcsFiles(),
		CoreCookie:       spec.Revocable && c.coreCookies,
		Namespaces:       !c.cfg.Isolation.NoNamespaces,
		Seccomp:          !c.cfg.Isolation.NoSeccomp && !spec.SeccompUnconfined,
	}
	lspec.Root = root
	if lspec.Namespaces {
		lspec.TmpfsBytes = tmpfsBytes(cp.Limits.MemoryBytes, spec.Resources.Disk())
		// The executable too, when it lies in a directory the tmpfs
		// hides and the task's user could reach it there: the bind
		// must not open a path its permissions close.
		lspec.Keep = []string{sandbox}
		if root == nil && supervisor.UnderPrivate(path) && reachable(path, usr) {
			lspec.Keep = append(lspec.Keep, path)
		}
	}
	status, proc, err := c.startSupervisor(ctx, ct.dir, lspec)
	if err != nil {
		c.abortLaunch(ct)
		release()
		return nil, fmt.Errorf("launch container %s: %w", id, err)
	}
	reported := time.Now()
	cp.Supervisor, cp.Task, cp.StartedAt = status.Supervisor, status.Task, status.StartedAt
	// Replaced without fsync (atomicfile.ReplaceFile): the pids matter
	// only while the host runs, and an agent that dies leaves what it
	// wrote in the page cache. After a crash of the host, file systems
	// that commit a rename over a file after its data (ext4's default
	// auto_da_alloc, xfs) keep the first, durable checkpoint or this one,
	// and either says the container belongs to another boot; elsewhere
	// the file may be lost, and Recover skips the state directory (the
	// cgroups died with the boot). Its two fsyncs were on every launch's
	// path.
	if err := writeVolatileJSON(filepath.Join(ct.dir, checkpointFile), cp); err != nil {
		// The supervisor's status.json still lets Recover find the pids.
		c.log.Error("containerizer: checkpoint", "container", id, "err", err)
	}
	c.mu.Lock()
	ct.ready = true
	c.version++
	snap := ct.snapshot()
	c.mu.Unlock()
	go func() {
		proc.wait() // reaped; the outcome is in exit.json
		c.finish(ct)
	}()
	done := time.Now()
	ms := func(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }
	// The stages of the launch, for the launch benchmarks: resolve (user,
	// environment, command), prepare (sandbox, checkpoint, cgroups, image
	// directories), spawn (until the supervisor runs the container: the
	// hand-off to a warm supervisor, warm_supervisor, or else the fork and
	// exec of the supervisor binary), shim (from the supervisor's start to
	// the task's fork: setup, shim start, cgroups, namespaces, mounts, fork
	// of the task), itself split into setup (the supervisor's: launch.json,
	// output pipes), shim_exec (fork and exec of the shim, born in the
	// task's v2 cgroup, and in its v1 cgroups on hybrid hosts, until its
	// main runs), join (the shim waiting for the supervisor's word that it
	// is in its v2 cgroup, which only a kernel without CLONE_INTO_CGROUP
	// makes it wait for), isolate (core
	// cookie, cgroup, PID, mount and IPC namespaces, mounts or the image
	// root, no_new_privs, seccomp) and fork (of the task, until the
	// supervisor heard of it); then report (back to Launch) and
	// checkpoint (the pids written). The supervisor's and shim's clock is
	// the host's.
	c.log.Info("containerizer: launched", "container", id, "task", spec.TaskID, "pid", cp.Task.Pid, "user", usr.Name,
		"cgroup", cp.Cgroup.Rel, "cpus", cp.Limits.CPUs, "memory_bytes", cp.Limits.MemoryBytes, "image", spec.Image != nil,
		"resolve_ms", ms(began, resolved), "user_ms", ms(began, userAt),
		"prepare_ms", ms(resolved, prepared), "sandbox_ms", ms(resolved, ps.sandbox), "container_checkpoint_ms", ms(ps.sandbox, ps.checkpoint),
		"cgroups_ms", ms(ps.checkpoint, ps.cgroups), "spawn_ms", ms(prepared, status.SupervisorAt),
		"shim_ms", ms(status.SupervisorAt, status.ShimAt),
		"setup_ms", ms(status.SupervisorAt, status.SpawnAt), "shim_exec_ms", ms(status.SpawnAt, status.ShimMainAt),
		"join_ms", ms(status.ShimMainAt, status.JoinedAt), "isolate_ms", ms(status.JoinedAt, status.IsolatedAt),
		"fork_ms", ms(status.IsolatedAt, status.ShimAt),
		"report_ms", ms(status.ShimAt, reported), "checkpoint_ms", ms(reported, done), "total_ms", ms(began, done),
		"warm_supervisor", proc.warm)
	return snap, nil
}

// prepareStages are when prepare finished each of its stages (Launch logs
// them).
type prepareStages struct {
	sandbox, checkpoint, cgroups time.Time
}

// prepare creates the sandbox, the first checkpoint and the cgroups.
func (c *Containerizer) prepare(spec Spec, usr *taskUser, sandbox, dir string, stages *prepareStages) (*checkpoint, error) {
	if err := makeSandbox(sandbox, usr); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	stages.sandbox = time.Now()
	id := spec.ContainerID
	class := cgroups.Guaranteed
	if spec.Revocable {
		class = cgroups.Revocable
	}
	rel := cgroups.ContainerRel(c.cfg.CgroupRoot, class, id)
	cp := &checkpoint{
		Version: checkpointVer, ID: id, FrameworkID: spec.FrameworkID, TaskID: spec.TaskID,
		Revocable: spec.Revocable, Resources: spec.Resources.String(), Env: spec.Env, User: usr,
		SeccompUnconfined: spec.SeccompUnconfined,
		Command: commandRecord{
			Value: spec.Command.GetValue(), Arguments: spec.Command.GetArguments(),
			Shell: spec.Command.GetShell(), Environment: spec.Command.GetEnvironment(),
		},
		Layout: c.layout, Cgroup: c.layout.ContainerPaths(c.cfg.CgroupRoot, class, id),
		Limits: cgroups.Limits{
			CPUs: spec.Resources.CPUs(), HardCPU: c.cfg.CPUHardLimit,
			MemoryBytes: cgroups.MemoryBytes(spec.Resources.Mem()), Revocable: spec.Revocable,
			PidsMax: max(c.cfg.PidsMax, 0),
		},
		Sandbox: sandbox, BootID: c.bootID,
	}
	// Durable before the cgroups exist: every cgroup under the root has a
	// checkpoint, so Recover can account for it.
	if err := writeJSON(filepath.Join(dir, checkpointFile), cp); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	stages.checkpoint = time.Now()
	if _, err := c.layout.Create(rel, cp.Limits); err != nil {
		return nil, err
	}
	stages.cgroups = time.Now()
	oom, err := cp.Cgroup.OOMKills()
	if err != nil {
		c.log.Warn("containerizer: read OOM counter", "container", id, "err", err)
	}
	cp.OOMBaseline = oom
	return cp, nil
}

// makeSandbox creates the task's working directory, owned by the task's
// user with mode 0750, and its stdout and stderr (0640, same owner, opened
// later by the supervisor for appending). Symbolic links are not followed:
// a sandbox is the task's to fill.
func makeSandbox(sandbox string, usr *taskUser) error {
	if err := os.Mkdir(sandbox, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	uid, gid := int(usr.UID), int(usr.GID)
	st, err := os.Lstat(sandbox)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", sandbox)
	}
	if err := os.Lchown(sandbox, uid, gid); err != nil {
		return err
	}
	if err := os.Chmod(sandbox, 0o750); err != nil { // Mkdir's mode is subject to the umask
		return err
	}
	for _, name := range []string{"stdout", "stderr"} {
		f, err := os.OpenFile(filepath.Join(sandbox, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0o640)
		if err != nil {
			return err
		}
		err = errors.Join(f.Chown(uid, gid), f.Chmod(0o640), f.Close())
		if err != nil {
			return err
		}
	}
	return nil
}

// noteInSandbox appends a line to the sandbox's stderr (created by
// makeSandbox; links are not followed), so that the task's log says why it
// never started.
func noteInSandbox(sandbox, line string) {
	f, err := os.OpenFile(filepath.Join(sandbox, "stderr"), os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(line + "\n")
	_ = f.Close()
}

// untraversable returns the first directory from dir up to / that others
// cannot search (no o+x), or "" when every one can: a task running as
// another user than the directory's owner can only reach its sandbox by
// absolute path through such directories.
func untraversable(dir string) string {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == "/" || d == "." {
			return ""
		}
	}
}

// abortLaunch undoes a failed launch: kills whatever may have started in the
// cgroups, removes them and the state directory.
func (c *Containerizer) abortLaunch(ct *container) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ct.cp.Cgroup.KillAndWait(ctx); err != nil {
		c.log.Error("containerizer: kill after failed launch", "container", ct.cp.ID, "err", err)
	}
	if err := ct.cp.Cgroup.Remove(); err != nil {
		c.log.Error("containerizer: remove cgroups after failed launch", "container", ct.cp.ID, "err", err)
	}
	if err := os.RemoveAll(ct.dir); err != nil {
		c.log.Error("containerizer: remove state after failed launch", "container", ct.cp.ID, "err", err)
	}
}

// startSupervisor writes launch.json, hands the container to a warm
// supervisor or else starts a detached one, and waits for its report that
// the task runs (or failed to start).
func (c *Containerizer) startSupervisor(ctx context.Context, dir string, lspec launchSpec) (*statusRecord, *supervisorProc, error) {
	if err := writeVolatileJSON(filepath.Join(dir, launchFile), lspec); err != nil {
		return nil, nil, fmt.Errorf("write launch spec: %w", err)
	}
	proc, statusR := c.takeWarm(dir)
	// The replacement starts once the task runs (or failed to), not
	// beside this launch's supervisor and shim.
	defer c.refillWarm()
	if proc == nil {
		var err error
		if proc, statusR, err = c.startColdSupervisor(dir); err != nil {
			return nil, nil, err
		}
	}
	defer statusR.Close()
	kill := func() {
		_ = proc.cmd.Process.Kill()
		proc.wait()
	}
	stop := context.AfterFunc(ctx, func() { _ = statusR.SetReadDeadline(time.Now()) })
	defer stop()
	data, readErr := io.ReadAll(statusR)
	var status statusRecord
	switch {
	case readErr != nil && ctx.Err() != nil:
		kill()
		return nil, nil, ctx.Err()
	case len(data) == 0 || json.Unmarshal(data, &status) != nil:
		state := proc.wait()
		tail, _ := os.ReadFile(filepath.Join(dir, supervisorLog))
		return nil, nil, fmt.Errorf("supervisor ended without reporting the task (%s): %s",
			state, strings.TrimSpace(lastLines(string(tail), 5)))
	case status.Error != "":
		proc.wait()
		return nil, nil, errors.New(status.Error)
	case status.Task == nil || status.Supervisor == nil:
		kill()
		return nil, nil, errors.New("supervisor reported no task pid")
	}
	return &status, proc, nil
}

// startColdSupervisor starts a supervisor for the container of state
// directory dir ("supervise run"), its output in the directory's log, and
// returns it with the read end of its status pipe.
func (c *Containerizer) startColdSupervisor(dir string) (*supervisorProc, *os.File, error) {
	logFile, err := os.OpenFile(filepath.Join(dir, supervisorLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logFile.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	argv := c.cfg.SupervisorCommand
	proc, err := c.startSupervisorProc(func() *exec.Cmd {
		cmd := exec.Command(argv[0], append(append([]string{}, argv[1:]...), "run", dir)...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.ExtraFiles = []*os.File{statusW} // fd 3
		// Own session: the supervisor outlives the agent and its terminal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return cmd
	})
	statusW.Close()
	if err != nil {
		statusR.Close()
		return nil, nil, fmt.Errorf("start supervisor %s: %w", argv[0], err)
	}
	return proc, statusR, nil
}

// commandLine returns the executable and argv for spec. A non-shell
// command's executable is resolved now, so a missing one fails Launch before
// anything is created.
func commandLine(spec Spec, pathEnv, sandbox string) (string, []string, error) {
	cmd := spec.Command
	if cmd.GetShell() {
		return "/bin/sh", []string{"/bin/sh", "-c", cmd.GetValue()}, nil
	}
	path, err := lookPath(cmd.GetValue(), pathEnv, sandbox)
	if err != nil {
		return "", nil, err
	}
	argv := cmd.GetArguments()
	if len(argv) == 0 {
		argv = []string{cmd.GetValue()}
	}
	return path, append([]string{}, argv...), nil
}

// lookPath finds file like a shell would, with the task's PATH; a name with a
// slash is taken relative to the sandbox.
func lookPath(file, pathEnv, sandbox string) (string, error) {
	check := func(p string) error {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", p)
		}
		return nil
	}
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(sandbox, p)
		}
		if err := check(p); err != nil {
			return "", fmt.Errorf("%w: executable %q: %v", ErrInvalidSpec, file, err)
		}
		return p, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: executable %q not found in PATH %q", ErrInvalidSpec, file, pathEnv)
}

// taskEnv is the task's environment: PATH (the agent's, or a default), HOME
// (the sandbox), USER and LOGNAME (Spec.User), then Command.Environment,
// Spec.Env and the SLACKLINE_ variables, later ones winning. Nothing else of
// the agent's environment is passed on.
func taskEnv(spec Spec, id, sandbox string) []string {
	m := map[string]string{"PATH": os.Getenv("PATH"), "HOME": sandbox, "USER": spec.User, "LOGNAME": spec.User}
	if m["PATH"] == "" {
		m["PATH"] = defaultPath
	}
	for k, v := range spec.Command.GetEnvironment() {
		m[k] = v
	}
	for k, v := range spec.Env {
		m[k] = v
	}
	m["SLACKLINE_SANDBOX"] = sandbox
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

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
