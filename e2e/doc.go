// Package e2e holds end-to-end tests that build and start Slackline's real
// binaries (coordinator, slackline-sim, example frameworks, slacklinectl)
// on loopback and drive them through the public API, and tests that wire
// the real components together in-process (TestNodeService: coordinator,
// agent and framework SDK), which no single package may import together
// (the agent never imports the coordinator).
package e2e
