// Package agenttest holds what tests of the agent protocol share.
//
// Run is the protocol suite: the behaviour every implementation of the agent
// side of AgentService must show, observed from the coordinator's side only.
// It plays a scripted coordinator (it records registrations, heartbeats and
// status updates, pushes commands, and loses sessions on demand) and checks:
// registration and heartbeats; launch reports RUNNING; kill reports KILLED,
// and a task whose last update is acknowledged is forgotten; a kill of an
// unknown task reports DROPPED; a task's updates go one at a time, each
// released by the acknowledgement of the previous one (an acknowledgement of
// another uuid changes nothing); unacknowledged updates are sent again after
// a coordinator restart and after an expired session, with the same agent id;
// shutdown_framework kills that framework's tasks only. Two small callers
// run it: e2e.TestAgentProtocol (the real agent with real cgroups,
// privileged) and sim.TestProtocol (the simulator). The suite runs in real
// time, over loopback TCP, because the real agent cannot run in a
// testing/synctest bubble.
//
// StartCoordinator runs a real coordinator that can be restarted on the
// same registry and address, and Network is an in-memory network whose
// blocked connections let synctest.Wait return; agent/session's tests use
// both. FakeCoordinator is an AgentService whose answers a test controls,
// for the corner cases of the protocol that agent/session's and sim's tests
// must produce on cue; Protocols lists the wire protocols those tests run
// over.
package agenttest
