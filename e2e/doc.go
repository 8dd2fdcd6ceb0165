// Package e2e holds end-to-end tests that build and start Slackline's real
// binaries (coordinator, slackline-sim, example frameworks, slacklinectl)
// on loopback and drive them through the public API, and tests that wire
// the real components together in-process (TestNodeService: coordinator,
// agent and framework SDK), which no single package may import together
// (the agent never imports the coordinator).
//
// The binaries are built once by TestMain, or taken from the directory
// SLACKLINE_E2E_BIN_DIR names. TestVMCluster (make test-vm-cluster,
// docs/vm.md) runs agents on other hosts: QEMU guests of scripts/vm that
// run static binaries from the repository's share.
package e2e
