// Package containerizer runs a Slackline agent's tasks: each task is a
// process tree in its own cgroup, with a CPU weight from its cpus, an
// optional CPU cap, and a memory limit from its mem, watched by a small
// supervisor process that outlives the agent. It is the equivalent of the
// Mesos containerizer with the cgroups isolators and the command executor.
//
// # Lifecycle
//
//	c, err := containerizer.New(cfg)     // detect v2/hybrid, create <root>/{guaranteed,revocable}
//	running, err := c.Recover(ctx)       // after a restart: re-adopt, report what ended meanwhile
//	ct, err := c.Launch(ctx, spec)       // returns once the task has exec'd in its cgroups
//	e := <-c.Exits()                     // every container's end, exactly once
//	err = c.Kill(ctx, ct.ID)             // SIGTERM, grace, cgroup-wide SIGKILL
//	err = c.Destroy(ct.ID)               // after its Exit: remove cgroups and checkpoint
//	code, out, err := c.Exec(ctx, ct.ID, cmd) // a command inside the running container (health checks)
//	conn, err := c.DialTask(ctx, ct.ID, port) // the task's own loopback port
//	c.Close()                            // stop watching; containers keep running
//
// Supervisors and shims are a small binary of their own, slackline-supervisor
// (cmd/slackline-supervisor), whose main is
//
//	os.Exit(supervisor.Main(os.Args[1:]))
//
// Config.SupervisorCommand defaults to FindSupervisor(""): SupervisorBinary
// next to the running executable; New fails naming the path when it is not
// there. Every launch executes it twice (supervisor, then shim), on the
// launch's critical path, so its code is the sub-package supervisor, which
// imports only the standard library, x/sys/unix and the seccomp assembler
// (no protobuf, no containerd cgroups, no eBPF): the records it shares with
// this package (launch.json, status.json, exit.json, the task's user and
// cgroup) are defined there, and this package aliases them. The agent
// binary still dispatches its "supervise" sub-command to SuperviseMain
// (tests, and {agent, "supervise"} as a SupervisorCommand).
//
// # Cgroup layout
//
// The host's layout is detected by New and logged; Mode reports it. A
// container's cgroup is <root>/guaranteed/<id>, or <root>-revocable/<id> for
// a task with revocable resources; Container.CgroupPath is that relative
// path. The revocable subtree is the root's sibling, not its child:
// cpu.idle and CPU weights rank a cgroup among its siblings only, so under
// the root best-effort work would be idle next to guaranteed tasks but
// compete, through the root's weight, with everything outside it (host
// services, --protect-cgroup services and their clients). With the root at
// the top of the hierarchy (the default, "slackline"), best-effort work is
// idle next to every other cgroup of the host. Agents before this layout
// put it at <root>/revocable; their containers keep their checkpointed
// paths, and Recover clears orphans there too. On pure cgroup v2 it is one directory of the v2 tree with cpu.weight
// (clamp(cpus*100, 1, 10000)), cpu.max ("<cpus*100000> 100000", only with
// Config.CPUHardLimit) and memory.max (mem MiB, plus memory.swap.max 0 where
// swap is accounted); <root> and both subtrees delegate "+cpu +memory", and
// the parent of <root> must already delegate them (New says how to fix it
// otherwise, never touching that parent; the revocable subtree, its
// sibling, has the same parent). On a hybrid host (the development
// and CI machines) the same relative path exists in three hierarchies: the
// v1 cpu hierarchy (cpu.shares = max(2, cpus*1024), CFS quota and period
// with the hard limit), the v1 memory hierarchy (memory.limit_in_bytes and
// memory.memsw.limit_in_bytes) and the controller-less v2 tree at
// <mountpoint>/unified, used for membership, kill, freeze and PSI. The
// revocable subtree runs at the lowest CPU priority: v2 cpu.weight 1 and
// cpu.idle 1, v1 cpu.shares 2 (and cpu.idle 1 where the kernel has it). The
// values are computed and written by the cgroups sub-package, which uses
// github.com/containerd/cgroups/v3.
//
// Where the host has a cpuset controller (the v1 cpuset hierarchy on
// hybrid hosts, where tasks join their subtree's directory; the v2 tree
// when the root's parent delegates cpuset), SetRevocableCPUs confines the
// whole revocable subtree to some CPUs, RevocableCPUs reads them back, and
// SetRevocableCPULimit caps it with a CFS period of the caller's choosing:
// the QoS controllers' mechanisms. Without one, the CPU set calls wrap
// ErrUnsupported and New logs why.
//
// Beside the two subtrees the root holds two service cgroups (cgroups
// package, SetupService): <root>/supervisors, where every supervisor is
// born in the v2 tree (clone3 with CLONE_INTO_CGROUP; kernels before 5.7:
// it moves there before it reports its task) and which it joins in the v1
// hierarchies of hybrid hosts once its task runs (weight of a tenth of a
// CPU), and <root>/agent,
// into which IsolateAgent moves the agent (AgentLimits: the weight of a
// quarter of a CPU, capped at one core), so that its reactions never
// compete with guaranteed tasks on an equal footing.
//
// Where cores have SMT siblings and the kernel has core scheduling
// (PR_SCHED_CORE), the shim gives every revocable task a core-scheduling
// cookie of its own before it execs: the kernel then never runs it on one
// hardware thread of a core while guaranteed work (no cookie) runs on the
// other. New logs whether it does and why.
//
// # Files
//
//	<SandboxDir>/<id>/                the task's working directory and HOME (task's user, 0750)
//	<SandboxDir>/<id>/stdout, stderr  the task's output, appended (task's user, 0640)
//	<SandboxDir>/<id>/stdout.1, ...   the older half of the output kept (Config.OutputLimit)
//	<SandboxDir>/<id>/.image/         an image task's upper, work and mount point directories (root's, 0700)
//	<RevocableSandboxDir>/<id>/...    the same for a revocable task, when Config.RevocableSandboxDir is set
//	<StateDir>/<id>/container.json    the checkpoint (see Checkpoint below)
//	<StateDir>/<id>/launch.json       argv, environment, cgroup directories for the supervisor
//	<StateDir>/<id>/status.json       the supervisor's and task's pids, once started
//	<StateDir>/<id>/exit.json         the task's exit code or signal, once ended
//	<StateDir>/<id>/supervisor.log    the supervisor's own log
//
// The supervisor's files live in StateDir rather than in the sandbox so a
// task cannot clobber its own outcome while cleaning its working directory.
// StateDir and each container's directory in it are root's, mode 0700:
// launch.json holds the task's environment, which other tasks must not
// read. SandboxDir is 0755 so tasks can reach their own sandbox.
//
// RevocableSandboxDir, when set, must be an existing directory on another
// file system than SandboxDir (New checks it): revocable tasks' scratch
// then has a journal of its own, and a revocable writer descheduled at
// idle priority while it holds a journal handle cannot hold the commit
// guaranteed tasks' fsyncs wait for. DiskIO says whether the two share a
// journal (SharedJournal), and the revocable I/O cap covers the disks of
// both directories.
// Every JSON file is written atomically (temporary file, fsync, rename,
// fsync of the directory), except launch.json, status.json, the
// container.json rewritten after launch (with the pids) and the dynamic
// ids' leases, which matter only while the host runs (a host crash ends
// the container; the page cache outlives the agent's own crash): they are
// renamed into place without the fsyncs, which were on every launch's
// path. (The first container.json, written before any cgroup exists, and
// the dynamic ids' cursor, once per block of 32 ids, are synced.) A
// container.json that a host crash left empty or cut short on a file
// system that does not order the rename after the data: Recover reports
// nothing for it (the agent reports its task lost), removes its cgroups as
// an orphan's and moves its directory into StateDir/+unreadable, where the
// newest 8 are kept for diagnosis.
//
// # Artifacts and commands inside a running container
//
// Spec.Fetch, when set, fills the sandbox after it, the checkpoint and the
// cgroups exist and before the supervisor starts (the agent's fetcher);
// a non-shell command's executable is then looked up after it, and its
// error fails Launch, appended to the sandbox's stderr.
//
// Exec runs a command as the task runs: the supervisor binary's "supervise
// enter <state-dir>" helper, born in the container's cgroups as the shim
// is (supervisor.StartInCgroups; it joins any it could not be born in),
// opens a pidfd
// of the task's main process (checked against its recorded start time),
// unshares its file-system context and setns()es, on one locked thread,
// into the task's mount, PID, IPC, network, UTS and cgroup namespaces
// (those that differ from its own), enters the task's working directory,
// sets no_new_privs and the task's seccomp filter, and forks the command
// as the task's user with the task's environment plus the command's, in a
// session of its own that it kills at the deadline. The agent's own
// threads never change namespaces. DialTask connects to the task's
// loopback: the host's when the task shares the agent's network
// namespace, else from a thread that entered the task's (and dies after).
// A child born in a frozen cgroup freezes before it execs and its start
// returns only at thaw, so Exec fails at once with ErrFrozen when the
// container's cgroup or an ancestor asks to freeze (cgroup.freeze, as the
// QoS freezer does to the revocable subtree), and a start racing with a
// freeze returns at the deadline (the process it eventually starts is
// killed and reaped); while such a start is stuck, Exec of that container
// fails with ErrFrozen without starting another.
//
// # Supervisor, and how a task enters its cgroups before it execs
//
// Launch checks the spec (a shell command runs as /bin/sh -c value;
// otherwise value is the executable, found in the task's PATH or relative to
// the sandbox, and arguments its argv with argv[0]), creates the sandbox,
// writes the checkpoint, creates the cgroups with their limits, and hands
// the container to a warm supervisor (below), or starts one ("supervise
// run <state-dir>"), in its own session, so it survives the agent and its
// terminal. The supervisor stays outside the task's cgroups. It starts the
// shim ("supervise exec <state-dir>", the same binary through
// /proc/self/exe) in a new session, cloned into new PID, mount and IPC
// namespaces (see Namespaces) and into the container's v2 cgroup
// (CLONE_INTO_CGROUP, Linux 5.7+; on older kernels the supervisor moves it
// there before it lets it go on, on fd 5), and on hybrid hosts into the
// container's v1 cgroups (cpu, memory, pids, and cpuset, blkio where
// used) by inheritance: the supervisor forks it from an OS thread of its
// own that first moved itself into them by writing 0 to their tasks
// files, and that ends with the fork (supervisor.StartInCgroups). Every
// thread the shim has or makes, as the task's init too, is thus in all
// the task's cgroups from birth and counts against its pids.max. The shim
// confines itself (see Users and confinement) and from its locked thread
// forks the command as the task's user with the task's environment,
// staying its init, or execs it. The task's process is therefore in all
// its cgroups before the user's command runs, its memory is charged to
// its memory cgroup, and everything it forks inherits them. The agent
// starts supervisors the same way, born in <root>/supervisors in every
// hierarchy, so a supervisor moves itself nowhere (it moves into what it
// could not be born in, after the report where it can). Why this way: on
// a hierarchy not mounted with favordynmods, every write of a pid to
// cgroup.procs (or tasks) takes cgroup_threadgroup_rwsem for writing,
// which waits for an RCU grace period while holding cgroup_mutex
// (milliseconds; tens on a busy host), and every cgroup write of the
// next launch (its cgroups' creation, its limits) queues behind it; a
// fork into a cgroup and a thread moving itself do not. So no grace
// period is on or before the path of a launch, with or without
// namespaces.
// The shim's exec error, if any, travels back on a close-on-exec
// pipe: end-of-file means the task runs. The supervisor then finds the
// task's host pid (the init's child in the cgroup), reports it and its
// start time to Launch on a pipe (and in status.json), waits for the init
// (which reports the task's own wait status on a second pipe and exits
// with the task, ending every other process of its namespace), kills
// whatever is left in the cgroup (a container ends with its main process),
// writes exit.json and exits. Launch returns once that report arrived; the agent then updates the
// checkpoint with the pids and watches the supervisor (its child: wait;
// after a restart: a pidfd in the runtime poller).
//
// Warm supervisors (warm.go) take the supervisor's fork and exec off the
// launch's path: the containerizer keeps WarmSupervisorLimit of them
// started ("supervise wait <StateDir>", born in <root>/supervisors in
// every hierarchy),
// holding nothing of a task, each waiting on its stdin for a container's
// state directory. Launch writes launch.json, writes the directory to a
// ready one, which then logs to that directory and runs the container as
// "supervise run" would, and starts a replacement once the task reported
// running; with none ready it starts its own. One that dies idle leaves
// the pool (WarmSupervisorStats counts it) and is replaced at the next
// launch; Close ends the idle ones, as the end of their stdin does when
// the agent dies. Recover adopts containers by their state directories, so
// never a warm supervisor.
//
// The task's environment is PATH (the agent's, or a default), HOME (the
// sandbox), USER and LOGNAME, Command.Environment, Spec.Env, then SLACKLINE_SANDBOX,
// SLACKLINE_TASK_ID, SLACKLINE_FRAMEWORK_ID and SLACKLINE_CONTAINER_ID;
// nothing else of the agent's environment is passed on.
//
// # Users and confinement
//
// A task runs as Spec.User, or Config.TaskUser when that is empty
// (DefaultTaskUser; the agent passes the task's TaskInfo.user, else its
// framework's FrameworkInfo.user). DynamicTaskUser ("dynamic", the
// default) gives each task a user of its own, as systemd's DynamicUser=:
// a uid and a gid of the same number from Config.DynamicIDs, taken in
// order from a cursor shared by every agent of the host in
// Config.DynamicIDsDir (default /run/slackline/uids, under an flock), so
// that no id is handed out twice until the range (100 million by default)
// wraps, and never one a live task of the host holds: each id in use has a
// lease there (container, cgroup, agent, boot id), live while its agent
// runs or its cgroup exists, released by Destroy, adopted by Recover,
// reclaimed once dead. A second agent on the host, or an agent whose work
// dir was reset, therefore never hands out a live id. Off the launch's
// path: an agent moves the cursor (a durable write) once per 32 ids,
// reserving them, and writes leases without fsync (they hold for one
// boot; a torn one counts as none). Container.Spec.User
// names it slackline-<uid>. When such
// a container is destroyed its sandbox becomes root's, mode 0700. Any
// other user is looked up by name
// in the host's user database (os/user: uid, primary gid, supplementary
// groups) when Launch starts; an unknown user, or root (uid 0) without
// Config.AllowRootTasks, fails Launch with ErrTaskUser before anything is
// created. The coordinator decides which principal may run tasks as which
// user; refusing root here is a second line of defence behind it.
//
// Between joining its cgroups and starting the command the shim, still
// root, on the one thread that forks or execs:
//
//   - unshares a cgroup namespace (CLONE_NEWCGROUP, where the kernel has
//     it), rooted at the cgroups it just joined: the task sees its own
//     cgroup as "/" and nothing above it;
//   - with namespaces, sets up the task's mounts (see Namespaces);
//   - sets no_new_privs (PR_SET_NO_NEW_PRIVS), so setuid binaries and file
//     capabilities grant the task nothing more, and the seccomp filter
//     (supervisor/seccomp.go: the essential part of the container runtimes' default
//     profile; not for Spec.SeccompUnconfined, nor with
//     Config.Isolation.NoSeccomp);
//   - sets the user's supplementary groups, gid and uid (in the forked
//     task, the init staying root; without namespaces, on itself).
//
// # Namespaces
//
// Unless Config.Isolation.NoNamespaces, the task runs in its own PID,
// mount and IPC namespaces. The shim is their pid 1: after the mounts it
// forks the task (pid 1's child), forwards the signals it gets to it,
// reaps the namespace's orphans and exits when the task does, which kills
// the rest of the namespace. In the mount namespace (made a slave of the
// host's first, so nothing propagates out) one tmpfs backs /tmp, /var/tmp
// and /dev/shm (a directory of it each, bound there), sized by tmpfsBytes:
// half the memory limit, at most the disk resource, DefaultTmpfsBytes
// with neither; the shim is in the task's cgroups by then, and tmpfs pages
// are charged to the memory cgroup of whoever writes them. The sandbox,
// and the executable when the task's user could reach it, are bound back
// at their paths when under one of these directories; nothing else of the
// host's /tmp, /var/tmp and /dev/shm is visible. /proc is a new mount of the task's PID namespace: it shows
// the init and the task's processes only. System V objects and POSIX
// message queues belong to the IPC namespace. All of it ends with the
// task's last process: nothing of its uid remains on the host but its
// sandbox.
//
// The shim runs in its own session (setsid), so the task has no
// controlling terminal and is its own process group. A task that is not
// root cannot leave its cgroups: every cgroup.procs (and v1 tasks) file
// the containerizer creates or inherits is root's, mode 0644, in the v2
// tree and in the v1 hierarchies alike, and moving a process needs write
// access to the destination's cgroup.procs. Processes a task daemonizes or
// puts in a new session stay in its cgroups and die with it (see Kill
// sequence). The supervisor stays root: it opens stdout and stderr (created
// by Launch, 0640, owned by the task's user; links are not followed) and
// writes the state files the task cannot reach.
//
// # Images
//
// A Spec with an Image (agent/images unpacked its layers) runs in a root
// of its own, and needs namespaces. Instead of the private tmpfs over the
// host's directories, the shim (supervisor's enterImageRoot) mounts an overlay of the
// layers (top first) with the task's upper and work directories in its
// sandbox's .image (root's, 0700: the task writes its root only through
// the overlay, nodev), and inside it /proc of the task's PID namespace, a
// tmpfs /dev with null, zero, full, random, urandom and tty, a devpts
// instance of its own (ptmx), mqueue, the task's one tmpfs at /tmp,
// /dev/shm and /var/tmp (when the image has it), the sandbox at
// SandboxMount (/mnt/sandbox) and the host's /etc/hosts and
// /etc/resolv.conf read-only. Every path inside the new root is created
// and opened through an os.Root and mounted over by its /proc/self/fd
// name, so an image's symbolic links cannot make the shim write or mount
// outside it. The shim then pivot_root's into the overlay, detaches the
// host's root, enters the working directory (the image's, created if
// missing, else SandboxMount), looks the executable up in the task's PATH
// inside the root, and continues as for any task (seccomp, fork as the
// task's user, init). The supervisor stays in the host's root: stdout and
// stderr are in the sandbox as for any task.
//
// The image's Env comes first in the environment, then PATH (default if
// the image has none), HOME and SLACKLINE_SANDBOX (SandboxMount), USER,
// Command.Environment, Spec.Env and the SLACKLINE_ variables. The command
// is imageCommand's: a shell command runs the image's /bin/sh; a value is
// the executable; no value runs Entrypoint followed by the command's
// arguments, else by Cmd. The image's USER is honoured only where it names
// the task's user (imageUserHonoured); otherwise it is logged and ignored:
// an image never picks a host user.
//
// # Bounds beyond resources
//
// The task writes its output to pipes the supervisor copies to stdout and
// stderr, keeping the newest Config.OutputLimit of each on disk: a full
// half becomes stdout.1 (replacing the older one) and stdout starts anew;
// files the supervisor makes are its own (O_EXCL, no link followed), then
// given to the task's user. Its exit is recorded once the output is on
// disk. Config.PidsMax bounds the task's processes and threads with the
// pids controller: v2, or the v1 pids hierarchy of a hybrid host, which
// the task's processes join like the others (cgroups.Layout.Pids); a fork
// bomb's forks fail there, and the host's processes are untouched.
//
// Config.SubtreePidsMax bounds the guaranteed and the revocable subtree
// as a whole (default DefaultSubtreePidsMax: 3/8 of the host's bound each),
// so that tasks together cannot exhaust the host's pids.
//
// Tasks of the same named user are not isolated from one another (they
// may signal each other and read each other's sandboxes): dynamic users
// are.
//
// # Kill sequence
//
// Kill records the request in the checkpoint, sends SIGTERM to the task's
// process group (and to its main process), and waits up to
// Config.KillGracePeriod for the main process to end. Then it kills the
// whole cgroup: it writes 1 to cgroup.kill of the container's v2 cgroup
// (the v2 tree on hybrid hosts too; kernel 5.14+, atomic against forks) or,
// without cgroup.kill, freezes the cgroup (cgroup.freeze), SIGKILLs every
// process in it and thaws it. Processes that left the process group or
// daemonized are in the cgroup all the same, so none escapes. The killed
// processes' memory is freed at once (process_mrelease, Linux 5.15+), not
// when each runs to its exit: a revocable task runs at SCHED_IDLE and, on a
// node whose CPUs are taken, may not run for seconds. Kill returns once
// the cgroup has no process left and the Exit (Killed set) is queued.
//
// # Exits
//
// Exit.ExitCode and Exit.Signal are the main process's, as the supervisor
// waited for it. OOMKilled is set when the cgroup's OOM-kill counter
// (memory.events oom_kill on v2, memory.oom_control oom_kill on v1) is
// above the value recorded at launch: the kernel killed a process of the
// container for exceeding its memory limit, whichever process it chose.
// Killed is set when Kill was called. Lost is set when the container
// vanished without a status (host reboot). Message is for humans: "exited
// with code 3", "killed by signal 9 (SIGKILL)", "OOM-killed: memory limit
// 64 MiB (...)", "killed on request (...)", "container lost: ...".
//
// # Checkpoint and recovery
//
// container.json holds the spec, the layout and cgroup directories, the
// limits, the sandbox, the kernel boot id (/proc/sys/kernel/random/boot_id),
// the OOM-kill counter at launch, and, once started, the supervisor's and
// the task's pids with their start times from /proc/<pid>/stat, so a reused
// pid is never mistaken for them. It is first written before the cgroups
// are created (so every cgroup under the root has a checkpoint) and again
// once the task runs. Recover, in a new agent process with the same
// StateDir, reads every checkpoint:
//
//   - boot id differs: the host rebooted, cgroups and processes are gone:
//     Exit{Lost: true};
//   - the supervisor is alive (pid and start time match, checked after
//     opening its pidfd): re-adopted, returned by Recover, watched and
//     killable as before;
//   - the supervisor is gone and exit.json exists: the real outcome, with
//     OOM from the cgroup's counter, which survives until Destroy;
//   - the supervisor is gone without exit.json (it was killed): the rest of
//     the cgroup is killed and the Exit says the status is unknown; if the
//     cgroup is gone too, Exit{Lost: true}.
//
// Cgroups under the root's subtrees that no checkpoint accounts for are
// killed and removed. Exits found by Recover are queued and delivered on
// Exits. Since a checkpoint lives until Destroy, an Exit received but not
// acted upon before a crash is delivered again after the restart: the agent
// destroys a container once it has recorded its end.
//
// Supervisors live in <root>/supervisors, not in the agent's cgroup, so a
// container runtime that kills what is left in the agent pod's cgroup, or
// systemd stopping the agent's unit, does not end them; under systemd the
// agent's unit still says KillMode=process, for roots inside the unit's own
// delegated subtree.
//
// # Concurrency and ownership
//
// The methods of a Containerizer are safe for concurrent use. Returned
// Containers are snapshots owned by the caller. Exits is an unbuffered
// channel fed from an unbounded internal queue: watchers never block, no
// Exit is dropped, and each container's end is delivered exactly once per
// Containerizer value (see Recover for restarts). The containerizer only
// creates, writes and removes cgroups under Config.CgroupRoot.
//
// # Errors
//
// New returns errors wrapping ErrPermission when the cgroup hierarchies
// cannot be written (not root, read-only cgroupfs, subtree not delegated),
// with a message naming the path and the fix ("cannot create
// /sys/fs/cgroup/memory/slackline: permission denied; run the agent as root
// or delegate the cgroup subtree (systemd Delegate=yes)"), and errors
// wrapping ErrUnsupported for layouts it cannot use (pure v1, a missing
// controller, controllers not delegated to the root's parent). Launch wraps
// ErrInvalidSpec (no command, bad id, executable not found), ErrTaskUser
// (unknown user, root not allowed; New too, for Config.TaskUser), ErrExists, or
// the supervisor's report (e.g. "exec /x: exec format error"); a failed
// Launch leaves no cgroup and no checkpoint. Kill, Destroy and Pids wrap
// ErrNotFound for unknown ids; Destroy wraps ErrRunning before the Exit.
// Calls after Close wrap ErrClosed.
package containerizer
