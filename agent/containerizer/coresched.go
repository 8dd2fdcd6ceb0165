package containerizer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// coreScheduling says whether revocable tasks get a core-scheduling cookie
// of their own (PR_SCHED_CORE), and why or why not. With a cookie, the
// kernel never runs a revocable task on one hardware thread of a core while
// a task without that cookie (guaranteed work) runs on its sibling, so SMT
// siblings stop being a way for best-effort work to slow guaranteed work
// down. It is only worth it where cores have several hardware threads, and
// the kernel must be built with CONFIG_SCHED_CORE.
func coreScheduling(sysRoot string) (bool, string) {
	smt := false
	matches, _ := filepath.Glob(filepath.Join(sysRoot, "devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list"))
	for _, file := range matches {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		if cpus, err := cgroups.ParseCPUList(strings.TrimSpace(string(data))); err == nil && len(cpus) > 1 {
			smt = true
			break
		}
	}
	if !smt {
		return false, "no SMT siblings: every core runs one hardware thread"
	}
	var cookie uint64
	err := unix.Prctl(unix.PR_SCHED_CORE, unix.PR_SCHED_CORE_GET, 0, unix.PR_SCHED_CORE_SCOPE_THREAD, uintptr(unsafe.Pointer(&cookie)))
	switch {
	case err == nil:
		return true, "SMT siblings and PR_SCHED_CORE: each revocable task gets a cookie of its own"
	case errors.Is(err, unix.EINVAL):
		return false, "the kernel has no core scheduling (CONFIG_SCHED_CORE)"
	}
	return false, "PR_SCHED_CORE_GET: " + err.Error()
}
