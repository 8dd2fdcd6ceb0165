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
