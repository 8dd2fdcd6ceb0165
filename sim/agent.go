package sim

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/slackline/slackline/agent/session"
	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/internal/ids"
)

// Agent is one simulated agent of a Fleet: the agent protocol
// (agent/session) and the task lifecycle (agent/tasks) of the real agent,
// with pretend containers. Its methods are safe for concurrent use.
type Agent struct {
	fleet    *Fleet
	index    int
	hostname string
	log      *slog.Logger
	session  *session.Session

	// mu guards the fields below. Effects are performed while it is held:
	// they are cheap here (no disk, no processes), and sending under it
	// keeps a task's updates in the order the machine made them.
	mu         sync.Mutex
	id         string
	proposedID string // the id a fresh agent proposes until it has one
	machine    *tasks.Machine
	timers     map[string]*time.Timer // container id -> the end of a task with LabelDuration
	containers map[string]*container  // pretend containers, running and the latest ended (NodeHandler)
	ended      []string               // ended containers' ids, oldest first, at most MaxEndedContainers
	registered bool                   // a session is open
	stopped    bool                   // shut down by the coordinator
	stopReason string                 // the shutdown message

	// profile is the simulated node profile (Config.Profile), under its
	// own lock.
	profile simProfile
}

func newAgent(f *Fleet, index int, hostname, id string, client slacklinev1connect.AgentServiceClient) *Agent {
	a := &Agent{
		fleet:      f,
		index:      index,
		hostname:   hostname,
		log:        f.cfg.Logger.With("agent", hostname),
		id:         id,
		machine:    f.newMachine(),
		timers:     map[string]*time.Timer{},
		containers: map[string]*container{},
	}
	a.session = session.New(session.Config{
		Client:         client,
		Handler:        (*sessionHandler)(a),
		Backoff:        backoff.Backoff{Min: f.cfg.BackoffMin, Max: f.cfg.BackoffMax},
		RPCTimeout:     f.cfg.RPCTimeout,
		HeartbeatSlots: f.heartbeatSlots,
		Logger:         a.log,
		LogLevel:       slog.LevelDebug,
		Profile:        a.profileReport,
	})
	return a
}

// Index returns the agent's index in its fleet.
func (a *Agent) Index() int { return a.index }

// Hostname returns the hostname the agent registers with.
func (a *Agent) Hostname() string { return a.hostname }

// ID returns the agent's id, or "" before its first registration.
func (a *Agent) ID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id
}

// Registered reports whether the agent has a live session.
func (a *Agent) Registered() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.registered
}

// Stopped reports whether the coordinator shut the agent down.
func (a *Agent) Stopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped
}

// run serves sessions until ctx is cancelled or the agent is shut down for
// good.
func (a *Agent) run(ctx context.Context) {
	defer a.stopTimers()
	for {
		if err := a.session.Run(ctx); !errors.Is(err, session.ErrStop) {
			return // cancelled: the simulator's handler never fails
		}
		a.mu.Lock()
		id, message := a.id, a.stopReason
		a.mu.Unlock()
		a.fleet.emit(Event{Kind: EventStopped, Time: time.Now(), AgentIndex: a.index, AgentID: id, Message: message})
		a.log.Info("shut down by the coordinator", "message", message)
		if a.fleet.cfg.RestartAfterShutdown <= 0 || !backoff.Sleep(ctx, a.fleet.cfg.RestartAfterShutdown) {
			return
		}
		a.reset()
	}
}

// reset makes a shut-down agent a fresh one: no id, no tasks.
func (a *Agent) reset() {
	a.stopTimers()
	a.mu.Lock()
	a.id, a.proposedID = "", ""
	a.machine = a.fleet.newMachine()
	a.containers, a.ended = map[string]*container{}, nil
	a.stopped, a.stopReason = false, ""
	a.mu.Unlock()
	if dir := a.fleet.cfg.WorkDir; dir != "" {
		if err := saveAgentID(dir, a.hostname, ""); err != nil {
			a.log.Error("cannot remove agent id", "error", err)
		}
	}
}

// stopTimers stops the tasks' duration timers.
func (a *Agent) stopTimers() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, t := range a.timers {
		t.Stop()
		delete(a.timers, id)
	}
}

// tick lets the machine re-send the updates that are due.
func (a *Agent) tick(now time.Time) {
	a.mu.Lock()
	if !a.registered {
		a.mu.Unlock()
		return
	}
	eff, _ := a.machine.Step(tasks.Tick{Now: now})
	events := a.performLocked(eff, now, "")
	a.mu.Unlock()
	a.fleet.emit(events...)
}

// sessionHandler is the Agent as agent/session sees it.
type sessionHandler Agent

func (h *sessionHandler) Registration() *slacklinev1.RegisterRequest {
	a := (*Agent)(h)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id == "" && a.proposedID == "" {
		// A fresh agent proposes its id, the same on every try, so that
		// a retry of a registration whose answer it never got (a
		// client-side timeout under load) registers as the agent the
		// first try made instead of a second one that retires it.
		a.proposedID = ids.New()
	}
	proposed := a.proposedID
	if a.id != "" {
		proposed = ""
	}
	return &slacklinev1.RegisterRequest{
		ProposedAgentId: proposed,
		AgentInfo: &slacklinev1.AgentInfo{
			Id:         a.id,
			Hostname:   a.hostname,
			Resources:  a.fleet.resourcesProto,
			Attributes: a.fleet.attributesProto,
			Endpoint:   a.fleet.cfg.NodeEndpoint,
		},
		Tasks: a.machine.Registration(),
	}
}

func (h *sessionHandler) Opened(ctx context.Context, agentID, sessionID string) error {
	a, f := (*Agent)(h), h.fleet
	now := time.Now()
	a.mu.Lock()
	old := a.id
	a.id, a.registered = agentID, true
	eff, _ := a.machine.Step(tasks.SessionOpened{Now: now}) // re-sends every unacknowledged update
	events := a.performLocked(eff, now, "")
	a.mu.Unlock()
	if old != agentID {
		if old != "" {
			a.log.Warn("coordinator assigned a new agent id", "old", old, "new", agentID)
		}
		if f.cfg.WorkDir != "" {
			if err := saveAgentID(f.cfg.WorkDir, a.hostname, agentID); err != nil {
				a.log.Error("cannot persist agent id", "error", err)
			}
		}
	}
	f.registered.Add(1)
	f.emit(Event{Kind: EventRegistered, Time: now, AgentIndex: a.index, AgentID: agentID})
	f.emit(events...)
	if len(f.revocableProto) > 0 {
		if err := a.session.SendEstimate(ctx, f.revocableProto); err != nil && ctx.Err() == nil {
			a.log.Warn("cannot report revocable estimate", "error", err)
		}
	}
	return nil
}

func (h *sessionHandler) Command(_ context.Context, cmd *slacklinev1.AgentCommand) error {
	a := (*Agent)(h)
	now := time.Now()
	var ev tasks.Event
	killMessage := "killed"
	switch c := cmd.GetCommand().(type) {
	case *slacklinev1.AgentCommand_RunTask:
		ev = tasks.Launch{Command: c.RunTask, Now: now}
	case *slacklinev1.AgentCommand_KillTask:
		ev = tasks.Kill{Key: tasks.Key{FrameworkID: c.KillTask.GetFrameworkId(), TaskID: c.KillTask.GetTaskId()}, StateOverride: c.KillTask.GetStateOverride(), Now: now}
	case *slacklinev1.AgentCommand_ShutdownFramework:
		ev, killMessage = tasks.ShutdownFramework{FrameworkID: c.ShutdownFramework.GetFrameworkId(), Now: now}, "framework shut down"
	case *slacklinev1.AgentCommand_Acknowledge:
		ev = tasks.Acknowledge{Key: tasks.Key{FrameworkID: c.Acknowledge.GetFrameworkId(), TaskID: c.Acknowledge.GetTaskId()}, UUID: c.Acknowledge.GetUuid(), Now: now}
	case *slacklinev1.AgentCommand_ShutdownAgent:
		killMessage = c.ShutdownAgent.GetMessage()
		if killMessage == "" {
			killMessage = "agent shut down"
		}
		ev = tasks.ShutdownAgent{Now: now}
	case *slacklinev1.AgentCommand_ApplyProfile:
		if f := a.fleet.cfg.Profile; f != nil {
			a.profile.apply(f, a.index, c.ApplyProfile)
		}
		return nil
	case *slacklinev1.AgentCommand_ProfileShadow:
		if f := a.fleet.cfg.Profile; f != nil && a.fleet.cfg.ProfileShadows {
			a.profile.shadow(f, a.index, c.ProfileShadow)
		}
		return nil
	default:
		a.log.Debug("ignoring unknown command", "command", cmd)
		return nil
	}

	a.mu.Lock()
	eff, err := a.machine.Step(ev)
	var events []Event
	if err == nil {
		switch ev := ev.(type) {
		case tasks.Launch:
			events = append(events, Event{Kind: EventTaskLaunched, Time: now, AgentIndex: a.index, AgentID: a.id,
				FrameworkID: ev.Command.GetFramework().GetId(), TaskID: ev.Command.GetTask().GetTaskId()})
		case tasks.Acknowledge:
			events = append(events, Event{Kind: EventAcknowledged, Time: now, AgentIndex: a.index, AgentID: a.id,
				FrameworkID: ev.Key.FrameworkID, TaskID: ev.Key.TaskID, UUID: ev.UUID})
		case tasks.ShutdownAgent:
			a.stopped, a.stopReason = true, killMessage
		}
	}
	events = append(events, a.performLocked(eff, now, killMessage)...)
	a.mu.Unlock()
	if err != nil {
		a.log.Debug("command changed nothing", "error", err)
	}
	a.fleet.emit(events...)
	if _, shutdown := ev.(tasks.ShutdownAgent); shutdown {
		return session.ErrStop // the session delivers the GONE updates first
	}
	return nil
}

func (h *sessionHandler) Closed(agentID, _ string, cause error) {
	a := (*Agent)(h)
	a.mu.Lock()
	a.registered = false
	a.machine.Step(tasks.SessionLost{})
	a.mu.Unlock()
	a.fleet.registered.Add(-1)
	a.fleet.emit(Event{Kind: EventDisconnected, Time: time.Now(), AgentIndex: a.index, AgentID: agentID, Message: cause.Error()})
}
