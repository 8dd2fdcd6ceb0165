package supervisor

import "time"

// Files in a container's state directory that the supervisor reads or
// writes (the containerizer's checkpoint is beside them).
const (
	LaunchFile = "launch.json"    // what the supervisor runs (LaunchSpec)
	StatusFile = "status.json"    // written by the supervisor once the task started (Status)
	ExitFile   = "exit.json"      // written by the supervisor once the task ended (ExitRecord)
	LogFile    = "supervisor.log" // the supervisor's stdout and stderr
)

// ProcRef names a process robustly: pid plus its start time (clock ticks
// after boot, field 22 of /proc/<pid>/stat), so a reused pid is not mistaken
// for it.
type ProcRef struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// Status is what the supervisor reports once the task has exec'd:
// on its status pipe to Launch, and in status.json for a recovering agent
// that died before checkpointing the pids.
type Status struct {
	Supervisor *ProcRef  `json:"supervisor,omitempty"`
	Task       *ProcRef  `json:"task,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	Error      string    `json:"error,omitempty"`
	// SupervisorAt is when the supervisor began, ShimAt when its shim
	// reported the task forked or exec'd: the launch's stages (Launch logs
	// them).
	SupervisorAt time.Time `json:"supervisor_at,omitzero"`
	ShimAt       time.Time `json:"shim_at,omitzero"`
	// The stages in between, for the same logs: SpawnAt is when the
	// supervisor, set up, started the shim; the shim's own clock (the
	// host's) says when its main began (ShimMainAt: fork, exec and Go
	// runtime start), when it had joined the cgroups (JoinedAt) and when
	// its namespaces, mounts, no_new_privs and seccomp filter were in
	// place (IsolatedAt), just before it forked or exec'd the task.
	SpawnAt    time.Time `json:"spawn_at,omitzero"`
	ShimMainAt time.Time `json:"shim_main_at,omitzero"`
	JoinedAt   time.Time `json:"joined_at,omitzero"`
	IsolatedAt time.Time `json:"isolated_at,omitzero"`
}

// ExitRecord is the task's end as the supervisor saw it, exit.json.
type ExitRecord struct {
	ExitCode   int       `json:"exit_code"`
	Signal     int       `json:"signal,omitempty"`
	FinishedAt time.Time `json:"finished_at"`
	// Leftover is how many processes were still in the cgroup after the main
	// process ended (they were killed).
	Leftover int    `json:"leftover,omitempty"`
	Error    string `json:"error,omitempty"`
}

// LaunchSpec is what the supervisor and its exec shim run, launch.json.
type LaunchSpec struct {
	Path   string   `json:"path"`
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	Stdout string   `json:"stdout"`
	Stderr string   `json:"stderr"`
	Cgroup Cgroup   `json:"cgroup"`
	// User is who the shim becomes before it execs the task. Required: a
	// launch.json without it is refused, never run as root.
	User *User `json:"user"`
	// SupervisorArgv is the argv prefix that reaches Main; the shim
	// is /proc/self/exe run with SupervisorArgv + ["exec", <state dir>].
	SupervisorArgv []string `json:"supervisor_argv"`
	// OutputLimit is how much of each output stream is kept on disk
	// (Config.OutputLimit); 0: the task writes its files directly.
	OutputLimit int64 `json:"output_limit,omitempty"`
	// SupervisorCgroup lists the cgroup.procs files the supervisor moves
	// itself into first (<root>/supervisors), out of the agent's cgroup.
	SupervisorCgroup []string `json:"supervisor_cgroup,omitempty"`
	// CoreCookie gives the task a core-scheduling cookie of its own before
	// it execs (revocable tasks on hosts with SMT siblings).
	CoreCookie bool `json:"core_cookie,omitempty"`
	// Namespaces: the supervisor clones the shim into new PID, mount and
	// IPC namespaces; the shim mounts the task's private tmpfs and /proc,
	// forks the task and stays its init (pid 1).
	Namespaces bool `json:"namespaces,omitempty"`
	// TmpfsBytes is the size of the tmpfs behind the task's /tmp,
	// /var/tmp and /dev/shm (tmpfsBytes).
	TmpfsBytes int64 `json:"tmpfs_bytes,omitempty"`
	// Keep are host paths the task needs (its sandbox, its executable)
	// that stay visible where its tmpfs would hide them.
	Keep []string `json:"keep,omitempty"`
	// Seccomp installs the task's seccomp filter before it runs.
	Seccomp bool `json:"seccomp,omitempty"`
	// Root, for a task with an image, is its root filesystem: the shim
	// builds it and pivots into it instead of the private tmpfs of
	// Namespaces.
	Root *RootSpec `json:"root,omitempty"`
}
