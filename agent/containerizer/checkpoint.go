package containerizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/agent/containerizer/supervisor"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Files in a container's state directory <StateDir>/<id>/.
const (
	checkpointFile = "container.json" // the containerizer's checkpoint
	launchFile     = supervisor.LaunchFile
	statusFile     = supervisor.StatusFile
	exitFile       = supervisor.ExitFile
	supervisorLog  = supervisor.LogFile // the supervisor's stdout and stderr
	checkpointVer  = 1
)

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
		Resources: res, Env: cp.Env, User: cp.User.Login(), SeccompUnconfined: cp.SeccompUnconfined,
		Command: &slacklinev1.CommandInfo{
			Value: cp.Command.Value, Arguments: cp.Command.Arguments, Shell: cp.Command.Shell,
			Environment: cp.Command.Environment,
		},
	}
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
