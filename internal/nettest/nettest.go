// Package nettest builds the network the network QoS tests and benchmark
// run on, entirely inside network namespaces they create: a "node" side
// (the interface the agent manages, and the tasks' sockets) and a "peer"
// side (sinks and servers) joined by a veth pair, the peer's ingress
// optionally limited to a rate (ifb + tbf), so that the far end of the
// node's link is a bottleneck with a queue, as a switch port would be.
// Nothing touches the host's own interfaces: with NodeInHost the node
// side is the test's network namespace, still on a veth the test made.
//
// It also holds the workloads (a bulk TCP sender, a request/response
// client) that tests start as helper processes in a task's cgroup: see
// Helpers and Main.
//
// Everything here needs root and iproute2 (ip, tc).
package nettest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Options configure a Pair.
type Options struct {
	// NodeInHost puts the node side in the caller's network namespace
	// instead of a new one (the benchmark's real agent runs tasks there).
	NodeInHost bool
	// PeerIngressMbps limits what the peer receives to this rate (tbf on
	// an ifb device the peer's ingress is redirected to); 0: no limit.
	PeerIngressMbps float64
	// PeerQueueBytes is the tbf queue (default 1 MB: 8 ms at 1 Gbit/s,
	// a shallow switch buffer).
	PeerQueueBytes int
	// PeerBurstBytes is the tbf bucket (default 80 KB: one GSO packet of
	// 64 KB and some room, 0.66 ms at 1 Gbit/s). tbf cuts every GSO
	// packet longer than its bucket into MTU-sized segments in software:
	// with a 64 KB bucket (65500 bytes) the far end — which stands for a
	// switch and should cost the host nothing — moved each packet through
	// ifb and the peer's stack one segment at a time (measured: 1.6 KB
	// per ifb transmit against 49 KB per transmit on the node's veth),
	// in softirq run in the sender's own context: the guaranteed server
	// spent 4.5 times its CPU time (164 ms/s against 36 ms/s) doing the
	// far end's work.
	PeerBurstBytes int
}

// Pair is a veth pair between a node side and a peer namespace.
type Pair struct {
	// NodeNetns is the node side's namespace file ("" with NodeInHost).
	NodeNetns string
	// PeerNetns is the peer's namespace file (/run/netns/NAME).
	PeerNetns string
	// NodeDev and PeerDev are the veth ends' names.
	NodeDev, PeerDev string
	// NodeIP and PeerIP are their IPv4 addresses (a /30).
	NodeIP, PeerIP string

	nodeName, peerName string
}

var pairs atomic.Uint32

// NewPair creates the namespaces and the veth pair. Close removes them.
func NewPair(o Options) (*Pair, error) {
	if o.PeerQueueBytes <= 0 {
		o.PeerQueueBytes = 1 << 20
	}
	if o.PeerBurstBytes <= 0 {
		o.PeerBurstBytes = 80 << 10
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	n := pairs.Add(1)
	p := &Pair{
		nodeName: "slnode-" + suffix, peerName: "slpeer-" + suffix,
		NodeDev: "sln" + suffix, PeerDev: "slp" + suffix,
		NodeIP: fmt.Sprintf("10.%d.%d.1", 216+int(b[0])%32, int(b[1])^int(n&0xff)), PeerIP: "",
	}
	p.PeerIP = strings.TrimSuffix(p.NodeIP, ".1") + ".2"
	p.PeerNetns = "/run/netns/" + p.peerName
	node := func(args ...string) []string { return args }
	if !o.NodeInHost {
		p.NodeNetns = "/run/netns/" + p.nodeName
		node = func(args ...string) []string { return append([]string{"-n", p.nodeName}, args...) }
	}
	peer := func(args ...string) []string { return append([]string{"-n", p.peerName}, args...) }
	steps := [][]string{{"ip", "netns", "add", p.peerName}}
	if !o.NodeInHost {
		steps = append(steps, []string{"ip", "netns", "add", p.nodeName})
	}
	steps = append(steps,
		append([]string{"ip"}, node("link", "add", p.NodeDev, "type", "veth", "peer", "name", p.PeerDev, "netns", p.peerName)...),
		append([]string{"ip"}, node("addr", "add", p.NodeIP+"/30", "dev", p.NodeDev)...),
		append([]string{"ip"}, peer("addr", "add", p.PeerIP+"/30", "dev", p.PeerDev)...),
		append([]string{"ip"}, node("link", "set", p.NodeDev, "up")...),
		append([]string{"ip"}, peer("link", "set", p.PeerDev, "up")...),
		append([]string{"ip"}, peer("link", "set", "lo", "up")...),
	)
	if !o.NodeInHost {
		steps = append(steps, append([]string{"ip"}, node("link", "set", "lo", "up")...))
	}
	if o.PeerIngressMbps > 0 {
		ifb := "slb" + suffix
		rate := fmt.Sprintf("%dkbit", int(o.PeerIngressMbps*1000))
		steps = append(steps,
			append([]string{"ip"}, peer("link", "add", ifb, "type", "ifb")...),
			append([]string{"ip"}, peer("link", "set", ifb, "up")...),
			append([]string{"tc"}, peer("qdisc", "add", "dev", p.PeerDev, "handle", "ffff:", "ingress")...),
			append([]string{"tc"}, peer("filter", "add", "dev", p.PeerDev, "parent", "ffff:", "protocol", "all", "u32",
				"match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb)...),
			append([]string{"tc"}, peer("qdisc", "add", "dev", ifb, "root", "tbf", "rate", rate,
				"burst", fmt.Sprint(o.PeerBurstBytes), "limit", fmt.Sprint(o.PeerQueueBytes))...),
		)
	}
	for _, step := range steps {
		if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w: %s", strings.Join(step, " "), err, out), p.Close())
		}
	}
	return p, nil
}

// Close removes the namespaces (and with them the veth pair and ifb).
func (p *Pair) Close() error {
	var errs []error
	if p.NodeNetns == "" {
		_ = exec.Command("ip", "link", "del", p.NodeDev).Run()
	} else if out, err := exec.Command("ip", "netns", "del", p.nodeName).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such") {
		errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", p.nodeName, err, out))
	}
	if out, err := exec.Command("ip", "netns", "del", p.peerName).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such") {
		errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", p.peerName, err, out))
	}
	return errors.Join(errs...)
}

// Tc runs tc in the node side's namespace and returns its output.
func (p *Pair) Tc(args ...string) (string, error) {
	if p.NodeNetns != "" {
		args = append([]string{"-n", p.nodeName}, args...)
	}
	out, err := exec.Command("tc", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("tc %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// InNetns runs f on a thread moved into the namespace file path ("" runs
// it where the caller is). Sockets f creates stay in that namespace
// whatever thread uses them later. The thread is thrown away afterwards.
func InNetns(path string, f func() error) error {
	if path == "" {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open %s: %w", path, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Listen listens on the peer side (addr "PORT" or ":PORT").
func (p *Pair) Listen(port int) (net.Listener, error) {
	var ln net.Listener
	err := InNetns(p.PeerNetns, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", p.PeerIP, port))
		return err
	})
	return ln, err
}
