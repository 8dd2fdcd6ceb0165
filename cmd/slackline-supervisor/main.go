// Command slackline-supervisor is the per-task supervisor and exec shim the
// agent starts for every task launch (containerizer.SuperviseMain): the
// supervisor of one container ("slackline-supervisor run <state-dir>"), the
// shim it re-executes inside the task's namespaces to join its cgroups and
// exec the task ("exec"), and the helper of a command run inside a
// container ("enter"). It is not meant to be run by hand.
//
// It is a binary of its own, rather than the agent binary's "supervise"
// sub-command, because every launch executes it twice (supervisor, then
// shim): it links only the containerizer, not the agent's servers, clients
// and metrics, whose package initialisation made each start of the 26 MB
// agent binary cost several milliseconds. The agent finds it next to its own
// executable, or where --supervisor says.
package main

import (
	"os"

	"github.com/slackline/slackline/agent/containerizer"
)

func main() {
	os.Exit(containerizer.SuperviseMain(os.Args[1:]))
}
