// Command slackline-supervisor is the per-task supervisor and exec shim the
// agent starts for every task launch (agent/containerizer/supervisor): the
// supervisor of one container ("slackline-supervisor run <state-dir>", or
// "wait <state-root>" when started ahead of its container), the shim it
// re-executes inside the task's namespaces to join its cgroups and exec
// the task ("exec"), and the helper of a command run inside a container
// ("enter"). It is not meant to be run by hand.
//
// It is a binary of its own, rather than the agent binary's "supervise"
// sub-command, because launches execute it on their critical path (the
// shim, and the supervisor when no warm one is ready). It links only
// package supervisor: the standard library, x/sys/unix and the seccomp
// assembler, no protobuf, containerd cgroups, eBPF or logging packages, so
// that each start costs about what a hello world's does (the agent
// binary's "supervise", or a binary linking the whole containerizer, cost
// several milliseconds more per start in package initialisation and page
// faults). The agent finds it next to its own executable, or where
// --supervisor says.
package main

import (
	"os"

	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

func main() {
	os.Exit(supervisor.Main(os.Args[1:]))
}
