// Package supervisor is the code of the per-task supervisor, its exec shim
// and Exec's helper: the processes the containerizer starts from the
// slackline-supervisor binary (or the agent binary's "supervise"
// sub-command), with
//
//	supervise run <state-dir>    the supervisor of one container
//	supervise wait <state-root>  a warm supervisor: as run, once it reads its
//	                             container's state directory on stdin
//	supervise exec <state-dir>   the shim: joins the cgroups, namespaces, execs the task
//	supervise enter <state-dir>  Exec's helper: runs a command inside the container
//
// (Main). It also defines the records the containerizer and these
// processes share, as files in the container's state directory: the
// LaunchSpec (launch.json, written by the containerizer before it starts
// the supervisor), the Status (status.json, and the same JSON on the
// supervisor's status pipe, fd 3, once the task runs), the ExitRecord
// (exit.json, once it ended), the task's User and its Cgroup.
//
// # Why a package of its own
//
// Every launch executes this code before the task runs (the shim, and the
// supervisor when no warm one was ready), so the start of its binary is on
// every launch's critical path.
// The package therefore imports only the standard library, x/sys/unix, the
// seccomp assembler (elastic/go-seccomp-bpf) and internal/atomicfile: no
// protobuf, no containerd cgroups (Cgroup does the few cgroupfs operations
// the supervisor needs on plain files), no eBPF, no logging framework. A
// start of slackline-supervisor costs about what a hello world's does; one
// that linked the containerizer cost several milliseconds more in package
// initialisation and page faults. Keep it that way: TestSupervisorImports
// fails when a heavy package creeps in.
//
// # Lifecycle and ownership
//
// The supervisor runs in its own session (started for its container with
// "run", or ahead of it with "wait", reading its state directory on stdin:
// a warm supervisor), starts the shim (this same executable,
// /proc/self/exe) in new PID, mount and IPC namespaces and in the
// container's v2 cgroup (StartInCgroup: CLONE_INTO_CGROUP, else it moves
// the shim there) and v1 cgroups (StartInCgroups: forked from a thread
// that joined them by writing 0 to their tasks files, no RCU grace
// period, and ends), reports the task's pid and start time on fd 3 and in
// status.json, then completes its moves into the service cgroup named by
// LaunchSpec.SupervisorCgroup (none where the agent had it born there:
// BornInEnv), waits for the task, kills what it left in the cgroup and
// writes exit.json. It outlives the agent. The shim waits for the
// supervisor's "ok" on fd 5, enters a cgroup namespace, builds the task's
// mounts (a private tmpfs and /proc, or the image's root with
// pivot_root), sets no_new_privs and the seccomp filter, and from its
// locked thread forks the task as its user, staying its init (pid 1), or
// without namespaces execs it. A
// failure before the task runs is written to fd 3 and ends the shim with
// 127.
//
// # Errors
//
// Main returns a process exit status: 0, 1 (the supervisor could not start
// the task, or record its end), 2 (usage), 127 (the shim's setup or exec
// failed), or for "enter" the command's status, ExecSetupFailed or
// ExecTimedOut.
package supervisor
