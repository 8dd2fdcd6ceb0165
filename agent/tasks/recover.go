package tasks

import (
	"slices"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/taskstate"
)

// Recovery is what an agent found after a restart: its checkpoint and the
// containers that survived.
type Recovery struct {
	// Tasks are the checkpointed task records.
	Tasks []*slacklinev1.AgentTaskRecord
	// Updates are the checkpointed unacknowledged updates by checkpoint key.
	Updates map[string]*slacklinev1.AgentStatusRecord
	// Running holds the ids of the containers that still run.
	Running map[string]bool
	// Known holds the ids of every container the containerizer knows,
	// running or ended (the exits of ended ones come as Exited events).
	Known map[string]bool
	// Rebooted is set when the host rebooted since the checkpoint was
	// written: every live task is lost.
	Rebooted bool
	Now      time.Time
}

// Recover rebuilds a machine from a checkpoint. The effects settle what
// the restart decided: live tasks of a rebooted host and tasks whose launch
// never reached the containerizer end TASK_STATE_LOST, re-adopted STAGING
// tasks become RUNNING, interrupted kills are repeated, and ended tasks with
// nothing left to acknowledge are forgotten.
func Recover(cfg Config, r Recovery) (*Machine, Effects) {
	m := New(cfg)
	var eff Effects
	for _, rec := range r.Tasks {
		at := rec.GetTask()
		t := &task{
			key:  Key{at.GetFrameworkId(), at.GetTask().GetTaskId()},
			info: at.GetTask(), framework: at.GetFramework(), state: at.GetState(),
			containerID: rec.GetContainerId(), killState: rec.GetKillState(),
			killReason: rec.GetKillReason(), killMessage: rec.GetKillMessage(), retry: m.cfg.RetryMin,
		}
		t.killing = t.killState != slacklinev1.TaskState_TASK_STATE_UNSPECIFIED || t.killReason != slacklinev1.Reason_REASON_UNSPECIFIED
		m.tasks[t.key] = t
		if t.containerID != "" {
			m.byContainer[t.containerID] = t.key
		}
	}
	keys := make([]string, 0, len(r.Updates))
	for k := range r.Updates {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		rec := r.Updates[k]
		u := Update{CheckpointKey: k, FrameworkID: rec.GetFrameworkId(), Status: rec.GetStatus()}
		t := m.tasks[u.Key()]
		if t == nil {
			// An update whose task record is gone: keep delivering it.
			t = &task{key: u.Key(), info: &slacklinev1.TaskInfo{TaskId: u.Key().TaskID}, state: u.Status.GetState(), retry: m.cfg.RetryMin}
			m.tasks[t.key] = t
		}
		t.updates = append(t.updates, u)
		m.seq = max(m.seq, updateSeq(k))
	}
	for _, t := range m.sorted() {
		switch {
		case taskstate.IsTerminal(t.state):
			if len(t.updates) == 0 {
				m.forget(t, &eff)
			}
		case r.Rebooted:
			// Settled before the first registration under the new id, so
			// that it never lists them as running.
			m.report(t, slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_RESTARTED, "the host rebooted", r.Now, &eff)
		case r.Running[t.containerID]:
			if t.state == slacklinev1.TaskState_TASK_STATE_STAGING {
				// The agent died after the launch, before RUNNING was checkpointed.
				m.report(t, slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.Reason_REASON_UNSPECIFIED,
					"running (re-adopted after an agent restart)", r.Now, &eff)
			}
			if t.killing {
				eff.Kill = append(eff.Kill, t.containerID)
			}
		case !r.Known[t.containerID]:
			// The agent died before the containerizer recorded the launch.
			m.report(t, slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_RESTARTED,
				"the agent restarted before the task was launched", r.Now, &eff)
		}
		// Otherwise the container ended meanwhile: its exit comes as Exited.
	}
	return m, eff
}
