package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/bpf"
)

// Classifier is what Network needs of the eBPF classifier:
// *netqos.Programs implements it.
type Classifier interface {
	// ClassifierFD is the direct-action cls_bpf program to attach.
	ClassifierFD() (int, error)
	// SetClass and DeleteClass map a v2 cgroup to an HTB class minor.
	SetClass(cgroupID uint64, minor uint16) error
	DeleteClass(cgroupID uint64) error
	// SetRevocableSubtree maps every other cgroup below root (at level)
	// to the class minor.
	SetRevocableSubtree(root uint64, level uint32, minor uint16) error
}

// Config configures a Network.
type Config struct {
	// Interfaces are the interfaces to manage (--network-interfaces);
	// empty means the default-route interface.
	Interfaces []string
	// Netns is the network namespace (a file such as /run/netns/NAME) of
	// the interfaces and of the tasks' sockets; empty is the agent's own.
	Netns string
	// Classifier puts packets into classes by cgroup. Required.
	Classifier Classifier
	// RevocableCgroup is the revocable subtree's directory in the v2
	// hierarchy (e.g. /sys/fs/cgroup/unified/slackline/revocable) and
	// UnifiedRoot the hierarchy's mount point: revocable tasks without a
	// bandwidth allocation are paced as a group through it. Empty: they
	// are not paced.
	RevocableCgroup, UnifiedRoot string
	// Capacity is the node's egress bandwidth in Mbit/s (its bandwidth
	// resource); 0 when unknown: then nothing but the QoS limit and the
	// tasks' own allocations bound revocable egress.
	Capacity float64
	// QdiscMajor is the handle major of the agent's qdiscs (default
	// QdiscMajor; the agent uses HandleMajor of its cgroup root).
	QdiscMajor uint16
	// Interval is how often the interfaces' counters are sampled (Link,
	// default 100 ms).
	Interval time.Duration
	// Logger receives the subsystem's logs (default slog.Default()).
	Logger *slog.Logger
}

// Task is a revocable task whose egress is paced.
type Task struct {
	// ContainerID identifies the task's container.
	ContainerID string
	// CgroupID is the container's v2 cgroup id.
	CgroupID uint64
	// Bandwidth is the task's allocation in Mbit/s; 0 puts it in the
	// shared revocable class.
	Bandwidth float64
}

// LinkRates are the managed interfaces' throughput, summed, over the last
// sampling interval.
type LinkRates struct {
	// At is when the counters were read (zero before two samples).
	At time.Time
	// Tx and Rx are egress and ingress in Mbit/s (link layer: frames
	// including their Ethernet headers).
	Tx, Rx float64
}

// Network is the agent's network QoS subsystem: it paces revocable tasks'
// egress on the managed interfaces to their allocations and the revocable
// total to the current pace (the revocable bandwidth estimate, lowered by
// the QoS controller), and samples the interfaces' throughput. Create it
// with New, keep its inputs current with SetTasks, SetEstimate and
// SetQoSLimit, run it with Run; Run's end (or Close) restores the
// interfaces. Methods are safe for concurrent use.
type Network struct {
	cfg Config
	log *slog.Logger
	h   *netlink.Handle

	revocableRoot  uint64
	revocableLevel uint32

	// mu guards the desired state, what is applied and the netlink
	// handle; it is held across netlink calls (tens of microseconds) by
	// the setters and Run, never by readers of Link, Pace or QoSLimit.
	mu       sync.Mutex
	shapers  []*shaper
	tasks    map[string]Task   // container id -> task
	minors   map[string]uint16 // container id -> class minor
	classOf  map[uint64]uint16 // cgroup id -> class minor, as in the classifier
	estimate float64           // Mbit/s; 0 none
	closed   bool

	qosLimit atomic.Uint64 // math.Float64bits of the QoS limit, 0 none
	pace     atomic.Uint64 // math.Float64bits of the applied pace, 0 unpaced
	link     atomic.Pointer[LinkRates]
}

// New opens the network namespace, installs the agent's qdisc and the
// classifier on every managed interface (adopting what a previous run
// left), and removes the agent's qdisc from interfaces no longer managed.
// Its error follows the probe contract of package bpf (bpf.Classify): it
// wraps bpf.ErrPermission without CAP_NET_ADMIN, ebpf.ErrNotSupported
// when the kernel lacks HTB or cls_bpf, ErrForeignQdisc for an interface
// configured by someone else; the agent then runs without network QoS and
// says why.
func New(cfg Config) (n *Network, err error) {
	defer func() { err = bpf.Classify(err) }()
	if cfg.Classifier == nil {
		return nil, errors.New("network QoS: no classifier")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.QdiscMajor == 0 {
		cfg.QdiscMajor = QdiscMajor
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	fd, err := cfg.Classifier.ClassifierFD()
	if err != nil {
		return nil, fmt.Errorf("network QoS: %w", err)
	}
	h, err := openHandle(cfg.Netns)
	if err != nil {
		return nil, fmt.Errorf("network QoS: %w", err)
	}
	n = &Network{cfg: cfg, log: cfg.Logger, h: h, tasks: map[string]Task{}, minors: map[string]uint16{}, classOf: map[uint64]uint16{}}
	n.link.Store(&LinkRates{})
	names := cfg.Interfaces
	if len(names) == 0 {
		name, err := DefaultRouteInterface(h)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("network QoS: no --network-interfaces and %w", err)
		}
		names = []string{name}
	}
	for _, name := range names {
		link, err := h.LinkByName(name)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("network QoS: interface %s: %w", name, err), n.Close())
		}
		s, err := install(h, link, cfg.QdiscMajor, fd, n.log)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("network QoS: %w", err), n.Close())
		}
		n.shapers = append(n.shapers, s)
	}
	n.forgetUnmanaged(names)
	if cfg.RevocableCgroup != "" {
		if err := n.pointAtRevocableSubtree(); err != nil {
			return nil, errors.Join(fmt.Errorf("network QoS: %w", err), n.Close())
		}
	}
	n.mu.Lock()
	err = n.apply()
	n.mu.Unlock()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("network QoS: %w", err), n.Close())
	}
	return n, nil
}

func openHandle(path string) (*netlink.Handle, error) {
	if path == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// forgetUnmanaged removes the agent's qdisc from interfaces it no longer
// manages (it was told other interfaces since it installed them).
func (n *Network) forgetUnmanaged(managed []string) {
	links, err := n.h.LinkList()
	if err != nil {
		n.log.Warn("network QoS: list interfaces", "err", err)
		return
	}
	for _, link := range links {
		if slices.Contains(managed, link.Attrs().Name) {
			continue
		}
		if root, err := rootQdisc(n.h, link); err == nil && ours(root, n.cfg.QdiscMajor) {
			s := &shaper{h: n.h, link: link, major: n.cfg.QdiscMajor, log: n.log}
			if err := s.restore(); err != nil {
				n.log.Warn("network QoS: remove the qdisc of an interface no longer managed", "interface", link.Attrs().Name, "err", err)
			}
		}
	}
}

// pointAtRevocableSubtree tells the classifier where the revocable subtree
// is: its cgroup id, and its depth below the v2 root.
func (n *Network) pointAtRevocableSubtree() error {
	var st unix.Stat_t
	if err := unix.Stat(n.cfg.RevocableCgroup, &st); err != nil {
		return fmt.Errorf("revocable cgroup: %w", err)
	}
	rel, err := filepath.Rel(n.cfg.UnifiedRoot, n.cfg.RevocableCgroup)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("revocable cgroup %s is not below %s", n.cfg.RevocableCgroup, n.cfg.UnifiedRoot)
	}
	n.revocableRoot, n.revocableLevel = st.Ino, uint32(len(strings.Split(rel, "/")))
	return n.cfg.Classifier.SetRevocableSubtree(n.revocableRoot, n.revocableLevel, minorShared)
}

// Interfaces returns the managed interfaces' names.
func (n *Network) Interfaces() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, len(n.shapers))
	for i, s := range n.shapers {
		names[i] = s.link.Attrs().Name
	}
	return names
}

// SetTasks replaces the revocable tasks whose egress is paced and applies
// the change at once.
func (n *Network) SetTasks(tasks []Task) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tasks = make(map[string]Task, len(tasks))
	for _, t := range tasks {
		n.tasks[t.ContainerID] = t
	}
	return n.apply()
}

// SetEstimate sets the revocable bandwidth (Mbit/s): the pace of the
// revocable total when the QoS controller does not ask for less. Ignored
// when the capacity is unknown.
func (n *Network) SetEstimate(mbps float64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if mbps == n.estimate {
		return nil
	}
	n.estimate = mbps
	return n.apply()
}

// SetQoSLimit lowers the revocable pace to mbps (0 removes the limit).
func (n *Network) SetQoSLimit(mbps float64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.qosLimit.Store(math.Float64bits(max(mbps, 0)))
	return n.apply()
}

// QoSLimit returns the QoS controller's limit (Mbit/s, 0 none).
func (n *Network) QoSLimit() float64 { return math.Float64frombits(n.qosLimit.Load()) }

// Pace returns the revocable total's applied pace in Mbit/s (0: unpaced).
func (n *Network) Pace() float64 { return math.Float64frombits(n.pace.Load()) }

// Estimate returns the revocable bandwidth last set (Mbit/s, 0 none).
func (n *Network) Estimate() float64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.estimate
}

// Link returns the managed interfaces' latest throughput.
func (n *Network) Link() LinkRates { return *n.link.Load() }

// pace computes the revocable total's pace in Mbit/s, 0 for unpaced: the
// estimate (at least 1% of the capacity, so that revocable tasks are
// slowed down, not cut off) when the capacity is known, and at most the
// QoS limit.
func (n *Network) paceMbps() float64 {
	pace := 0.0
	if c := n.cfg.Capacity; c > 0 {
		pace = max(n.estimate, floorMbps(c))
	}
	if limit := n.QoSLimit(); limit > 0 && (pace == 0 || limit < pace) {
		pace = limit
	}
	return pace
}

// floorMbps is the lowest pace: 1% of the capacity, at least 1 Mbit/s.
func floorMbps(capacity float64) float64 { return max(capacity/100, 1) }

// apply brings classes and classifier in line with the desired state.
// Called with n.mu held.
func (n *Network) apply() error {
	if n.closed {
		return nil
	}
	pace := n.paceMbps()
	paceBps := uint64(unpacedBps)
	if pace > 0 {
		paceBps = uint64(pace * 1e6)
	}
	// Minors: kept per container while it runs, the smallest free for a
	// new one.
	used := map[uint16]bool{}
	for id, minor := range n.minors {
		if t, ok := n.tasks[id]; !ok || t.Bandwidth <= 0 {
			delete(n.minors, id)
		} else {
			used[minor] = true
		}
	}
	leaves := map[uint16]leaf{}
	wantClass := map[uint64]uint16{}
	var errs []error
	ids := make([]string, 0, len(n.tasks))
	for id := range n.tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	next := uint16(minorFirstTask)
	for _, id := range ids {
		t := n.tasks[id]
		if t.Bandwidth <= 0 || t.CgroupID == 0 {
			continue
		}
		minor, ok := n.minors[id]
		if !ok {
			for used[next] && next < minorLastTask {
				next++
			}
			if next >= minorLastTask {
				errs = append(errs, fmt.Errorf("task %s: no class left", id))
				continue
			}
			minor, used[next] = next, true
			n.minors[id] = minor
		}
		leaves[minor] = leaf{ceilBps: uint64(t.Bandwidth * 1e6), quantum: quantumFor(t.Bandwidth)}
		wantClass[t.CgroupID] = minor
	}
	// Classes first, so the classifier never names a missing one; the
	// classifier's stale entries go before their classes.
	for cgroup, class := range n.classOf {
		if wantClass[cgroup] != class {
			if err := n.cfg.Classifier.DeleteClass(cgroup); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(n.classOf, cgroup)
		}
	}
	for _, s := range n.shapers {
		if err := s.apply(paceBps, leaves); err != nil {
			errs = append(errs, err)
		}
	}
	for cgroup, class := range wantClass {
		if n.classOf[cgroup] == class {
			continue
		}
		if err := n.cfg.Classifier.SetClass(cgroup, class); err != nil {
			errs = append(errs, err)
			continue
		}
		n.classOf[cgroup] = class
	}
	n.pace.Store(math.Float64bits(pace))
	return errors.Join(errs...)
}

// Run samples the interfaces' counters every Interval until ctx ends, then
// restores the interfaces (Close) and returns nil.
func (n *Network) Run(ctx context.Context) error {
	defer n.Close()
	tick := time.NewTicker(n.cfg.Interval)
	defer tick.Stop()
	type counters struct{ tx, rx uint64 }
	var prev counters
	var prevAt time.Time
	for {
		var c counters
		complete := true
		n.mu.Lock()
		for _, s := range n.shapers {
			link, err := n.h.LinkByIndex(s.link.Attrs().Index)
			if err != nil || link.Attrs().Statistics == nil {
				complete = false // a partial sum would make the next rate wrong
				break
			}
			c.tx += link.Attrs().Statistics.TxBytes
			c.rx += link.Attrs().Statistics.RxBytes
		}
		n.mu.Unlock()
		now := time.Now()
		if !complete {
			prevAt = time.Time{}
		} else if !prevAt.IsZero() && c.tx >= prev.tx && c.rx >= prev.rx {
			secs := now.Sub(prevAt).Seconds()
			n.link.Store(&LinkRates{At: now, Tx: float64(c.tx-prev.tx) * 8 / 1e6 / secs, Rx: float64(c.rx-prev.rx) * 8 / 1e6 / secs})
		}
		if complete {
			prev, prevAt = c, now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Close restores every managed interface (deletes the agent's qdisc; the
// kernel's default comes back) and closes the netlink handle. Tasks' egress
// is unpaced from then on. It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	for _, s := range n.shapers {
		errs = append(errs, s.restore())
	}
	for cgroup := range n.classOf {
		errs = append(errs, n.cfg.Classifier.DeleteClass(cgroup))
	}
	n.h.Close()
	return errors.Join(errs...)
}
