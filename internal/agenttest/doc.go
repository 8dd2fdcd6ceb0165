// Package agenttest holds what tests of the agent protocol share: the
// protocol suite that the real agent and the simulator must both pass (Run),
// a real coordinator that can be restarted on the same registry
// (StartCoordinator), and an in-memory network for testing/synctest bubbles
// (Network).
package agenttest
