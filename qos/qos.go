package qos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Container is what a controller knows about one container on the node: a
// Slackline task's container, or a service outside Slackline named with
// --protect-cgroup (Protected). The agent fills it from the monitor (cgroupfs,
// PSI, procfs) and from the eBPF maps; fields the node cannot measure stay
// zero, and the controllers treat zero as "no signal", never as "bad".
type Container struct {
	// ID is the container id; corrections name containers by it.
	ID string
	// TaskID is the task running in the container ("" for protected services).
	TaskID string
	// Revocable is true for a container running on revocable resources. Only
	// revocable containers are ever throttled or killed.
	Revocable bool
	// Protected marks a service outside Slackline (--protect-cgroup). It is
	// watched like guaranteed work and never corrected, even if Revocable is
	// also set.
	Protected bool
	// CPUAllocated is the CPU (cores) allocated to the container.
	CPUAllocated float64
	// CPU is the CPU (cores) the container used recently.
	CPU float64
	// MemBytes is the container's current memory use (RSS plus unreclaimable
	// cache, as the memory controller charges it).
	MemBytes uint64
	// StartedAt is when the container started; newer containers are chosen
	// first among equally guilty victims.
	StartedAt time.Time
	// SampledAt is when the statistics below were sampled; zero means
	// Input.Now. A sample taken before the controller's last change to the CPU
	// limit cannot show that change's effect and does not justify another one.
	SampledAt time.Time
	// RunqP99 and RunqP50 are run-queue (wakeup-to-run) latency percentiles of
	// the container's threads over the last sampling interval (eBPF).
	RunqP99, RunqP50 time.Duration
	// CPUPressureSome10 is the cgroup's cpu.pressure "some" avg10, in percent.
	CPUPressureSome10 float64
	// MemPressureSome10 and MemPressureFull10 are the cgroup's memory.pressure
	// "some" and "full" avg10, in percent.
	MemPressureSome10, MemPressureFull10 float64
	// IOPressureSome10 and IOPressureFull10 are the cgroup's io.pressure
	// "some" and "full" avg10, in percent.
	IOPressureSome10, IOPressureFull10 float64
	// Syncs counts the container's synchronous writes (fsync, fdatasync,
	// O_SYNC writes) over the last sampling interval and SyncP99 is their
	// p99 latency (eBPF; 0: not measured or none).
	Syncs   uint64
	SyncP99 time.Duration
	// BlockIOs counts the block requests the container's tasks submitted
	// that completed over the last sampling interval and BlockP99 is their
	// p99 latency from start to completion, queueing included (eBPF;
	// 0: not measured or none).
	BlockIOs uint64
	BlockP99 time.Duration
	// DelayedBy attributes the run-queue delay this container suffered in the
	// last interval to the revocable containers that held the CPU meanwhile
	// (eBPF who-delayed-whom): culprit container id -> total delay. Nil
	// means not measured (no eBPF).
	DelayedBy map[string]time.Duration
	// RunqWait is the sum of the container's run-queue waits over the same
	// interval (eBPF); 0 means not measured. Revocable work's share of it
	// decides whether a violation is its doing (MinAttributedShare).
	RunqWait time.Duration
	// DelayedByOthers attributes the rest of that delay to what else held
	// the CPU: guaranteed containers by id, and "agent", "supervisors",
	// "host", "kernel", "idle" (waking the CPU up), "unknown".
	DelayedByOthers map[string]time.Duration
	// BandwidthAllocated is the container's bandwidth (Mbit/s): a
	// guaranteed container's reserved floor, a revocable one's pace.
	BandwidthAllocated float64
	// NetTx is the container's egress over the last sampling interval
	// (Mbit/s, eBPF), NetTxPackets the packets it sent meanwhile.
	NetTx        float64
	NetTxPackets uint64
	// TCPRTTP50 and TCPRTTP99 are percentiles of the round-trip times of
	// the container's TCP connections over the last sampling interval
	// (eBPF sock_ops), zero without samples. TCPRetransmits counts the
	// segments it retransmitted meanwhile.
	TCPRTTP50, TCPRTTP99 time.Duration
	TCPRetransmits       uint64
}

// guarded reports whether the container is work the controllers protect.
func (c *Container) guarded() bool { return !c.Revocable || c.Protected }

// correctable reports whether the container may be throttled or killed.
func (c *Container) correctable() bool { return c.Revocable && !c.Protected }

// sampledAt returns when the container's statistics were sampled.
func (c *Container) sampledAt(now time.Time) time.Time {
	if c.SampledAt.IsZero() {
		return now
	}
	return c.SampledAt
}

// Node is node-wide state from procfs and the root cgroup's PSI files.
type Node struct {
	// CPUs is the number of CPUs the agent manages (its cpus resource).
	CPUs float64
	// CPUList lists the CPUs (numbers) revocable work may be confined to;
	// empty means 0 to CPUs-1.
	CPUList []int
	// MemTotal and MemAvailable are /proc/meminfo's values in bytes;
	// MemTotal 0 means unknown.
	MemTotal, MemAvailable uint64
	// Load1, Load5 and Load15 are /proc/loadavg's load averages.
	Load1, Load5, Load15 float64
	// CPUPressureSome10, MemPressureSome10 and MemPressureFull10 are the
	// node's /proc/pressure avg10 values, in percent.
	CPUPressureSome10, MemPressureSome10, MemPressureFull10 float64
	// LinkCapacity is the node's egress bandwidth (its bandwidth resource)
	// in Mbit/s; 0 when unknown.
	LinkCapacity float64
	// LinkTx and LinkRx are the managed interfaces' egress and ingress
	// (Mbit/s) over their last sampling interval, which ended at
	// LinkSampledAt (zero: not measured).
	LinkTx, LinkRx float64
	LinkSampledAt  time.Time
	// MemoryHigh reports that the revocable subtree has memory.high
	// (cgroup v2), so Reclaim and Release can be applied; Freeze that it
	// can be frozen (cgroup.freeze of the v2 tree, which hybrid hosts
	// have too).
	MemoryHigh, Freeze bool
	// IOPressureSome10 and IOPressureFull10 are /proc/pressure/io avg10
	// values, in percent.
	IOPressureSome10, IOPressureFull10 float64
	// DiskIO reports that the revocable subtree's disk I/O can be capped
	// (io.max or blkio.throttle); DiskBytesPerSecond is the node's
	// measured disk throughput capacity estimate (0: unknown), the cap's
	// ceiling.
	DiskIO             bool
	DiskBytesPerSecond float64
}

// Event is a threshold event from the eBPF ring buffer: one wakeup of a
// guaranteed or protected container that waited Latency for a CPU, while
// the revocable container Culprit ("" if unknown) was running.
type Event struct {
	Time      time.Time
	Container string // the victim
	Culprit   string
	Latency   time.Duration
	// Delayed is the part of Latency revocable tasks held the CPU (0:
	// not measured).
	Delayed time.Duration
}

// Input is everything a controller sees at one evaluation.
type Input struct {
	// Now is the evaluation time. Controllers read no clock: time only
	// advances through Now, which must not go backwards between calls.
	Now time.Time
	// Node is node-wide state.
	Node Node
	// Containers lists every running container, guaranteed, revocable and
	// protected. A container missing from the list is gone.
	Containers []Container
	// Events are the threshold events received since the previous
	// evaluation (controllers keep the ones they still need).
	Events []Event
	// RevocableLimit is the CPU limit (cores) currently applied to the
	// revocable subtree, 0 for none. Controllers take it as the truth about
	// the applied limit, so a correction the agent failed to apply, or a limit
	// set by another controller of the set, is seen at the next evaluation.
	RevocableLimit float64
	// RevocableCPUs lists the CPUs the revocable subtree may run on (its
	// cpuset), in the same spirit; nil when the node cannot confine it
	// (no cpuset controller), and then no controller asks it to.
	RevocableCPUs []int
	// RevocableBandwidth is the revocable bandwidth estimate (Mbit/s): the
	// pace of all revocable egress when no controller lowers it; 0 unknown.
	RevocableBandwidth float64
	// RevocableBandwidthLimit is the limit (Mbit/s) a controller applied to
	// the revocable egress pace, 0 for none; the truth, like RevocableLimit.
	RevocableBandwidthLimit float64
	// RevocableMemoryHigh is the revocable subtree's memory.high in bytes,
	// 0 for none; RevocableFrozen whether it is frozen. The truth, like
	// RevocableLimit.
	RevocableMemoryHigh uint64
	RevocableFrozen     bool
	// RevocableIOLimit is the cap (bytes per second per device) applied to
	// the revocable subtree's disk I/O, 0 for none; the truth.
	RevocableIOLimit float64
	// RevocableIOBytes counts the bytes the revocable subtree has read and
	// written on the capped device since it was made (v2 io.stat, v1
	// blkio.throttle.io_service_bytes); 0 when unknown. The diskio
	// controller learns from it the rate revocable work reaches uncapped.
	RevocableIOBytes uint64
}

// Kind is what a correction does. Its values match slackline.v1.CorrectionKind.
type Kind int

// The kinds of correction.
const (
	// Throttle lowers the CPU limit of a revocable container, or of the whole
	// revocable subtree, to Correction.CPULimit cores.
	Throttle Kind = iota + 1
	// Unthrottle raises the CPU limit to Correction.CPULimit cores, or removes
	// it when CPULimit is 0.
	Unthrottle
	// Kill kills a revocable container; its task ends TASK_STATE_KILLED with
	// REASON_CONTAINER_PREEMPTED and Correction.Reason as its message.
	Kill
	// Confine restricts the revocable subtree to the CPUs in
	// Correction.CPUs (a cpuset); an empty list gives it every CPU.
	Confine
	// Reclaim lowers the revocable subtree's memory.high to
	// Correction.MemoryHigh bytes: the kernel reclaims its memory down to
	// it and throttles its allocations, without killing anything.
	Reclaim
	// Freeze freezes the revocable subtree (cgroup.freeze): its tasks stop
	// allocating, and keep what they hold, until Thaw.
	Freeze
	// Thaw undoes Freeze.
	Thaw
	// Release raises the revocable subtree's memory.high to
	// Correction.MemoryHigh bytes, or removes it when MemoryHigh is 0.
	Release
)

// String returns the kind in lower case: "throttle", "unthrottle", "kill",
// "confine", "reclaim", "freeze", "thaw", "release".
func (k Kind) String() string {
	switch k {
	case Throttle:
		return "throttle"
	case Unthrottle:
		return "unthrottle"
	case Kill:
		return "kill"
	case Confine:
		return "confine"
	case Reclaim:
		return "reclaim"
	case Freeze:
		return "freeze"
	case Thaw:
		return "thaw"
	case Release:
		return "release"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Resource is what a Throttle or Unthrottle limits.
type Resource int

// The resources a correction limits.
const (
	// CPU limits CPU (Correction.CPULimit, cores); the zero value.
	CPU Resource = iota
	// Bandwidth limits the pace of revocable egress
	// (Correction.BandwidthLimit, Mbit/s).
	Bandwidth
	// DiskIO caps the revocable subtree's disk I/O (Correction.IOLimit,
	// bytes per second, per device: io.max / blkio.throttle).
	DiskIO
)

// String returns the resource's name as in the API: "cpus", "bandwidth",
// "disk_io".
func (r Resource) String() string {
	switch r {
	case Bandwidth:
		return "bandwidth"
	case DiskIO:
		return "disk_io"
	}
	return "cpus"
}

// Correction is one action a controller asks the agent to carry out.
type Correction struct {
	Kind Kind
	// Resource is what a Throttle or Unthrottle limits (CPU unless set).
	Resource Resource
	// ContainerID is the target container; "" for the whole revocable subtree
	// (Throttle and Unthrottle only).
	ContainerID string
	// TaskID is the target container's task, for status updates and records.
	TaskID string
	// CPULimit is the new limit in cores for Throttle and Unthrottle of
	// CPU; Unthrottle with 0 removes the limit.
	CPULimit float64
	// Period is the CFS period over which CPULimit is enforced (0: the
	// kernel's default, 100 ms). A short one keeps throttled spells short.
	Period time.Duration
	// CPUs is where Confine lets revocable work run; empty: every CPU.
	CPUs []int
	// BandwidthLimit is the new pace in Mbit/s of the revocable egress
	// (ContainerID "") for Throttle and Unthrottle of Bandwidth;
	// Unthrottle with 0 removes the limit (back to the estimate).
	BandwidthLimit float64
	// MemoryHigh is the revocable subtree's new memory.high in bytes for
	// Reclaim and Release (Release with 0 removes it).
	MemoryHigh uint64
	// IOLimit is the revocable subtree's new disk I/O cap in bytes per
	// second, per device, for Throttle and Unthrottle of DiskIO
	// (Unthrottle with 0 removes it).
	IOLimit float64
	// IORequestKiB is the disk's largest request, in KiB, that goes with
	// IOLimit: while revocable I/O is capped its requests are cut to this
	// size, so that guaranteed I/O waits behind at most one short command
	// (0: the device's own size, put back when the cap comes off).
	IORequestKiB uint64
	// Reason names the signal in words a framework author understands, e.g.
	// "web-1 run-queue p99 4.2 ms > 1 ms". It becomes the killed task's
	// status message.
	Reason string
	// Controller is the name of the controller that asked for it.
	Controller string
	// Signal is when the triggering signal was observed (an eBPF event's time,
	// a sample's time); Signal to cgroup write is the reaction time.
	Signal time.Time
}

// String formats the correction for logs and test output.
func (c Correction) String() string {
	target := c.ContainerID
	if target == "" {
		target = "revocable subtree"
	}
	switch c.Kind {
	case Throttle, Unthrottle:
		limit := "unlimited"
		switch {
		case c.Resource == DiskIO:
			target += " disk I/O"
			if c.IOLimit > 0 {
				limit = fmt.Sprintf("%.0f MiB/s", c.IOLimit/(1<<20))
			}
			if c.IORequestKiB > 0 {
				limit += fmt.Sprintf(", requests <= %d KiB", c.IORequestKiB)
			}
		case c.Resource == Bandwidth:
			target += " egress"
			if c.BandwidthLimit > 0 {
				limit = fmt.Sprintf("%.0f Mbit/s", c.BandwidthLimit)
			}
		case c.CPULimit > 0:
			limit = fmt.Sprintf("%.2f cores", c.CPULimit)
			if c.Period > 0 {
				limit += " per " + c.Period.String()
			}
		}
		return fmt.Sprintf("%s %s to %s [%s: %s]", c.Kind, target, limit, c.Controller, c.Reason)
	case Confine:
		cpus := "every CPU"
		if len(c.CPUs) > 0 {
			cpus = "CPUs " + FormatCPUs(c.CPUs)
		}
		return fmt.Sprintf("%s %s to %s [%s: %s]", c.Kind, target, cpus, c.Controller, c.Reason)
	case Reclaim, Release:
		high := "unlimited"
		if c.MemoryHigh > 0 {
			high = formatBytes(c.MemoryHigh)
		}
		return fmt.Sprintf("%s %s memory.high to %s [%s: %s]", c.Kind, target, high, c.Controller, c.Reason)
	}
	return fmt.Sprintf("%s %s [%s: %s]", c.Kind, target, c.Controller, c.Reason)
}

// Controller turns what the node observes into corrections. Evaluate is a
// pure function of its inputs and of the controller's own deterministic
// state (timers and memory of earlier decisions, documented on each
// controller): no goroutines, clock or I/O. A Controller is not safe for
// concurrent use; the agent calls it from one goroutine, with
// non-decreasing Input.Now. It returns nil when nothing needs doing. The
// returned slice belongs to the caller.
type Controller interface {
	Evaluate(in Input) []Correction
}

// MemoryKeeper is a Controller that acts when the node's MemAvailable falls
// under a line of its own: KeepFree is the MemAvailable (bytes) it needs
// to stay calm on a node of memTotal bytes. The agent's estimate leaves
// that much free of revocable memory (estimator.NodeMemory), so that
// revocable work using all it was offered never drives the node under a
// line of the controllers that would then take it back (#28). The reclaim
// and memory controllers, and a set holding either (the largest), are
// MemoryKeepers.
type MemoryKeeper interface {
	KeepFree(memTotal uint64) uint64
}

// ControllerFunc adapts a function to the Controller interface.
type ControllerFunc func(in Input) []Correction

// Evaluate calls f(in).
func (f ControllerFunc) Evaluate(in Input) []Correction { return f(in) }

// Factory builds a controller from a validated configuration. It returns an
// error when the configuration does not allow the controller to do anything
// meaningful (the load controller without any threshold).
type Factory func(cfg Config) (Controller, error)

// Registry maps each controller name (as given to --qos-controller) to its
// factory. It is the only place controllers are registered; add a new one
// here.
var Registry = map[string]Factory{
	"noop":         func(Config) (Controller, error) { return Noop{}, nil },
	"load":         func(cfg Config) (Controller, error) { return NewLoad(cfg.Load, cfg.KillRetry) },
	"interference": func(cfg Config) (Controller, error) { return NewInterference(cfg.Interference, cfg.KillRetry), nil },
	"cpuset":       func(cfg Config) (Controller, error) { return NewCPUSet(cfg.CPUSet, cfg.Interference), nil },
	"memory":       func(cfg Config) (Controller, error) { return NewMemory(cfg.Memory, cfg.KillRetry), nil },
	"reclaim":      func(cfg Config) (Controller, error) { return NewMemoryReclaim(cfg.Reclaim, cfg.KillRetry), nil },
	"diskio":       func(cfg Config) (Controller, error) { return NewDiskIO(cfg.DiskIO), nil },
	"network":      func(cfg Config) (Controller, error) { return NewNetwork(cfg.Network), nil },
}

// DefaultControllers is the default --qos-controller value: CPU sets
// first, then throttling once they have nothing left to try
// (docs/colocation-study.md says why), and memory reclaim, which freezes
// and kills revocable work only once reclaiming it did not relieve the
// node, and disk I/O, which caps revocable I/O while guaranteed I/O stalls.
// Reclaim alone can end memory pressure: freezing frees nothing, so its
// kill of the newest revocable container follows KillAfter past the
// episode's first freeze whoever thaws the subtree meanwhile. "memory"
// (kill the largest at once) stays out: beside reclaim it would kill
// before reclaim and freezing had their chance, and a second killer of
// the same pressure would double the kills.
const DefaultControllers = "cpuset,interference,reclaim,diskio"

// Names returns the registered controller names, sorted.
func Names() []string {
	names := make([]string, 0, len(Registry))
	for name := range Registry {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// ParseNames splits a --qos-controller value ("interference, memory") into
// names, dropping blanks.
func ParseNames(s string) []string {
	var names []string
	for name := range strings.SplitSeq(s, ",") {
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}
