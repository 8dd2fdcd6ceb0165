// Package netbench runs the network QoS scenario of scripts/bench/network
// and of e2e's TestNetworkQoS on real binaries: a coordinator, an agent
// whose bandwidth is a 1 Gbit/s link (a veth pair to a namespace whose
// ingress is rate-limited, internal/nettest), and a framework that runs a
// latency-sensitive request/response server as a guaranteed task and, in
// two of the three modes, a bulk TCP sender as a revocable task on the
// revocable bandwidth the agent estimates. A client in the peer namespace
// loads the server at a fixed rate (open loop) and measures each
// exchange's latency; a sink there counts what the bulk sender gets
// through.
//
// Everything runs on the veth pair and namespaces it creates; tasks are
// internal/netbench/netload. It needs root.
//
// # What the host pays for the far end
//
// The far end stands for a switch port and another machine, yet runs on
// the node's CPUs: the peer's ingress (ifb and tbf), its TCP receive and
// the client and sink (in this process) take softirq and CPU time from the
// tasks under test, often in their own context (a veth transmit processes
// the peer's receive in the sender's softirq). Options.BurstBytes keeps
// that cost near what a remote receiver would charge: a tbf bucket
// smaller than a GSO packet made tbf segment every packet in software
// (measured: 1.6 KB per ifb transmit) and the server spent 4.5 times its
// CPU time doing the far end's work. What remains — about one skb of
// receive work per 64 KB sent — grows with the revocable sender's rate and
// is still charged to whoever runs when it happens; PaceMbps measures the
// server's latency against that rate with no controller.
package netbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/nettest"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// Mode is one way to run the scenario.
type Mode int

// The three ways.
const (
	// Alone: the guaranteed server only.
	Alone Mode = iota
	// NoQoS: with the revocable bulk sender, no network QoS at all (no
	// pacing, QoS controller "noop").
	NoQoS
	// QoS: with the bulk sender, revocable egress paced and the "network"
	// QoS controller on.
	QoS
)

func (m Mode) String() string {
	return [...]string{"guaranteed alone", "with revocable sender, no network QoS", "with revocable sender, network QoS"}[m]
}

// Options configure a run; zero values take the defaults.
type Options struct {
	// BinDir holds slackline-coordinator, slackline-agent and, unless
	// Netload names it elsewhere, netload.
	BinDir, Netload string
	// LinkMbps is the far end's rate and the agent's bandwidth (1000).
	LinkMbps float64
	// QueueBytes is the far end's queue (1 MB: 8 ms at 1 Gbit/s) and
	// BurstBytes its token bucket (nettest's default, 80 KB: a GSO packet
	// passes whole).
	QueueBytes, BurstBytes int
	// Rate is the client's requests per second (250), spread over Conns
	// connections (4); each response is ResponseBytes (128 KB) for a
	// RequestBytes (64 B) request: a cache serving objects, 260 Mbit/s.
	Rate                        float64
	Conns                       int
	RequestBytes, ResponseBytes int
	// Warmup passes before measuring alone (3 s); Settle after the bulk
	// sender started (5 s); Measure is the measured window (10 s).
	Warmup, Settle, Measure time.Duration
	// PaceMbps, when set, runs mode QoS with revocable egress paced to
	// this fixed rate and no QoS controller (the fixed estimator offers it
	// as the revocable bandwidth): what pacing alone does at a given
	// rate, to tell the queue at the link from the host's cost of moving
	// the traffic.
	PaceMbps float64
	// RevocableCPU, when set, lifts the revocable subtree's lowest CPU
	// priority (cpu.idle and its weight: cgrouptest.Unthrottle) before the
	// bulk sender starts, so that the sender competes for the CPU as the
	// guaranteed tasks do. A test of the network controller sets it: on a
	// CI machine whose CPU hogs (stress-ng --cpu 2, parallel tests) take
	// every CPU, a revocable task gets none, by design: CI runs' senders
	// that moved nothing for the whole measurement looked so, and the same
	// starvation kept a killed one runnable for 5 s. The benchmark leaves
	// it.
	RevocableCPU bool
	// Logf receives progress (nil: none).
	Logf func(format string, args ...any)
}

func (o *Options) defaults() {
	set := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	set(&o.LinkMbps, 1000)
	set(&o.Rate, 250)
	seti := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	seti(&o.QueueBytes, 1<<20)
	seti(&o.Conns, 4)
	seti(&o.RequestBytes, 64)
	seti(&o.ResponseBytes, 128<<10)
	setd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setd(&o.Warmup, 3*time.Second)
	setd(&o.Settle, 5*time.Second)
	setd(&o.Measure, 10*time.Second)
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Result is one run's outcome.
type Result struct {
	Mode Mode
	// Latencies are the exchanges' latencies in the measured window.
	Latencies []time.Duration
	// P50 and P99 are their percentiles.
	P50, P99 time.Duration
	// GuaranteedMbps is the server's egress (responses, goodput) and
	// RevocableMbps the bulk sender's (goodput at the sink) in the window.
	GuaranteedMbps, RevocableMbps float64
	// LeftMbps is the link's goodput capacity (LinkMbps less TCP/IP and
	// Ethernet headers, 1448 of 1514 bytes) less GuaranteedMbps: what the
	// guaranteed task leaves to others.
	LeftMbps float64
	// Corrections are the agent's QoS corrections.
	Corrections []*slacklinev1.Correction
}

// Share is the revocable sender's share of what the guaranteed task left.
func (r Result) Share() float64 {
	if r.LeftMbps <= 0 {
		return 0
	}
	return r.RevocableMbps / r.LeftMbps
}

// Build builds the binaries a run needs into dir.
func Build(dir string) error {
	cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/slackline/slackline/cmd/slackline-coordinator",
		"github.com/slackline/slackline/cmd/slackline-agent", "github.com/slackline/slackline/cmd/slackline-supervisor",
		"github.com/slackline/slackline/internal/netbench/netload")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build binaries: %w", err)
	}
	return nil
}

const (
	serverPort = 7100
	sinkPort   = 7101
)

// Run runs the scenario once in mode.
func Run(ctx context.Context, o Options, mode Mode) (res Result, err error) {
	o.defaults()
	res.Mode = mode
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	work, err := os.MkdirTemp("", "slackline-netbench-")
	if err != nil {
		return res, err
	}
	cleanups = append(cleanups, func() {
		if err == nil {
			os.RemoveAll(work)
		}
	})
	// Tasks run as nobody: their binary lives where nobody can reach it.
	if err := os.Chmod(work, 0o755); err != nil {
		return res, err
	}
	netload := filepath.Join(work, "netload")
	if o.Netload == "" {
		o.Netload = filepath.Join(o.BinDir, "netload")
	}
	if err := copyFile(o.Netload, netload, 0o755); err != nil {
		return res, err
	}

	pair, err := nettest.NewPair(nettest.Options{NodeInHost: true, PeerIngressMbps: o.LinkMbps, PeerQueueBytes: o.QueueBytes, PeerBurstBytes: o.BurstBytes})
	if err != nil {
		return res, err
	}
	cleanups = append(cleanups, func() { pair.Close() })
	sinkLn, err := pair.Listen(sinkPort)
	if err != nil {
		return res, err
	}
	cleanups = append(cleanups, func() { sinkLn.Close() })
	sink := nettest.ServeSink(sinkLn)

	coordAddr, agentAddr := freeAddr(), freeAddr()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	root := "slackline-netbench-" + hex.EncodeToString(b)
	cleanups = append(cleanups, func() {
		if err := cgrouptest.RemoveRoot(root); err != nil {
			o.Logf("%v", err)
		}
	})
	start := func(name string, args ...string) (*exec.Cmd, error) {
		cmd := exec.Command(filepath.Join(o.BinDir, name), args...)
		logf, err := os.Create(filepath.Join(work, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cleanups = append(cleanups, func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logf.Close()
		})
		return cmd, nil
	}
	// --insecure: a loopback cluster of the benchmark's own, no credentials.
	if _, err := start("slackline-coordinator", "--listen", coordAddr, "--work-dir", filepath.Join(work, "coordinator"), "--insecure"); err != nil {
		return res, err
	}
	agentArgs := []string{"--coordinator", "http://" + coordAddr, "--listen", agentAddr, "--hostname", "netbench",
		"--work-dir", filepath.Join(work, "agent"), "--cgroup-root", root,
		"--resources", fmt.Sprintf("cpus:2;mem:2048;bandwidth:%g", o.LinkMbps),
		"--monitor-interval", "100ms", "--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--insecure"}
	switch {
	case mode == NoQoS:
		agentArgs = append(agentArgs, "--network-interfaces", "none", "--qos-controller", "noop")
	case mode == QoS && o.PaceMbps > 0:
		agentArgs = append(agentArgs, "--network-interfaces", pair.NodeDev, "--qos-controller", "noop",
			"--estimator", "fixed", "--fixed-revocable", fmt.Sprintf("cpus:1;bandwidth:%g", o.PaceMbps))
	default:
		agentArgs = append(agentArgs, "--network-interfaces", pair.NodeDev, "--qos-controller", "network")
	}
	if _, err := start("slackline-agent", agentArgs...); err != nil {
		return res, err
	}

	// The framework: the server on a regular offer; then (not alone) the
	// bulk sender, as in Mesos with its cpus and bandwidth from a revocable
	// offer and its memory from a regular one of the same agent, accepted
	// together.
	serverAddr := net.JoinHostPort(pair.NodeIP, strconv.Itoa(serverPort))
	var mu sync.Mutex
	launchedServer, launchedBulk, wantBulk := false, false, false
	var heldRegular, heldRevocable *slacklinev1.Offer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + coordAddr, Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "netbench",
			Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES}}})
	if err != nil {
		return res, err
	}
	go fw.Run(ctx, frameworkapi.HandlerFuncs{OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
		mu.Lock()
		defer mu.Unlock()
		hold := func(held **slacklinev1.Offer, off *slacklinev1.Offer) {
			if *held != nil {
				_ = c.Decline(ctx, []string{(*held).GetId()}, frameworkapi.Filters(0))
			}
			*held = off
		}
		for _, off := range offers {
			have, revocable, err := frameworkapi.OfferResources(off)
			switch {
			case err == nil && !revocable && !launchedServer:
				launchedServer = true
				task := frameworkapi.NewTask("server", "server", off, resources.MustParse("cpus:0.5;mem:64"),
					&slacklinev1.CommandInfo{Value: netload, Arguments: []string{netload, "serve", serverAddr}})
				_ = c.Launch(ctx, []string{off.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(0))
			case err == nil && !revocable && wantBulk && !launchedBulk && have.Mem() >= 64:
				hold(&heldRegular, off)
			case err == nil && revocable && wantBulk && !launchedBulk && have.Bandwidth() > 0 && have.CPUs() >= 0.2:
				hold(&heldRevocable, off)
			default:
				_ = c.Decline(ctx, []string{off.GetId()}, frameworkapi.Filters(1))
			}
		}
		if launchedBulk || heldRegular == nil || heldRevocable == nil {
			return
		}
		launchedBulk = true
		have, _, _ := frameworkapi.OfferResources(heldRevocable)
		rev := resources.New(0.2, 0, 0).With(resources.Bandwidth, have.Bandwidth())
		task := frameworkapi.NewTask("bulk", "bulk", heldRevocable, rev, &slacklinev1.CommandInfo{Value: netload,
			Arguments: []string{netload, "send", net.JoinHostPort(pair.PeerIP, strconv.Itoa(sinkPort)), "reno"}})
		role := frameworkapi.OfferRole(heldRevocable)
		task.Resources = append(rev.Proto(role, resources.Revocable), resources.New(0, 64, 0).Proto(role, resources.Regular)...)
		if o.RevocableCPU {
			// The agent made the subtree when it started (it has offered).
			cgrouptest.Unthrottle(root + "-revocable")
		}
		o.Logf("launching the bulk sender on revocable %s", rev)
		_ = c.Launch(ctx, []string{heldRevocable.GetId(), heldRegular.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(3600))
	}})

	// The client, in the peer namespace, once the server answers.
	var conn net.Conn
	deadline := time.Now().Add(60 * time.Second)
	for conn == nil {
		_ = nettest.InNetns(pair.PeerNetns, func() error {
			var err error
			conn, err = net.DialTimeout("tcp4", serverAddr, time.Second)
			return err
		})
		if conn == nil {
			if time.Now().After(deadline) {
				return res, fmt.Errorf("the server task did not come up (logs in %s)", work)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	conn.Close()
	o.Logf("server up; loading it at %.0f requests/s", o.Rate)
	type sample struct {
		at      time.Time
		latency time.Duration
	}
	var latMu sync.Mutex
	var samples []sample
	clientErr := make(chan error, 1)
	go func() {
		clientErr <- nettest.InNetns(pair.PeerNetns, func() error {
			return nettest.RequestResponseEach(ctx, nettest.RR{Addr: serverAddr, Rate: o.Rate, Conns: o.Conns,
				RequestBytes: o.RequestBytes, ResponseBytes: o.ResponseBytes}, func(due time.Time, latency time.Duration) {
				latMu.Lock()
				samples = append(samples, sample{due, latency})
				latMu.Unlock()
			})
		})
	}()

	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-clientErr:
			return fmt.Errorf("client: %w", err)
		case <-time.After(d):
			return nil
		}
	}
	if err := sleep(o.Warmup); err != nil {
		return res, err
	}
	if mode != Alone {
		mu.Lock()
		wantBulk = true
		mu.Unlock()
		_ = fw.Revive(ctx)
		o.Logf("waiting for revocable bandwidth to launch the bulk sender")
		for sink.Bytes() == 0 {
			if time.Now().After(deadline.Add(60 * time.Second)) {
				return res, fmt.Errorf("the bulk sender did not start (logs in %s)", work)
			}
			if err := sleep(200 * time.Millisecond); err != nil {
				return res, err
			}
		}
		o.Logf("bulk sender running; settling for %v", o.Settle)
		if err := sleep(o.Settle); err != nil {
			return res, err
		}
	}
	from, bytes0 := time.Now(), sink.Bytes()
	o.Logf("measuring for %v", o.Measure)
	node := slacklinev1connect.NewNodeServiceClient(server.NewClient(), "http://"+agentAddr)
	for end := from.Add(o.Measure); time.Now().Before(end); {
		if err := sleep(min(time.Second, time.Until(end))); err != nil {
			return res, err
		}
		o.Logf("%s", usageLine(ctx, node))
	}
	to, bytes1 := time.Now(), sink.Bytes()
	latMu.Lock()
	for _, s := range samples {
		if !s.at.Before(from) && s.at.Before(to) {
			res.Latencies = append(res.Latencies, s.latency)
		}
	}
	latMu.Unlock()
	if len(res.Latencies) == 0 {
		return res, errors.New("no exchange completed in the window")
	}
	secs := to.Sub(from).Seconds()
	res.P50, res.P99 = nettest.Quantile(res.Latencies, 0.50), nettest.Quantile(res.Latencies, 0.99)
	res.GuaranteedMbps = float64(len(res.Latencies)) * float64(o.ResponseBytes) * 8 / 1e6 / secs
	res.RevocableMbps = float64(bytes1-bytes0) * 8 / 1e6 / secs
	res.LeftMbps = o.LinkMbps*1448/1514 - res.GuaranteedMbps
	if resp, err := node.GetCorrections(ctx, connect.NewRequest(&slacklinev1.GetCorrectionsRequest{})); err == nil {
		res.Corrections = resp.Msg.GetCorrections()
		for _, c := range res.Corrections[max(0, len(res.Corrections)-6):] {
			o.Logf("correction: %s to %.0f Mbit/s: %s", c.GetKind(), c.GetBandwidthLimitMbps(), c.GetReason())
		}
	}
	return res, nil
}

// usageLine summarizes the agent's view: each task's egress and round
// trips, the estimate and the pace.
func usageLine(ctx context.Context, node slacklinev1connect.NodeServiceClient) string {
	resp, err := node.GetUsage(ctx, connect.NewRequest(&slacklinev1.GetUsageRequest{}))
	if err != nil {
		return err.Error()
	}
	line := ""
	for _, u := range resp.Msg.GetUsage() {
		st := u.GetStatistics()
		line += fmt.Sprintf("%s %.0f Mbit/s rtt p99 %.2f ms; ", u.GetTaskId(), st.GetNetTxMbps(), st.GetTcp().GetRttP99Seconds()*1000)
	}
	if n := resp.Msg.GetNetwork(); n != nil {
		line += fmt.Sprintf("link %.0f Mbit/s, estimate %.0f, QoS limit %.0f, pace %.0f", resp.Msg.GetNode().GetNetTxMbps(),
			n.GetRevocableEstimateMbps(), n.GetQosLimitMbps(), n.GetRevocablePaceMbps())
	}
	return line
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("listen on loopback: %v", err))
	}
	defer ln.Close()
	return ln.Addr().String()
}

func copyFile(from, to string, mode os.FileMode) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, mode)
}
