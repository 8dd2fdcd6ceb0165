package bpf

// Culprits of a wait that are not cgroups, as DelayedBy reports them with
// Config.AllCulprits (values no cgroup id takes).
const (
	// CulpritKernel: kernel threads (kworkers, ksoftirqd, RCU, ...) held
	// the CPU.
	CulpritKernel uint64 = 0xfffffffffffffff1
	// CulpritIdle: the CPU was idle; the wait is the time it took to wake
	// it up and switch to the task (an IPI, leaving an idle state, and on a
	// virtual machine the host running the virtual CPU again).
	CulpritIdle uint64 = 0xfffffffffffffff2
	// CulpritUnknown: the part of a wait older than the runs each CPU
	// keeps.
	CulpritUnknown uint64 = 0xfffffffffffffff3
)

// CulpritName names the culprits that are not cgroups: "kernel", "idle",
// "unknown"; ok is false for a cgroup id.
func CulpritName(culprit uint64) (name string, ok bool) {
	switch culprit {
	case CulpritKernel:
		return "kernel", true
	case CulpritIdle:
		return "idle", true
	case CulpritUnknown:
		return "unknown", true
	}
	return "", false
}
