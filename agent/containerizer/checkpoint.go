package containerizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/atomicfile"
	"github.com/slackline/slackline/resources"
)

// Files in a container's state directory <StateDir>/<id>/.
const (
	checkpointFile = "container.json" // the containerizer's checkpoint
	launchFile     = "launch.json"    // what the supervisor runs
	statusFile     = "status.json"    // written by the supervisor once the task started
	exitFile       = "exit.json"      // written by the supervisor once the task ended
	supervisorLog  = "supervisor.log" // the supervisor's stdout and stderr
	checkpointVer  = 1
)

// procRef names a process robustly: pid plus its start time (clock ticks
// after boot, field 22 of /proc/<pid>/stat), so a reused pid is not mistaken
// for it.
type procRef struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// commandRecord is CommandInfo in the checkpoint.
type commandRecord struct {
	Value       string            `json:"value"`
	Arguments   []string          `json:"arguments,omitempty"`
	Shell       bool              `json:"shell,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
}

// checkpoint is a container's durable record, <StateDir>/<id>/container.json.
// It is written before the cgroups exist and again once the supervisor
// reported the task's pid.
type checkpoint struct {
	Version     int               `json:"version"`
	ID          string            `json:"id"`
	FrameworkID string            `json:"framework_id,omitempty"`
	TaskID      string            `json:"task_id,omitempty"`
	Revocable   bool              `json:"revocable,omitempty"`
	Resources   string            `json:"resources"`
	Command     commandRecord     `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	// User is who the task runs as (absent in checkpoints of agents that
	// ran every task as root).
	User *taskUser `json:"user,omitempty"`
	// SeccompUnconfined: the task runs without the seccomp filter.
	SeccompUnconfined bool           `json:"seccomp_unconfined,omitempty"`
	Layout            cgroups.Layout `json:"layout"`
	Cgroup            cgroups.Paths  `json:"cgroup"`
	Limits            cgroups.Limits `json:"limits"`
	Sandbox           string         `json:"sandbox"`
	BootID            string         `json:"boot_id"`
	// OOMBaseline is the cgroup's OOM-kill counter when it was created.
	OOMBaseline   uint64    `json:"oom_baseline"`
	Supervisor    *procRef  `json:"supervisor,omitempty"`
	Task          *procRef  `json:"task,omitempty"`
	StartedAt     time.Time `json:"started_at,omitzero"`
	KillRequested bool      `json:"kill_requested,omitempty"`

	// parsed is Resources parsed, kept by spec: Containers, which the
	// agent's loops call several times a second, snapshots every container.
	parsed *resources.Resources
}

func (cp *checkpoint) spec() Spec {
	if cp.parsed == nil {
		res, _ := resources.Parse(cp.Resources)
		cp.parsed = &res
	}
	res := *cp.parsed
	return Spec{
		ContainerID: cp.ID, FrameworkID: cp.FrameworkID, TaskID: cp.TaskID, Revocable: cp.Revocable,
		Resources: res, Env: cp.Env, User: cp.User.name(), SeccompUnconfined: cp.SeccompUnconfined,
		Command: &slacklinev1.CommandInfo{
			Value: cp.Command.Value, Arguments: cp.Command.Arguments, Shell: cp.Command.Shell,
			Environment: cp.Command.Environment,
		},
	}
}

// statusRecord is what the supervisor reports once the task has exec'd:
// on its status pipe to Launch, and in status.json for a recovering agent
// that died before checkpointing the pids.
type statusRecord struct {
	Supervisor *procRef  `json:"supervisor,omitempty"`
	Task       *procRef  `json:"task,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	Error      string    `json:"error,omitempty"`
	// SupervisorAt is when the supervisor began, ShimAt when its shim
	// reported the task forked or exec'd: the launch's stages (Launch logs
	// them).
	SupervisorAt time.Time `json:"supervisor_at,omitzero"`
	ShimAt       time.Time `json:"shim_at,omitzero"`
}

// exitRecord is the task's end as the supervisor saw it, exit.json.
type exitRecord struct {
	ExitCode   int       `json:"exit_code"`
	Signal     int       `json:"signal,omitempty"`
	FinishedAt time.Time `json:"finished_at"`
	// Leftover is how many processes were still in the cgroup after the main
	// process ended (they were killed).
	Leftover int    `json:"leftover,omitempty"`
	Error    string `json:"error,omitempty"`
}

// launchSpec is what the supervisor and its exec shim run, launch.json.
type launchSpec struct {
	Path   string        `json:"path"`
	Argv   []string      `json:"argv"`
	Env    []string      `json:"env"`
	Dir    string        `json:"dir"`
	Stdout string        `json:"stdout"`
	Stderr string        `json:"stderr"`
	Cgroup cgroups.Paths `json:"cgroup"`
	// User is who the shim becomes before it execs the task. Required: a
	// launch.json without it is refused, never run as root.
	User *taskUser `json:"user"`
	// SupervisorArgv is the argv prefix that reaches SuperviseMain; the shim
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
	Root *rootSpec `json:"root,omitempty"`
}

// writeJSON writes v to path atomically and durably: a temporary file in the
// same directory, fsync, rename, fsync of the directory.
// writeVolatileJSON writes v to path atomically but without fsync
// (atomicfile.ReplaceFile): for launch.json and status.json, which matter
// only while the host runs (its crash ends the container), and whose
// fsyncs were on every launch's path.
func writeVolatileJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.ReplaceFile(path, append(data, '\n'), 0o600)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o600)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

// readBootID returns the kernel's boot id: it changes at every boot, so a
// checkpoint with another one describes containers that died with the host.
func readBootID(procRoot string) (string, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// procStartTime returns the start time of pid (clock ticks after boot).
func procStartTime(procRoot string, pid int) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatStartTime(data)
}

// parseStatStartTime extracts field 22 (starttime) of /proc/<pid>/stat. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted after its last ')'.
func parseStatStartTime(data []byte) (uint64, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("malformed stat: no ')'")
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); starttime is field 22.
	const idx = 22 - 3
	if len(fields) <= idx {
		return 0, fmt.Errorf("malformed stat: %d fields after the command", len(fields))
	}
	return strconv.ParseUint(fields[idx], 10, 64)
}

// procPPid returns the parent of pid (field 4 of /proc/<pid>/stat), or 0.
func procPPid(procRoot string, pid int) int {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// alive reports whether ref still names a live (or zombie) process: the pid
// exists and has the recorded start time.
func alive(procRoot string, ref *procRef) bool {
	if ref == nil || ref.Pid <= 0 {
		return false
	}
	st, err := procStartTime(procRoot, ref.Pid)
	return err == nil && st == ref.StartTime
}
