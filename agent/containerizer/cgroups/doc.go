// Package cgroups is the containerizer's view of the host's cgroup
// hierarchies: which layout the host has (pure cgroup v2, or "hybrid": the
// cpu and memory controllers on cgroup v1 with the v2 tree mounted beside
// them at <mountpoint>/unified), where a Slackline cgroup lives in each
// hierarchy, which values its control files get, and the few operations the
// containerizer needs on a live cgroup (kill everything in it, list its
// processes, read its OOM-kill counter, remove it).
//
// # Layouts
//
// Pure v2 (production default), mountpoint /sys/fs/cgroup is cgroup2:
//
//	/sys/fs/cgroup/<root>/                 cgroup.subtree_control "+cpu +memory"
//	/sys/fs/cgroup/<root>/guaranteed/      cgroup.subtree_control "+cpu +memory"
//	/sys/fs/cgroup/<root>/guaranteed/<id>/ cpu.weight, [cpu.max], memory.max, [memory.swap.max 0]
//	/sys/fs/cgroup/<root>-revocable/       cpu.weight 1, cpu.idle 1, "+cpu +memory"
//	/sys/fs/cgroup/<root>-revocable/<id>/  the same as a guaranteed container's
//
// The revocable subtree is the root's sibling (Subtree, RevocableSuffix):
// cpu.idle ranks a cgroup among its siblings only.
//
// Hybrid (this project's development and CI machines): the same relative path
// (<root>/guaranteed/<id>, <root>-revocable/<id>) exists in three
// hierarchies:
//
//	/sys/fs/cgroup/cpu/<path>/      cpu.shares, [cpu.cfs_period_us, cpu.cfs_quota_us]
//	/sys/fs/cgroup/memory/<path>/   memory.limit_in_bytes, [memory.memsw.limit_in_bytes]
//	/sys/fs/cgroup/unified/<path>/  no controllers: cgroup.procs, cgroup.kill, PSI, cpu.stat
//
// and the revocable subtree gets cpu.shares 2 (and cpu.idle 1 where the
// kernel has it) on the v1 cpu hierarchy.
//
// CPU sets (cpuset.go): where the host has the controller, SetupCPUSet
// prepares the revocable subtree for it (on hybrid hosts in the v1 cpuset
// hierarchy, /sys/fs/cgroup/cpuset, with the parent's cpuset.cpus and
// cpuset.mems; revocable containers join the subtree's directory there,
// Paths.CPUSet); SetCPUs and CPUs write and read a subtree's CPUs. Service cgroups (service.go): <root>/agent and
// <root>/supervisors, each with a CPU weight and an optional cap. The v2 ("unified") directory of a
// container is the one used for membership, kill and freeze in both layouts;
// Paths.Unified names it.
//
// # Decisions
//
// The values are pure functions of a container's resources, tested against
// tables: CPUWeight (v2: clamp(cpus*100, 1, 10000)), CPUShares (v1:
// max(2, cpus*1024)), CFSQuota (quota = cpus * 100 ms period, at least 1 ms,
// only with a hard CPU limit) and the memory limit in bytes (mem MiB * 2^20,
// 0 = unlimited). Swap is not granted: the memory+swap limit equals the
// memory limit where the kernel accounts swap, so "mem" is what a task gets.
// Writes of resource values go through github.com/containerd/cgroups/v3
// (cgroup1 controllers, cgroup2 Manager.Update); the live operations (Kill with
// the freeze fallback, Procs, Delete) use its cgroup2 Manager on the v2 tree.
//
// # Ownership
//
// Only directories under the configured root are ever created, written or
// removed. On pure v2 the parent of the root must already delegate the cpu
// and memory controllers (list them in its cgroup.subtree_control, as
// systemd does for the root cgroup and for Delegate=yes units); the package
// says so instead of changing a cgroup it does not own.
//
// # Errors
//
// Every failure caused by missing privileges (EACCES, EPERM, EROFS) wraps
// ErrPermission, with a message naming the path and the fix. A host layout
// that cannot be used (pure v1, missing controllers, no cgroup filesystem)
// wraps ErrUnsupported. Everything else is returned wrapped with context.
package cgroups
