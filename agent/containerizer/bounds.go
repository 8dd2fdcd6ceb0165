package containerizer

// Bounds on what one task may use beyond its resources, unless Config says
// otherwise.
const (
	// DefaultOutputLimit is how much of each of a task's output streams
	// (stdout, stderr) is kept on disk: the newest 20 MiB (Mesos's
	// logrotate container logger keeps 10 MB per stream by default).
	DefaultOutputLimit = 20 << 20
	// DefaultPidsMax bounds a task's processes and threads (pids.max).
	DefaultPidsMax = 4096
)

// DefaultSubtreePidsMax is the bound on the processes and threads of all
// tasks of one subtree together (guaranteed, revocable) when
// Config.SubtreePidsMax is 0: three eighths of what the host can have
// (the smaller of kernel.pid_max and kernel.threads-max), so that both
// subtrees together leave at least a quarter to the host, the agent and
// the supervisors, whatever the tasks do.
func DefaultSubtreePidsMax(hostBound int64) int64 {
	return max(hostBound*3/8, 1)
}
