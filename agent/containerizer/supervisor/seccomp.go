package supervisor

import (
	"fmt"
	"sync"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter every task gets (unless its framework may run tasks
// unconfined, or the agent runs with --task-isolation without seccomp) is
// the essential part of the container runtimes' default profile (Docker's,
// containerd's, Kubernetes' RuntimeDefault), as a deny list: everything is
// allowed except what lets a task reach beyond its user, its namespaces
// and its cgroups. A denied call fails with EPERM (ENOSYS for clone3, so
// that libc falls back to clone, whose flags the filter can read, as runc
// does). The filter is assembled by github.com/elastic/go-seccomp-bpf for
// the native architecture only; a second filter refuses every system call
// made through another ABI (i386 int 0x80 on x86-64; x32 is refused by the
// first), whose numbers the first would not recognise.

// deniedSyscalls fail with EPERM whatever their arguments. Names this
// architecture does not have are left out.
var deniedSyscalls = []string{
	// Keys of the kernel's keyrings are not namespaced.
	"add_key", "keyctl", "request_key",
	// eBPF programs, perf counters, userfaultfd (a heap-exploit primitive),
	// io_uring (its own path around the filter).
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Mounts, old and new API, and the root.
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	// Namespaces other than by unshare/clone of a new one.
	"setns",
	// The kernel itself: modules, kexec, reboot, swap, clocks, accounting,
	// quotas, the log, raw I/O ports, handles around path checks.
	"init_module", "finit_module", "delete_module", "create_module",
	"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime",
	"acct", "quotactl", "quotactl_fd", "syslog", "iopl", "ioperm",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "nfsservctl",
	"vm86", "vm86old", "uselib", "_sysctl", "sysfs", "ustat",
}

// newUserNS is CLONE_NEWUSER: a task may not create a user namespace,
// where it would be root and reach kernel code meant for root only.
const newUserNS = unix.CLONE_NEWUSER

// seccompProgram is the filter, assembled once per process.
var seccompProgram = sync.OnceValues(assembleSeccomp)

type seccompFilters struct {
	policy []unix.SockFilter // deny list, native ABI
	abi    []unix.SockFilter // other ABIs refused
}

func assembleSeccomp() (seccompFilters, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccompFilters{}, fmt.Errorf("seccomp: %w", err)
	}
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	userNS := seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: newUserNS}}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: names},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "unshare", Conditions: userNS},
				{Name: "clone", Conditions: userNS},
			}},
			// ENOSYS, not EPERM: glibc and Go then use clone.
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
	insns, err := policy.Assemble()
	if err != nil {
		return seccompFilters{}, fmt.Errorf("seccomp: assemble the task filter: %w", err)
	}
	abi, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	})
	if err != nil {
		return seccompFilters{}, fmt.Errorf("seccomp: assemble the ABI filter: %w", err)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return seccompFilters{}, fmt.Errorf("seccomp: %w", err)
	}
	return seccompFilters{policy: sockFilters(raw), abi: sockFilters(abi)}, nil
}

func sockFilters(raw []bpf.RawInstruction) []unix.SockFilter {
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out
}

// loadSeccomp sets no_new_privs and installs the task filter on every
// thread of the calling process (TSYNC): the shim's exec, or the fork of
// the task from the init, then happens under it, and so does everything
// the task starts.
func loadSeccomp() error {
	f, err := seccompProgram()
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	for _, prog := range [][]unix.SockFilter{f.abi, f.policy} {
		fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
		if errno != 0 {
			return fmt.Errorf("install the seccomp filter: %w", errno)
		}
	}
	return nil
}
