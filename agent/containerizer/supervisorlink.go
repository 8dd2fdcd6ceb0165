package containerizer

import (
	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

// The records the containerizer shares with its supervisor (launch.json,
// status.json, exit.json, the task's user) are package supervisor's: the
// supervisor binary links that small package, not this one.
type (
	procRef      = supervisor.ProcRef
	statusRecord = supervisor.Status
	exitRecord   = supervisor.ExitRecord
	launchSpec   = supervisor.LaunchSpec
	rootSpec     = supervisor.RootSpec
	taskUser     = supervisor.User
	enterRequest = supervisor.EnterRequest
)

// SandboxMount is where a task with an image finds its sandbox inside its
// root (its HOME, SLACKLINE_SANDBOX, and its working directory unless the
// image names one).
const SandboxMount = supervisor.SandboxMount

// SuperviseMain is the entry point of the supervisor, its exec shim and
// Exec's helper (supervisor.Main): the agent binary calls it for
// "supervise" with the arguments that follow, and exits with its result.
// The supervisor binary (cmd/slackline-supervisor) calls supervisor.Main
// directly, without linking this package.
func SuperviseMain(args []string) int { return supervisor.Main(args) }

// supervisorCgroup is p as the supervisor sees it (launch.json).
func supervisorCgroup(p cgroups.Paths) supervisor.Cgroup {
	return supervisor.Cgroup{
		Rel: p.Rel, UnifiedMount: p.UnifiedMount, Unified: p.Unified, CPU: p.CPU, Memory: p.Memory,
		CPUSet: p.CPUSet, Pids: p.Pids, Blkio: p.Blkio,
	}
}

func writeJSON(path string, v any) error         { return supervisor.WriteJSON(path, v) }
func writeVolatileJSON(path string, v any) error { return supervisor.WriteVolatileJSON(path, v) }
func readJSON(path string, v any) error          { return supervisor.ReadJSON(path, v) }

func procStartTime(procRoot string, pid int) (uint64, error) {
	return supervisor.ProcStartTime(procRoot, pid)
}

func alive(procRoot string, ref *procRef) bool { return supervisor.Alive(procRoot, ref) }
