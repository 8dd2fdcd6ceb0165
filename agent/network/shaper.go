package network

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The agent's tc objects on a managed interface. The handle major marks the
// root qdisc as the agent's own: that is how a restarted agent finds what it
// installed before a crash, and how it tells its qdisc from an operator's
// or another agent's on the same host (HandleMajor).
const (
	// QdiscMajor is the default handle major of the agent's HTB root qdisc ("SL").
	QdiscMajor = 0x514c
	// minorRevocable is the parent of every revocable class; its ceil is
	// the revocable pace.
	minorRevocable = 1
	// minorShared takes revocable cgroups without a class of their own.
	minorShared = 2
	// minorFirstTask is the first class of a revocable task with a
	// bandwidth allocation.
	minorFirstTask = 0x10
	// minorLastTask bounds the task classes (HTB minors are 16 bits).
	minorLastTask = 0xfff0

	filterPriority = 1
	filterHandle   = 1
	filterName     = "slackline_classify"
)

// unpacedBps is the ceil of the revocable classes when nothing limits
// them: far above any link, so that HTB never holds their traffic.
const unpacedBps = 100e9

// minRateBps is the assured rate of each revocable leaf class: tiny, so
// that the leaves borrow from the revocable parent, whose ceil (the pace)
// then bounds them all.
const minRateBps = 8_000

// ErrForeignQdisc is returned for an interface whose root qdisc is not the
// kernel's default and not the agent's: the agent leaves it alone rather
// than destroy someone's configuration.
var ErrForeignQdisc = errors.New("root qdisc installed by someone else")

// HandleMajor returns the handle major of the qdiscs of the agent whose
// cgroup root is cgroupRoot, in 0x5000-0x5fff: the same for every run of
// that agent, and most likely different for another agent on the host,
// which then leaves this one's interfaces alone (ErrForeignQdisc).
func HandleMajor(cgroupRoot string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(cgroupRoot))
	return 0x5000 | uint16(h.Sum32()&0x0fff)
}

// classID returns the tc handle major:minor of one of the agent's classes.
func (s *shaper) classID(minor uint16) uint32 { return netlink.MakeHandle(s.major, minor) }

// leaf is the configuration of one leaf class.
type leaf struct {
	ceilBps uint64 // bits/s
	quantum uint32 // bytes per DRR round: weights leaves by allocation
}

// shaper keeps the agent's qdisc, classes and filter on one interface.
// It is used by Network with Network.mu held.
type shaper struct {
	h     *netlink.Handle
	link  netlink.Link
	major uint16
	log   *slog.Logger

	paceBps uint64          // the revocable parent's ceil as applied, 0 before the first apply
	leaves  map[uint16]leaf // leaf classes as applied
}

// install creates the agent's HTB qdisc on the interface, or adopts the
// one a previous run left, and (re)attaches the classifier: a replace, so
// there is never more than one filter. Leaf classes a previous run left
// are kept until the first apply names the ones wanted.
func install(h *netlink.Handle, link netlink.Link, major uint16, classifierFD int, log *slog.Logger) (*shaper, error) {
	name := link.Attrs().Name
	root, err := rootQdisc(h, link)
	if err != nil {
		return nil, err
	}
	s := &shaper{h: h, link: link, major: major, log: log, leaves: map[uint16]leaf{}}
	switch {
	case ours(root, major):
		log.Info("network QoS: adopting the qdisc a previous run installed", "interface", name)
		classes, err := h.ClassList(link, netlink.MakeHandle(major, 0))
		if err != nil {
			return nil, fmt.Errorf("list classes of %s: %w", name, err)
		}
		for _, c := range classes {
			if minor := uint16(c.Attrs().Handle); c.Attrs().Parent == s.classID(minorRevocable) && minor >= minorFirstTask {
				s.leaves[minor] = leaf{} // unknown: rewritten or removed by the first apply
			}
		}
	case root == nil || root.Attrs().Handle == 0:
		// The kernel's default (noqueue, pfifo_fast, mq, fq_codel: handle
		// 0:), which comes back by itself when the agent's is deleted.
		htb := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(major, 0), Parent: netlink.HANDLE_ROOT})
		htb.Defcls = 0 // unclassified traffic is sent directly, ahead of every class
		if err := h.QdiscReplace(htb); err != nil {
			return nil, fmt.Errorf("install HTB qdisc on %s: %w", name, err)
		}
		log.Info("network QoS: HTB qdisc installed", "interface", name, "replaced", kindOf(root))
	default:
		return nil, fmt.Errorf("interface %s: %w (%s %s); remove it or leave %s out of --network-interfaces",
			name, ErrForeignQdisc, root.Type(), netlink.HandleStr(root.Attrs().Handle), name)
	}
	for _, minor := range []uint16{minorRevocable, minorShared} {
		if err := s.setClass(minor, leaf{ceilBps: unpacedBps, quantum: 1514}); err != nil {
			return nil, err
		}
	}
	s.paceBps = unpacedBps
	if err := s.attachClassifier(classifierFD); err != nil {
		return nil, err
	}
	return s, nil
}

// rootQdisc returns the interface's root qdisc (nil if none).
func rootQdisc(h *netlink.Handle, link netlink.Link) (netlink.Qdisc, error) {
	qdiscs, err := h.QdiscList(link)
	if err != nil {
		return nil, fmt.Errorf("list qdiscs of %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q, nil
		}
	}
	return nil, nil
}

// ours reports whether q is the agent's root qdisc.
func ours(q netlink.Qdisc, major uint16) bool {
	if q == nil {
		return false
	}
	qMajor, _ := netlink.MajorMinor(q.Attrs().Handle)
	return q.Type() == "htb" && qMajor == major
}

func kindOf(q netlink.Qdisc) string {
	if q == nil {
		return "none"
	}
	return q.Type()
}

// attachClassifier replaces the agent's filter with one running the
// classifier, and deletes any other filter on the qdisc.
func (s *shaper) attachClassifier(fd int) error {
	parent := netlink.MakeHandle(s.major, 0)
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: s.link.Attrs().Index, Parent: parent, Handle: filterHandle,
			Priority: filterPriority, Protocol: unix.ETH_P_ALL},
		ClassId: parent, // the program chooses the minor (skb->tc_classid is 16 bits)
		Fd:      fd, Name: filterName, DirectAction: true,
	}
	if err := s.h.FilterReplace(f); err != nil {
		return fmt.Errorf("attach classifier to %s: %w", s.link.Attrs().Name, err)
	}
	filters, err := s.h.FilterList(s.link, parent)
	if err != nil {
		return fmt.Errorf("list filters of %s: %w", s.link.Attrs().Name, err)
	}
	for _, other := range filters {
		a := other.Attrs()
		if a.Priority == filterPriority && a.Handle == filterHandle {
			continue
		}
		if err := s.h.FilterDel(other); err != nil {
			return fmt.Errorf("delete stray filter on %s: %w", s.link.Attrs().Name, err)
		}
	}
	return nil
}

// apply sets the revocable pace and the task leaves (minor -> allocation),
// and removes leaves not named.
func (s *shaper) apply(paceBps uint64, leaves map[uint16]leaf) error {
	var errs []error
	if paceBps != s.paceBps {
		for _, minor := range []uint16{minorRevocable, minorShared} {
			if err := s.setClass(minor, leaf{ceilBps: paceBps, quantum: 1514}); err != nil {
				errs = append(errs, err)
			}
		}
		s.paceBps = paceBps
	}
	for minor, l := range leaves {
		l.ceilBps = min(l.ceilBps, paceBps)
		if prev, ok := s.leaves[minor]; ok && prev == l {
			continue
		}
		if err := s.setClass(minor, l); err != nil {
			errs = append(errs, err)
			continue
		}
		s.leaves[minor] = l
	}
	for minor := range s.leaves {
		if _, ok := leaves[minor]; ok {
			continue
		}
		err := s.h.ClassDel(&netlink.HtbClass{ClassAttrs: netlink.ClassAttrs{LinkIndex: s.link.Attrs().Index,
			Handle: s.classID(minor), Parent: s.classID(minorRevocable)}})
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete class %x on %s: %w", minor, s.link.Attrs().Name, err))
			continue
		}
		delete(s.leaves, minor)
	}
	return errors.Join(errs...)
}

// setClass creates or changes one class: the revocable parent under the
// qdisc, every other class under the parent.
func (s *shaper) setClass(minor uint16, l leaf) error {
	parent := s.classID(minorRevocable)
	rate := uint64(minRateBps)
	if minor == minorRevocable {
		parent = netlink.MakeHandle(s.major, 0)
		rate = l.ceilBps // the parent is assured what it may use
	}
	c := netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: s.link.Attrs().Index, Handle: s.classID(minor), Parent: parent},
		netlink.HtbClassAttrs{Rate: rate, Ceil: max(l.ceilBps, rate), Quantum: l.quantum, Prio: 1})
	if err := s.h.ClassReplace(c); err != nil {
		return fmt.Errorf("set class %x on %s: %w", minor, s.link.Attrs().Name, err)
	}
	return nil
}

// restore deletes the agent's qdisc (and with it its classes and filter);
// the kernel puts its default qdisc back.
func (s *shaper) restore() error {
	root, err := rootQdisc(s.h, s.link)
	if err != nil {
		return err
	}
	if !ours(root, s.major) {
		return nil
	}
	if err := s.h.QdiscDel(root); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove HTB qdisc from %s: %w", s.link.Attrs().Name, err)
	}
	s.log.Info("network QoS: qdisc removed, the kernel's default is back", "interface", s.link.Attrs().Name)
	return nil
}

// quantumFor returns the DRR quantum of a task's leaf: proportional to its
// allocation (150 bytes per Mbit/s), within HTB's sane bounds.
func quantumFor(mbps float64) uint32 {
	return uint32(math.Round(min(max(mbps*150, 1514), 200_000)))
}
