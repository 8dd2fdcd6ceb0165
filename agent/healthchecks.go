package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/agent/health"
	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/taskspec"
)

// taskAccess is what health probes need of the containerizer: a
// connection to a task's own port, a command run inside its container.
// *containerizer.Containerizer implements it; a containerizer that does not
// (test fakes) gets checks that dial the host's loopback and cannot run
// commands.
type taskAccess interface {
	DialTask(ctx context.Context, containerID string, port uint16) (net.Conn, error)
	Exec(ctx context.Context, containerID string, cmd *slacklinev1.CommandInfo) (int, string, error)
}

type containerizerAccess struct{ taskAccess }

// ExecTask runs cmd through Exec; a container frozen by the QoS freezer
// (containerizer.ErrFrozen) is a paused task to the health checks
// (health.ErrPaused): the check is skipped, not failed.
func (c containerizerAccess) ExecTask(ctx context.Context, id string, cmd *slacklinev1.CommandInfo) (int, string, error) {
	code, out, err := c.Exec(ctx, id, cmd)
	if errors.Is(err, containerizer.ErrFrozen) {
		err = fmt.Errorf("%w: %w", health.ErrPaused, err)
	}
	return code, out, err
}

// hostLoopback reaches tasks that share the host's network namespace.
type hostLoopback struct{}

func (hostLoopback) DialTask(ctx context.Context, _ string, port uint16) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
}

func (hostLoopback) ExecTask(context.Context, string, *slacklinev1.CommandInfo) (int, string, error) {
	return 0, "", errors.New("this containerizer cannot run commands in containers")
}

// newHealthRunner wires the health-check runner to the containerizer and
// the task machine.
func newHealthRunner(a *Agent) *health.Runner {
	var dial health.Dialer = hostLoopback{}
	var exec health.Execer = hostLoopback{}
	if access, ok := a.cfg.Containerizer.(taskAccess); ok {
		dial, exec = access, containerizerAccess{access}
	}
	probes := health.NewProbes(dial, exec)
	if f, ok := a.cfg.Containerizer.(interface{ Frozen(id string) bool }); ok {
		probes.SetPaused(f.Frozen)
	}
	return health.NewRunner(health.RunnerConfig{
		Prober: probes, Decide: a.healthDecided, Logger: a.log,
	})
}

// healthDecided turns a health decision into task events: a change of
// health is a RUNNING update with healthy set; a task that failed too often
// is killed and ends TASK_STATE_FAILED with
// REASON_TASK_HEALTH_CHECK_STATUS_FAILED.
func (a *Agent) healthDecided(containerID string, d health.Decision) {
	var key tasks.Key
	var ok bool
	a.tasks.read(func(m *tasks.Machine) { key, ok = m.Container(containerID) })
	if !ok {
		a.health.Forget(containerID) // its task is gone
		return
	}
	now := time.Now()
	if d.Report {
		a.tasks.step(tasks.HealthChanged{ContainerID: containerID, Healthy: d.Healthy, Message: d.Message, Now: now})
	}
	if d.Kill {
		a.tasks.step(tasks.Kill{Key: key, StateOverride: slacklinev1.TaskState_TASK_STATE_FAILED,
			Reason: slacklinev1.Reason_REASON_TASK_HEALTH_CHECK_STATUS_FAILED, Message: d.Message, Now: now})
	}
}

// watchHealth starts checking a running task that has a health check.
func (a *Agent) watchHealth(containerID string, task *slacklinev1.TaskInfo, started time.Time) {
	hc := task.GetHealthCheck()
	if hc == nil {
		return
	}
	policy, err := taskspec.HealthCheck(hc)
	if err != nil { // refused at launch already; never checked
		a.log.Warn("invalid health check", "task", task.GetTaskId(), "err", err)
		return
	}
	a.health.Watch(containerID, policy, started)
}
