// Package e2e holds end-to-end tests that build and start Slackline's real
// binaries (coordinator, slackline-sim, example frameworks, slacklinectl)
// on loopback and drive them through the public API.
package e2e
