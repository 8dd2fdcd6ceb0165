package containerizer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// ErrPermission is wrapped by errors caused by missing privileges on the
// cgroup hierarchies. It is the same value as cgroups.ErrPermission.
var ErrPermission = cgroups.ErrPermission

// ErrUnsupported is wrapped by errors about a host cgroup layout the
// containerizer cannot use (pure v1, missing controllers, controllers not
// delegated). It is the same value as cgroups.ErrUnsupported.
var ErrUnsupported = cgroups.ErrUnsupported

// ErrNotFound is wrapped by Kill, Destroy and Pids for an unknown container id.
var ErrNotFound = errors.New("container not found")

// ErrExists is wrapped by Launch when the container id is already in use.
var ErrExists = errors.New("container already exists")

// ErrRunning is wrapped by Destroy when the container has not ended yet.
var ErrRunning = errors.New("container still running")

// ErrInvalidSpec is wrapped by Launch for a spec that cannot run: no command,
// an invalid id, or an executable that is not found or not executable.
var ErrInvalidSpec = errors.New("invalid container spec")

// ErrClosed is wrapped by calls on a closed Containerizer.
var ErrClosed = errors.New("containerizer closed")

// ErrRevocableSandboxDir is wrapped by New when Config.RevocableSandboxDir
// cannot hold revocable sandboxes: missing, not a directory, or on the
// guaranteed sandboxes' file system.
var ErrRevocableSandboxDir = errors.New("revocable sandbox dir")

// Config configures a Containerizer. Zero values take the documented
// defaults.
type Config struct {
	// CgroupRoot is the agent's own cgroup, relative to each hierarchy, e.g.
	// "slackline" or "slackline-agent2" (default "slackline").
	CgroupRoot string
	// CgroupMountpoint is where the cgroup hierarchies are mounted (default
	// "/sys/fs/cgroup"); tests point it at fake trees.
	CgroupMountpoint string
	// ProcRoot is where procfs is mounted (default "/proc"); the boot id and
	// process start times are read there.
	ProcRoot string
	// SysRoot is where sysfs is mounted (default "/sys"); the CPU topology
	// is read there.
	SysRoot string
	// StateDir holds one directory per container: its checkpoint and the
	// supervisor's files (e.g. <work-dir>/containers). Required.
	StateDir string
	// SandboxDir is the parent of the per-container sandboxes (e.g.
	// <work-dir>/sandboxes). Required.
	SandboxDir string
	// RevocableSandboxDir, when set, is the parent of revocable
	// containers' sandboxes instead of SandboxDir: an existing directory
	// on another file system than SandboxDir's (New fails otherwise,
	// wrapping ErrRevocableSandboxDir), typically a partition of the same
	// disk. A file system of their own gives revocable writers a journal
	// of their own: on a shared one, a revocable writer descheduled while
	// holding a journal handle delays every guaranteed fsync behind the
	// commit (DiskIOSupport.SharedJournal).
	RevocableSandboxDir string
	// DiskLatencyTarget, when positive, is the io.latency target (v2) set
	// on CgroupRoot for the sandbox disks (DiskIOSupport.Devices): while
	// guaranteed I/O there misses it, the kernel cuts the queue depth of
	// the root's peers without a target, the revocable subtree among them
	// (and any other cgroup beside the root). 0 removes a target a previous
	// agent set. Where the host cannot set it, DiskIOSupport.LatencyWhy
	// says why; New does not fail.
	DiskLatencyTarget time.Duration
	// KillGracePeriod is the time between SIGTERM and the cgroup-wide kill
	// (default 3s).
	KillGracePeriod time.Duration
	// CPUHardLimit also caps each container's CPU time at its cpus (CFS
	// quota / cpu.max); by default cpus only sets a weight.
	CPUHardLimit bool
	// SupervisorCommand is the argv prefix that starts a supervisor (default
	// FindSupervisor(""): SupervisorBinary next to os.Executable()). The
	// program must call SuperviseMain with the arguments that follow the
	// prefix.
	SupervisorCommand []string
	// TaskUser is the user a task runs as when its Spec names none
	// (default DefaultTaskUser: DynamicTaskUser, a user of each task's
	// own). New fails if it is unknown, or root without AllowRootTasks.
	TaskUser string
	// DynamicIDs are the uids (and gids) of dynamic users (default
	// DefaultDynamicIDs).
	DynamicIDs IDRange
	// DynamicIDsDir holds the host-wide state of dynamic ids, shared by
	// every agent of the host: a lock, the cursor and the leases of the ids
	// in use (default DefaultDynamicIDsDir). Agents sharing a host must
	// share it (and DynamicIDs); tests point it elsewhere.
	DynamicIDsDir string
	// DiskRequestDir holds the host-wide record of the sandbox disk's
	// lowered request size (its own value and the agents holding it
	// lowered; default DefaultDiskRequestDir). Agents sharing a host must
	// share it; tests point it elsewhere.
	DiskRequestDir string
	// AllowRootTasks lets tasks run as root (uid 0). Without it a launch as
	// root fails with ErrTaskUser, whatever the coordinator allowed: a
	// second line of defence behind its authorization.
	AllowRootTasks bool
	// OutputLimit is how much of each of a task's output streams (stdout,
	// stderr) is kept on disk: the newest output, rotated through
	// <stream>.1 by the supervisor (default DefaultOutputLimit; negative:
	// unlimited, the task writes its files directly).
	OutputLimit int64
	// PidsMax bounds each task's processes and threads with the pids
	// controller (v2, or the v1 pids hierarchy on hybrid hosts), so a fork
	// bomb stops there (default DefaultPidsMax; negative: unbounded). A host
	// without the controller runs tasks unbounded, and New says so.
	PidsMax int64
	// SubtreePidsMax bounds the processes and threads of all tasks of each
	// subtree together (pids.max of the guaranteed and of the revocable
	// subtree), so that tasks together cannot exhaust the host's pids
	// (default DefaultSubtreePidsMax of the host's bound; negative:
	// unbounded). Without the pids controller nothing is bounded.
	SubtreePidsMax int64
	// Isolation turns parts of the tasks' isolation off (the zero value,
	// DefaultIsolation: all of it; see the package documentation).
	Isolation Isolation
	// Logger receives the containerizer's logs (default slog.Default()).
	Logger *slog.Logger
}

// Mode is the host's cgroup layout.
type Mode string

const (
	// ModeV2 is pure cgroup v2.
	ModeV2 Mode = "v2"
	// ModeHybrid is cgroup v1 cpu and memory controllers with the v2 tree at
	// <mountpoint>/unified.
	ModeHybrid Mode = "hybrid"
)

// Spec is what to run in a container.
type Spec struct {
	// ContainerID is the container's id; when empty Launch generates one.
	// It must be 1-128 characters of [A-Za-z0-9._-].
	ContainerID string
	// FrameworkID and TaskID identify the task (informational; exported to
	// the task's environment).
	FrameworkID, TaskID string
	// Revocable puts the container in the revocable subtree (lowest CPU
	// priority).
	Revocable bool
	// Resources set the limits: cpus -> CPU weight (and cap with
	// Config.CPUHardLimit), mem (MiB) -> memory limit (0: unlimited).
	Resources resources.Resources
	// Command is what runs: with Shell, "/bin/sh -c Value"; otherwise Value
	// is the executable (looked up in PATH, or relative to the sandbox when
	// it contains a slash) and Arguments its argv, argv[0] included
	// (Value alone when Arguments is empty).
	Command *slacklinev1.CommandInfo
	// Env is added to the task's environment after Command.Environment.
	Env map[string]string
	// User is the Unix user the task runs as, looked up in the host's user
	// database; empty means Config.TaskUser.
	User string
	// SeccompUnconfined runs the task without the seccomp filter (the
	// coordinator lets only frameworks with run_unconfined_tasks ask).
	SeccompUnconfined bool
	// Fetch, when set, fills the sandbox before the task starts (the
	// agent's fetcher: the task's artifacts), as root, with the task's
	// uid and gid to own what it writes. It runs after the sandbox, the
	// checkpoint and the cgroups exist and before the supervisor starts;
	// a non-shell command's executable is looked up after it, so it may
	// be a fetched file. Its error fails Launch (wrapped, so callers can
	// errors.As it) and is appended to the sandbox's stderr. Not
	// checkpointed: it only matters during Launch.
	Fetch func(ctx context.Context, sandbox string, uid, gid int) error `json:"-"`
	// Image, when set, is the task's root filesystem (see Image and the
	// package documentation's Images); Command may then be empty.
	Image *Image
}

// Container is a container the containerizer runs or ran. Values returned
// are snapshots owned by the caller.
type Container struct {
	ID   string
	Spec Spec
	Mode Mode
	// CgroupPath is the cgroup relative to each hierarchy, e.g.
	// "slackline/guaranteed/<id>".
	CgroupPath string
	// Sandbox is the task's working directory, holding stdout and stderr.
	Sandbox string
	// Pid is the task's main process.
	Pid int
	// StartedAt is when the task's process was started.
	StartedAt time.Time
	// Exit is the container's end once known (nil while running).
	Exit *Exit
}

// Exit is how a container ended.
type Exit struct {
	ContainerID string
	// ExitCode is the main process's exit code, -1 when it was killed by a
	// signal or its status is unknown.
	ExitCode int
	// Signal is the signal that killed the main process (0 if it exited).
	Signal int
	// OOMKilled reports that the cgroup's OOM-kill counter rose while the
	// container ran: the kernel killed one of its processes for exceeding
	// the memory limit.
	OOMKilled bool
	// Killed reports that the container was ended by Kill.
	Killed bool
	// Lost reports that the container vanished without an exit status
	// (host reboot: other boot id, cgroups and processes gone).
	Lost bool
	// Message is a human-readable summary, e.g. "exited with code 3",
	// "killed by signal 9 (SIGKILL)", "OOM-killed: memory limit 64 MiB".
	Message string
}

// Containerizer runs tasks as process trees in their own cgroups, each
// watched by a detached supervisor process. See the package documentation.
// Its methods are safe for concurrent use.
type Containerizer struct {
	cfg    Config
	log    *slog.Logger
	layout cgroups.Layout
	// polled keeps the files of the revocable subtree's counters open
	// (polledLayout), and levers those of the revocable subtree's and the
	// root's limits, holding what they read (leverLayout, refreshed at
	// each leverRefresh boundary and after every write of a lever): the
	// QoS loop reads them at every evaluation (#29). A handful of fixed
	// paths: well under cgroups.MaxOpenFiles.
	polled, levers *cgroups.OpenFiles
	bootID         string
	// supervisors is the cgroup supervisors move into (SupervisorsCgroup).
	supervisors cgroups.Paths
	// coreCookies: revocable tasks get a core-scheduling cookie of their own.
	coreCookies bool

	mu         sync.Mutex
	containers map[string]*container
	// version counts the changes of what Containers returns (a container
	// ready, ended or destroyed): ContainersVersion (#29).
	version    uint64
	dynamicIDs *dynamicIDs
	// diskIO is what the host offers of disk I/O QoS (SetupIO).
	diskIO DiskIOSupport
	closed bool

	exits *exitQueue
	done  chan struct{} // closed by Close

	// warm holds the supervisors started ahead of launches (warm.go).
	warm warmPool
}

// container is the containerizer's record of one container.
type container struct {
	cp     *checkpoint
	dir    string        // its state directory
	ended  chan struct{} // closed once exit is set
	exit   *Exit
	finish sync.Once
	ready  bool     // false while Launch runs: invisible to the other methods
	watch  *os.File // pidfd of an adopted supervisor; nil for our own children
	// stuckStarts counts exec helpers whose start outlasted Exec's
	// deadline and has not returned yet (a cgroup frozen meanwhile):
	// while one is, Exec starts no other (ErrFrozen), so each container
	// ties up at most the starts in flight when it froze.
	stuckStarts atomic.Int32
}

// New detects the host's cgroup layout, logs it, and creates the agent's
// cgroup root with its guaranteed and revocable subtrees in every hierarchy
// it needs (the v1 cpu and memory hierarchies and the v2 tree on hybrid
// hosts; the v2 tree with cpu and memory delegated on pure v2). The
// revocable subtree gets the lowest CPU priority.
//
// Errors wrap ErrPermission (not root, read-only or non-delegated cgroupfs:
// the message names the path and the fix) or ErrUnsupported (pure v1,
// missing controller).
func New(cfg Config) (*Containerizer, error) {
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "slackline"
	}
	if cfg.CgroupMountpoint == "" {
		cfg.CgroupMountpoint = "/sys/fs/cgroup"
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.KillGracePeriod <= 0 {
		cfg.KillGracePeriod = 3 * time.Second
	}
	if cfg.OutputLimit == 0 {
		cfg.OutputLimit = DefaultOutputLimit
	}
	if cfg.PidsMax == 0 {
		cfg.PidsMax = DefaultPidsMax
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TaskUser == "" {
		cfg.TaskUser = DefaultTaskUser
	}
	if cfg.DynamicIDs == (IDRange{}) {
		cfg.DynamicIDs = DefaultDynamicIDs
	}
	if cfg.DynamicIDsDir == "" {
		cfg.DynamicIDsDir = DefaultDynamicIDsDir
	}
	if cfg.DiskRequestDir == "" {
		cfg.DiskRequestDir = DefaultDiskRequestDir
	}
	if cfg.TaskUser != DynamicTaskUser {
		if _, err := resolveUser(cfg.TaskUser, cfg.AllowRootTasks); err != nil {
			return nil, fmt.Errorf("default task user: %w", err)
		}
	}
	if len(cfg.SupervisorCommand) == 0 {
		argv, err := FindSupervisor("")
		if err != nil {
			return nil, err
		}
		cfg.SupervisorCommand = argv
	}
	if cfg.StateDir == "" || cfg.SandboxDir == "" {
		return nil, errors.New("containerizer: StateDir and SandboxDir are required")
	}
	if err := cgroups.ValidateRoot(cfg.CgroupRoot); err != nil {
		return nil, err
	}
	// Tasks never read the state (it holds every task's environment); they
	// traverse the sandboxes' parent to reach their own.
	for _, d := range []struct {
		path *string
		mode os.FileMode
	}{{&cfg.StateDir, 0o700}, {&cfg.SandboxDir, 0o755}} {
		abs, err := filepath.Abs(*d.path)
		if err != nil {
			return nil, err
		}
		*d.path = abs
		if err := os.MkdirAll(abs, d.mode); err != nil {
			return nil, fmt.Errorf("create %s: %w", abs, err)
		}
	}
	if err := setupRevocableSandboxDir(&cfg); err != nil {
		return nil, err
	}
	layout, err := cgroups.Detect(cfg.CgroupMountpoint)
	if err != nil {
		return nil, err
	}
	layout = layout.WithUsablePids(cfg.CgroupRoot)
	if err := layout.SetupRoot(cfg.CgroupRoot); err != nil {
		return nil, err
	}
	if cfg.SubtreePidsMax == 0 {
		bound, err := cgroups.HostPidsBound(cfg.ProcRoot)
		if err != nil {
			return nil, fmt.Errorf("the host's bound on processes: %w", err)
		}
		cfg.SubtreePidsMax = DefaultSubtreePidsMax(bound)
	}
	if err := layout.SetSubtreePidsMax(cfg.CgroupRoot, cfg.SubtreePidsMax); err != nil {
		return nil, err
	}
	if layout.CPUSet != "" {
		if err := layout.SetupCPUSet(cfg.CgroupRoot); err != nil {
			level := slog.LevelInfo
			if !errors.Is(err, cgroups.ErrUnsupported) {
				level = slog.LevelWarn
			}
			cfg.Logger.Log(context.Background(), level, "containerizer: revocable work cannot be confined to CPUs", "err", err)
			layout.CPUSet = ""
		}
	}
	diskIO := setupDiskIO(&layout, cfg)
	supervisors, err := layout.SetupService(cfg.CgroupRoot, cgroups.SupervisorsCgroup, supervisorLimits)
	if err != nil {
		return nil, err
	}
	bootID, err := readBootID(cfg.ProcRoot)
	if err != nil {
		return nil, err
	}
	coreCookies, why := coreScheduling(cfg.SysRoot)
	cfg.Logger.Info("containerizer: core scheduling for revocable tasks", "enabled", coreCookies, "why", why)
	self, err := procStartTime(cfg.ProcRoot, os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("start time of the agent: %w", err)
	}
	dynamic, err := openDynamicIDs(cfg.DynamicIDsDir, cfg.DynamicIDs, procRef{Pid: os.Getpid(), StartTime: self}, bootID, cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("dynamic users: %w", err)
	}
	if n, err := dynamic.sweep(); err != nil {
		cfg.Logger.Warn("containerizer: sweep the host's dynamic id leases", "dir", cfg.DynamicIDsDir, "err", err)
	} else if n > 0 {
		cfg.Logger.Info("containerizer: reclaimed dynamic ids of ended tasks", "dir", cfg.DynamicIDsDir, "leases", n)
	}
	c := &Containerizer{
		cfg: cfg, log: cfg.Logger, layout: layout, polled: &cgroups.OpenFiles{}, levers: cgroups.NewHeldFiles(leverRefresh, time.Now), bootID: bootID, supervisors: supervisors, coreCookies: coreCookies,
		containers: make(map[string]*container), dynamicIDs: dynamic, diskIO: diskIO,
		exits: newExitQueue(),
		done:  make(chan struct{}),
	}
	attrs := []any{"mode", string(layout.Mode), "root", cfg.CgroupRoot, "unified", layout.Unified}
	if layout.Mode == cgroups.ModeHybrid {
		attrs = append(attrs, "cpu", layout.CPU, "memory", layout.Memory)
	}
	attrs = append(attrs, "cpuset", layout.CPUSet)
	c.log.Info("containerizer: disk I/O QoS", "cap", diskIO.Cap, "devices", diskIO.Devices, "cap_why", diskIO.CapWhy, "weight", diskIO.Weight, "weight_why", diskIO.WeightWhy,
		"shared_journal", diskIO.SharedJournal, "journal_why", diskIO.JournalWhy)
	c.log.Info("containerizer: cgroups detected", append(attrs, "pids", layout.Pids, "subtree_pids_max", max(cfg.SubtreePidsMax, 0), "task_pids_max", max(cfg.PidsMax, 0))...)
	if layout.Pids == "" && cfg.PidsMax > 0 {
		c.log.Warn("containerizer: no pids controller (v2: the parent of the cgroup root must delegate pids; hybrid: mount the v1 pids hierarchy): tasks' processes are not bounded")
	}
	if files := layout.MembershipFilesWritableByOthers(cfg.CgroupRoot); len(files) > 0 {
		c.log.Warn("containerizer: users other than root can write these cgroup membership files, so tasks could move themselves out of their cgroups; make them root's, mode 0644",
			"files", files)
	}
	for _, parent := range []string{cfg.SandboxDir, cfg.RevocableSandboxDir} {
		if parent == "" {
			continue
		}
		if dir := untraversable(parent); dir != "" {
			c.log.Warn("containerizer: tasks not running as root cannot reach their sandboxes by absolute path (HOME, SLACKLINE_SANDBOX); their working directory still works",
				"dir", dir, "fix", "chmod o+x "+dir)
		}
	}
	c.reconcileDiskRequests()
	c.refillWarm()
	return c, nil
}

// supervisorLimits: supervisors sleep in wait(2) nearly all the time; the
// weight of a tenth of a CPU only matters in the moment a task ends.
var supervisorLimits = cgroups.ServiceLimits{Weight: 0.1}

// AgentLimits are the agent's own cgroup's (IsolateAgent): the weight of a
// quarter of a CPU, so that under contention a guaranteed task with one cpu
// gets four times the agent's share, and a cap of one core, so that a
// runaway agent cannot take the node.
var AgentLimits = cgroups.ServiceLimits{Weight: 0.25, Cap: 1}

// IsolateAgent moves the process pid (the agent, all its threads) into
// <root>/agent, a cgroup of its own with AgentLimits, created if needed.
// Task supervisors live in <root>/supervisors already, so nothing that ends
// the agent's original cgroup (a container runtime removing the agent's
// pod, systemd stopping its unit) reaches them.
func (c *Containerizer) IsolateAgent(pid int) error {
	p, err := c.layout.SetupService(c.cfg.CgroupRoot, cgroups.AgentCgroup, AgentLimits)
	if err != nil {
		return err
	}
	return p.Join(pid)
}

// Mode returns the host's cgroup layout.
func (c *Containerizer) Mode() Mode { return Mode(c.layout.Mode) }

// Exits returns the channel on which every container's end is delivered,
// exactly once per Containerizer value. Exits are queued without bound
// inside the containerizer (the channel itself is unbuffered), so watchers
// never block and nothing is dropped; they arrive in the order they were
// observed. A container keeps its checkpoint until Destroy, so after a
// restart Recover delivers the Exit of an ended but not yet destroyed
// container again: call Destroy once the Exit has been acted upon.
func (c *Containerizer) Exits() <-chan Exit { return c.exits.out }

// polledLayout is the layout with polled files kept open, for the
// counters the QoS loop reads at every evaluation (RevocableIOBytes).
func (c *Containerizer) polledLayout() cgroups.Layout {
	l := c.layout
	l.Files = c.polled
	return l
}

// leverRefresh bounds how long a lever's value is held (leverLayout): a
// change the agent did not make (an operator's, a CPU going offline)
// shows at the first read after the next multiple of it on the clock.
const leverRefresh = time.Second

// leverLayout is the layout with the levers' files kept open and what
// they read held (cgroups.NewHeldFiles), for the getters the QoS loop
// calls at every evaluation (RevocableCPULimit, RevocableCPUs, CPUs,
// RevocableMemoryHigh, RevocableFrozen, RevocableIOLimit): only the
// setters beside them write those files, and each forgets what is held
// (forgetLevers), so an evaluation after a correction reads it afresh.
func (c *Containerizer) leverLayout() cgroups.Layout {
	l := c.layout
	l.Files = c.levers
	return l
}

// forgetLevers has the next read of every lever read its file: called
// after every write of one, failed or not.
func (c *Containerizer) forgetLevers() { c.levers.Forget() }

// PolledFileOverflows returns how many reads of a polled control file
// found cgroups.MaxOpenFiles files kept open already and opened it afresh
// (cgroups.OpenFiles.Overflows). It only grows.
func (c *Containerizer) PolledFileOverflows() uint64 {
	return c.polled.Overflows() + c.levers.Overflows()
}

// ContainersVersion returns a number that changes whenever Containers
// may return something else (a container became ready, ended or was
// destroyed): a caller that polls Containers can keep its last snapshot
// while the version has not moved. Read the version before Containers, so
// that a change in between is seen at the next call.
func (c *Containerizer) ContainersVersion() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Containers returns a snapshot of every container not yet destroyed,
// sorted by id; ended ones have Exit set.
func (c *Containerizer) Containers() []*Container {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Container, 0, len(c.containers))
	for _, ct := range c.containers {
		if !ct.ready {
			continue
		}
		out = append(out, ct.snapshot())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Pids returns every process in the container's cgroup (all hierarchies
// agree; the v2 tree is read).
func (c *Containerizer) Pids(id string) ([]int, error) {
	ct, err := c.lookup(id)
	if err != nil {
		return nil, err
	}
	return ct.cp.Cgroup.Procs()
}

// Close ends the idle warm supervisors (waiting until they are reaped) and
// stops watching containers and delivering exits. It does not touch the
// containers: their supervisors keep running, and a new Containerizer
// on the same StateDir re-adopts them with Recover. Exits not yet received
// are not lost: they are delivered again by the next Recover.
func (c *Containerizer) Close() error {
	c.closeWarm()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	close(c.done)
	c.exits.close()
	_ = c.polled.Close()
	_ = c.levers.Close()
	for _, ct := range c.containers {
		if ct.watch != nil {
			_ = ct.watch.Close()
		}
	}
	return nil
}

func (c *Containerizer) lookup(id string) (*container, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	ct := c.containers[id]
	if ct == nil || !ct.ready {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return ct, nil
}

// snapshot returns the public view of ct. Callers hold c.mu or own ct.
func (ct *container) snapshot() *Container {
	cp := ct.cp
	out := &Container{
		ID: cp.ID, Spec: cp.spec(), Mode: Mode(cp.Layout.Mode), CgroupPath: cp.Cgroup.Rel,
		Sandbox: cp.Sandbox, StartedAt: cp.StartedAt,
	}
	if cp.Task != nil {
		out.Pid = cp.Task.Pid
	}
	if ct.exit != nil {
		e := *ct.exit
		out.Exit = &e
	}
	return out
}

// exitQueue is an unbounded FIFO in front of an unbuffered channel.
type exitQueue struct {
	mu      sync.Mutex
	pending []Exit
	wake    chan struct{}
	stop    chan struct{}
	out     chan Exit
}

func newExitQueue() *exitQueue {
	q := &exitQueue{wake: make(chan struct{}, 1), stop: make(chan struct{}), out: make(chan Exit)}
	go q.pump()
	return q
}

func (q *exitQueue) push(e Exit) {
	q.mu.Lock()
	q.pending = append(q.pending, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *exitQueue) close() { close(q.stop) }

func (q *exitQueue) pump() {
	for {
		q.mu.Lock()
		var next *Exit
		if len(q.pending) > 0 {
			e := q.pending[0]
			next = &e
		}
		q.mu.Unlock()
		if next == nil {
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				return
			}
		}
		select {
		case q.out <- *next:
			q.mu.Lock()
			q.pending = q.pending[1:]
			q.mu.Unlock()
		case <-q.stop:
			return
		}
	}
}
