package supervisor

import (
	"golang.org/x/sys/unix"
)

// newCoreCookie gives the calling process (every thread, and what it forks
// later) a core-scheduling cookie of its own.
func newCoreCookie() error {
	return unix.Prctl(unix.PR_SCHED_CORE, unix.PR_SCHED_CORE_CREATE, 0, unix.PR_SCHED_CORE_SCOPE_THREAD_GROUP, 0)
}
