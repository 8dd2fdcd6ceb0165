// Package agent is the Slackline node agent: the equivalent of a Mesos
// agent. It registers its resources with the coordinator, runs the tasks the
// coordinator sends in cgroups (through agent/containerizer), reports their
// status updates reliably, and serves the node-local NodeService.
//
// # Lifecycle
//
// New detects the host's resources, opens the checkpoint under
// Config.WorkDir and the containerizer (which needs root or a delegated
// cgroup tree and says so). Run recovers, then drives the subsystems under
// one errgroup until its context ends: the session with the coordinator
// (register, command stream, heartbeats, re-registration with backoff), the
// status update manager, the container exit loop and the NodeService
// server. Cancelling the context stops the agent; its tasks keep running
// and are re-adopted by the next agent process on the same work dir.
//
// # Reliability
//
// Everything the agent must not forget is checkpointed in a bbolt file
// (WorkDir/checkpoint.db) before it acts on it: its id and boot id, each
// task (with its container id) before the container starts, and each
// status update before it is sent. Updates are re-sent, one task at a time
// in order, until the framework's acknowledgement comes back through the
// coordinator. After a restart the containerizer re-adopts running
// containers and reports those that ended meanwhile with their real
// outcome; after a host reboot (another boot id) the agent's tasks are
// reported TASK_STATE_LOST and it registers as a new agent.
//
// # Errors
//
// New fails with a message that says what is missing (root, cgroup write
// access, a work dir) and how to fix it. Run returns nil when its context is
// cancelled and an error only for failures it cannot ride out (a broken
// checkpoint, a NodeService port in use).
package agent
