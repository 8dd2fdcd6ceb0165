package deploy

import (
	"fmt"
	"strings"
)

// Privilege is one thing the agent needs from its node beyond an ordinary
// container: a Linux capability, a host path, or a pod-level host
// namespace. Exactly one of Capability, HostPath and Pod is set.
type Privilege struct {
	// Capability is a Linux capability as Kubernetes spells it, without
	// the "CAP_" prefix ("BPF").
	Capability string
	// HostPath is a host directory mounted at the same path in the agent's
	// container.
	HostPath string
	// Writable: HostPath is mounted read-write.
	Writable bool
	// Pod is a pod-level setting: "hostPID" or "hostNetwork".
	Pod string
	// Features are the eBPF feature probes (bpf.Features names) that
	// report missing (no permission, or a failed load or attach) without it.
	Features []string
	// Why says what the agent does with it.
	Why string
}

// Name returns how the privilege is written in the DaemonSet.
func (p Privilege) Name() string {
	switch {
	case p.Capability != "":
		return "CAP_" + p.Capability
	case p.HostPath != "":
		if p.Writable {
			return p.HostPath + " (rw)"
		}
		return p.HostPath + " (ro)"
	}
	return p.Pod
}

// AgentPrivileges is everything the agent's DaemonSet grants, and why: the
// one list that deploy/kubernetes/agent.yaml is checked against (no more,
// no less) and that docs/operators.md shows. A new bpf feature probe fails
// the tests until some privilege names it.
var AgentPrivileges = []Privilege{
	{Capability: "BPF", Features: []string{"bpf_syscall", "tp_btf", "task_storage", "ringbuf", "cgroup_skb"},
		Why: "create eBPF maps and load programs (Linux 5.8+; older kernels need SYS_ADMIN for this)"},
	{Capability: "PERFMON", Features: []string{"tp_btf", "sched_info", "vmscan_tracepoints", "mark_victim_tracepoint"},
		Why: "load and attach the tracing programs (sched_switch/wakeup, vmscan, mark_victim), which read kernel memory"},
	{Capability: "SYS_RESOURCE", Features: []string{"bpf_syscall"},
		Why: "raise RLIMIT_MEMLOCK for eBPF maps on kernels before 5.11 (later kernels charge the memory cgroup instead)"},
	{Capability: "NET_ADMIN", Features: []string{"cgroup_skb"},
		Why: "load cgroup_skb programs (per-container network bytes) and attach them to cgroups; tc qdiscs for network QoS"},
	{Capability: "SYS_ADMIN", Features: []string{"bpf_stats"},
		Why: "the exec shim unshares a cgroup namespace for each task; nsenter joins the host's cgroup namespace; BPF_ENABLE_STATS measures the programs' own cost"},
	{Capability: "SYS_PTRACE",
		Why: "open /proc/1/ns/cgroup (the host init's namespace) to join it: reading another root process's namespaces is a ptrace-read check"},
	{Capability: "SETUID", Why: "the exec shim switches to the task's user (setuid)"},
	{Capability: "SETGID", Why: "the exec shim sets the task user's groups and gid (setgroups, setgid)"},
	{Capability: "CHOWN", Why: "give the sandbox and its stdout/stderr to the task's user"},
	{Capability: "FOWNER", Why: "set the mode of the sandbox and output files after they belong to the task's user"},
	{Capability: "DAC_OVERRIDE", Why: "the supervisor (root) appends to output files in a sandbox that belongs to the task's user; ReadSandboxFile reads them"},
	{Capability: "KILL", Why: "send SIGTERM to tasks running as other users before the cgroup-wide kill"},

	{HostPath: "/sys/fs/cgroup", Writable: true,
		Why: "create <cgroup-root>/{guaranteed,revocable}/<id> in the host's hierarchies, write limits, move tasks in, cgroup.kill, PSI and cpu.stat"},
	{HostPath: "/sys/kernel/btf", Features: []string{"btf", "tp_btf", "sched_info", "vmscan_tracepoints", "mark_victim_tracepoint"},
		Why: "kernel BTF for CO-RE relocations and tp_btf programs (read only)"},
	{HostPath: "/var/lib/slackline/agent", Writable: true,
		Why: "the work dir: checkpoint, container state and sandboxes outlive the agent's pod"},
	{HostPath: "/run/slackline", Writable: true,
		Why: "the host-wide dynamic uid leases: shared by every agent of the node and kept across agent pods, so that no live task's uid is handed out twice"},
	{HostPath: "/etc/slackline/credentials",
		Why: "this node's agent certificate and key and the cluster CA, provisioned per node (read only)"},

	{Pod: "hostPID",
		Why: "checkpointed pids stay valid across agent pods; supervisors and tasks are not in a pod PID namespace that dies with the agent; /proc/1 is the host's init"},
	{Pod: "hostNetwork",
		Why: "tasks bind the node's ports (the ports resource) and are reached at the node's address, which the agent advertises; network QoS shapes the node's interfaces"},
}

// NotGranted lists what the agent's DaemonSet deliberately does not have,
// with the reason, for the documentation.
var NotGranted = []struct{ What, Why string }{
	{"privileged: true", "every device, every capability and no seccomp filter: the agent needs none of that beyond the list above"},
	{"/sys/fs/bpf", "the agent pins no program or map: they live as long as the agent's file descriptors and are loaded again at start"},
	{"hostIPC, /dev, SYS_MODULE, NET_RAW, MKNOD", "nothing in the agent or the containerizer uses them"},
	{"a Kubernetes API token", "the agent talks only to the coordinator"},
}

// PrivilegeTable renders AgentPrivileges and NotGranted as the Markdown
// tables docs/operators.md shows (a test keeps the two equal).
func PrivilegeTable() string {
	var b strings.Builder
	b.WriteString("| privilege | why | eBPF probes that need it |\n|---|---|---|\n")
	for _, p := range AgentPrivileges {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p.Name(), p.Why, strings.Join(p.Features, ", "))
	}
	b.WriteString("\nNot granted:\n\n| what | why not |\n|---|---|\n")
	for _, n := range NotGranted {
		fmt.Fprintf(&b, "| %s | %s |\n", n.What, n.Why)
	}
	return b.String()
}
