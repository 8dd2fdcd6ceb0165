package e2e

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/resources"
)

// EnvVMCluster turns TestVMCluster on: it boots QEMU guests (scripts/vm),
// which takes minutes and the assets of scripts/vm/setup.
const EnvVMCluster = "SLACKLINE_VM_CLUSTER"

// vmGuest is one guest of the several-hosts test: a pure cgroup v2 host of
// its own kernel, on the private link.
type vmGuest struct {
	name, kernel, address string
	run                   *exec.Cmd // scripts/vm/run
	out                   *syncBuffer
	done                  chan struct{}
	sinkFile              string // the guest's TCP sink records (scripts/vm/cluster-node)
}

// The private link's addresses and the sinks' ports (scripts/vm/cluster-node).
const (
	vmLinkPrefix     = "192.168.76."
	vmSinkGuaranteed = 7001
	vmSinkRevocable  = 7002
	// An emulated guest on a host at load 50-80 stalled for over 20 s:
	// both agents became unreachable and their tasks LOST before the kill.
	vmAgentTimeout      = 60 * time.Second
	vmRevocableMbps     = 8.0 // --fixed-revocable bandwidth: the pace of revocable egress
	vmGuaranteedBytes   = 16 << 20
	vmRevocableBytes    = 8 << 20
	vmClusterStartLimit = 5 * time.Minute // boot and agent start under TCG on a loaded machine
)

// TestVMCluster is the several-hosts test (#25 item 4): the coordinator on
// this host with real TLS (the credentials `slacklinectl credentials init`
// writes), and agents in two QEMU guests with different hostnames, their
// own kernels (Debian's 6.1 and 6.12) and pure cgroup v2, reaching the
// coordinator over QEMU's user network (10.0.2.2 is this host's loopback)
// and each other over a private link (a QEMU multicast socket). The agents
// are the host-built static binary. A framework runs a task on every guest;
// a guaranteed sender on vm-a shows what the link carries, and a
// revocable sender is paced by vm-a's network QoS to its allocation; then
// vm-a's QEMU is SIGKILLed mid-run, its task becomes LOST and is
// relaunched on vm-b.
//
// Run it with `make test-vm-cluster` (root, scripts/vm/setup's assets).
func TestVMCluster(t *testing.T) {
	if os.Getenv(EnvVMCluster) != "1" {
		t.Skipf("boots QEMU guests: run with %s=1 and %s=<repository>/bin holding static binaries (make test-vm-cluster)", EnvVMCluster, EnvBinDir)
	}
	privileged.Require(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// The guests see the repository only: the agent and the credentials
	// must be in it.
	if !strings.HasPrefix(binDir, repo+"/") {
		t.Fatalf("%s=%s is not inside the repository %s, which is all the guests see (make test-vm-cluster builds bin/)", EnvBinDir, binDir, repo)
	}
	agentBin := filepath.Join(binDir, "slackline-agent")
	if err := requireStatic(agentBin); err != nil {
		t.Fatalf("%v: the guests have another C library; build with CGO_ENABLED=0 (make test-vm-cluster does)", err)
	}
	runDir, err := os.MkdirTemp(filepath.Join(repo, ".run"), "vm-cluster-")
	if os.IsNotExist(err) {
		if err = os.MkdirAll(filepath.Join(repo, ".run"), 0o755); err == nil {
			runDir, err = os.MkdirTemp(filepath.Join(repo, ".run"), "vm-cluster-")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })

	guests := []*vmGuest{
		{name: "vm-a", kernel: "6.1", address: vmLinkPrefix + "2"},
		{name: "vm-b", kernel: "6.12", address: vmLinkPrefix + "3"},
	}
	names := make([]string, len(guests))
	for i, g := range guests {
		names[i] = g.name
	}

	// The coordinator, as an operator starts it, on loopback: the guests
	// reach it at 10.0.2.2, which its certificate names.
	s := &secureCluster{dir: filepath.Join(runDir, "credentials"), addr: freeAddr(t)}
	s.url = "https://" + s.addr
	out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "credentials", "init", s.dir,
		"--hosts", "127.0.0.1,localhost,10.0.2.2", "--agents", strings.Join(names, ","),
		"--frameworks", "batch", "--operators", "admin").CombinedOutput()
	if err != nil {
		t.Fatalf("credentials init: %v\n%s", err, out)
	}
	args := append(coordinatorArgs(s.addr, t.TempDir()),
		"--agent-heartbeat-interval", "1s", "--agent-timeout", vmAgentTimeout.String(),
		"--tls-cert", s.file("coordinator.crt"), "--tls-key", s.file("coordinator.key"),
		"--client-ca", s.file("ca.crt"), "--client-crl", s.file("crl.pem"), "--authz", s.file("authz.yaml"),
		"--agent-client-cert", s.file("coordinator-client.crt"), "--agent-client-key", s.file("coordinator-client.key"))
	s.coordinator = startStrict(t, "slackline-coordinator", args...)
	eventually(t, startTimeout, func() string { _, err := getState(t, s.operator(t, "admin")); return errString(err) })
	_, port, _ := strings.Cut(s.addr, ":")

	// The guests, on a private link of their own (a random multicast port,
	// so that two runs never share a segment).
	linkPort := 40000 + rand.IntN(20000)
	for _, g := range guests {
		g.sinkFile = filepath.Join(runDir, g.name+".sink")
		agentArgs := []string{agentBin, "--coordinator", "https://10.0.2.2:" + port,
			"--listen", g.address + ":5051", "--hostname", g.name,
			"--ca", s.file("ca.crt"), "--cert", s.file("agent-" + g.name + ".crt"), "--key", s.file("agent-" + g.name + ".key"),
			"--client-crl", s.file("crl.pem"), "--authz", s.file("authz.yaml"),
			"--resources", "cpus:2;mem:512;bandwidth:1000", "--kill-grace-period", "1s",
			"--network-interfaces", "eth1", "--estimator", "fixed",
			"--fixed-revocable", fmt.Sprintf("cpus:1;mem:64;bandwidth:%g", vmRevocableMbps)}
		g.start(t, repo, linkPort, agentArgs)
	}
	op := s.operator(t, "admin")
	agentIDs := map[string]string{} // hostname -> agent id
	eventuallyVM(t, guests, vmClusterStartLimit, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		for _, a := range state.GetAgents() {
			if a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
				agentIDs[a.GetHostname()] = a.GetId()
			}
		}
		for _, n := range names {
			if agentIDs[n] == "" {
				return fmt.Sprintf("agent %s not active (active: %v)", n, agentIDs)
			}
		}
		return ""
	})

	fw := newVMFramework(t, s)

	t.Run("a task on every guest", func(t *testing.T) {
		for _, g := range guests {
			fw.want(vmTask{id: "sleeper-" + g.name, host: g.name, needs: "cpus:0.5;mem:32", cmd: "exec sleep 3600"})
		}
		eventuallyVM(t, guests, 3*time.Minute, func() string {
			for _, g := range guests {
				if st := fw.state("sleeper-" + g.name); st != slacklinev1.TaskState_TASK_STATE_RUNNING {
					return fmt.Sprintf("task sleeper-%s is %v", g.name, st)
				}
			}
			return ""
		})
	})

	t.Run("network QoS paces revocable egress between guests", func(t *testing.T) {
		a, b := guests[0], guests[1]
		send := func(port, bytes int) string {
			return fmt.Sprintf("exec bash -c 'head -c %d /dev/zero >/dev/tcp/%s/%d'", bytes, b.address, port)
		}
		// Unpaced first (a guaranteed task: never shaped), alone on the
		// link, so that its goodput is what the link carries.
		fw.want(vmTask{id: "guaranteed-sender", host: a.name, needs: "cpus:0.5;mem:32", cmd: send(vmSinkGuaranteed, vmGuaranteedBytes)})
		guaranteed := waitSink(t, guests, b, vmSinkGuaranteed)
		fw.want(vmTask{id: "revocable-sender", host: a.name, revocable: true,
			needs: fmt.Sprintf("cpus:0.2;mem:32;bandwidth:%g", vmRevocableMbps), cmd: send(vmSinkRevocable, vmRevocableBytes)})
		revocable := waitSink(t, guests, b, vmSinkRevocable)
		t.Logf("vm-a -> vm-b over the emulated link: guaranteed (unpaced) %d bytes at %.1f Mbit/s; revocable (allocated %g Mbit/s) %d bytes at %.1f Mbit/s",
			guaranteed.bytes, guaranteed.mbps(), vmRevocableMbps, revocable.bytes, revocable.mbps())
		if guaranteed.bytes != vmGuaranteedBytes || revocable.bytes != vmRevocableBytes {
			t.Fatalf("the sink received %d and %d bytes, want %d and %d", guaranteed.bytes, revocable.bytes, vmGuaranteedBytes, vmRevocableBytes)
		}
		// The allocation counts Ethernet and IP headers, so the goodput
		// stays below it; 5% for the sink's timing from its first byte.
		if revocable.mbps() > vmRevocableMbps*1.05 {
			t.Errorf("revocable egress got %.1f Mbit/s of goodput, over its %g Mbit/s allocation: not paced", revocable.mbps(), vmRevocableMbps)
		}
		// Pacing, not a slow link: the link carried twice as much.
		if guaranteed.mbps() < 2*vmRevocableMbps {
			t.Errorf("the link carried only %.1f Mbit/s unpaced: it cannot tell pacing to %g Mbit/s from a slow link", guaranteed.mbps(), vmRevocableMbps)
		}
	})

	t.Run("a killed guest's task is LOST and relaunched on another", func(t *testing.T) {
		victim, survivor := guests[0], guests[1]
		if st := fw.state("sleeper-" + victim.name); st != slacklinev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("sleeper-%s is %v before the kill", victim.name, st)
		}
		qemu := victim.qemuPID(t)
		if err := syscall.Kill(qemu, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL QEMU %d of %s: %v", qemu, victim.name, err)
		}
		<-victim.done
		t.Logf("%s's QEMU (pid %d) SIGKILLed", victim.name, qemu)
		eventuallyVM(t, []*vmGuest{survivor}, vmAgentTimeout+2*time.Minute, func() string {
			if st := fw.state("sleeper-" + victim.name); st != slacklinev1.TaskState_TASK_STATE_LOST {
				return fmt.Sprintf("sleeper-%s is %v, want LOST", victim.name, st)
			}
			return ""
		})
		// The framework relaunches it elsewhere, as any framework would.
		fw.want(vmTask{id: "relaunched-" + victim.name, notHost: victim.name, needs: "cpus:0.5;mem:32", cmd: "exec sleep 3600"})
		eventuallyVM(t, []*vmGuest{survivor}, 3*time.Minute, func() string {
			if st := fw.state("relaunched-" + victim.name); st != slacklinev1.TaskState_TASK_STATE_RUNNING {
				return fmt.Sprintf("relaunched-%s is %v", victim.name, st)
			}
			return ""
		})
		if host := fw.host("relaunched-" + victim.name); host != survivor.name {
			t.Fatalf("relaunched on %q, want %s", host, survivor.name)
		}
		if st := fw.state("sleeper-" + survivor.name); st != slacklinev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("sleeper-%s is %v: the survivor's task did not survive", survivor.name, st)
		}
		state, err := getState(t, op)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range state.GetAgents() {
			if a.GetHostname() == victim.name && a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
				t.Fatalf("agent %s is still ACTIVE after its host died", victim.name)
			}
		}
	})
}

// requireStatic fails for a dynamically linked executable.
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

// start boots the guest: scripts/vm/run with scripts/vm/cluster-node,
// which starts the sink and runs the agent.
func (g *vmGuest) start(t *testing.T, repo string, linkPort int, agentArgs []string) {
	t.Helper()
	args := []string{"--kernel", g.kernel, "--hostname", g.name, "--cpus", "1", "--memory", "1024",
		"--timeout", "1800", "--net-socket", strconv.Itoa(linkPort), "--net-address", g.address + "/24",
		"--", "scripts/vm/cluster-node", g.sinkFile, "--"}
	g.run = exec.Command(filepath.Join(repo, "scripts/vm/run"), append(args, agentArgs...)...)
	g.run.Dir = repo
	g.out = &syncBuffer{}
	g.run.Stdout, g.run.Stderr = g.out, g.out
	// scripts/vm/run stops its guest on SIGTERM, so a test killed stops them.
	g.run.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := g.run.Start(); err != nil {
		t.Fatalf("start guest %s: %v", g.name, err)
	}
	g.done = make(chan struct{})
	go func() { _ = g.run.Wait(); close(g.done) }()
	t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			_ = g.run.Process.Signal(syscall.SIGTERM) // it stops QEMU and removes its files
			select {
			case <-g.done:
			case <-time.After(60 * time.Second):
				if pid, err := g.findQEMU(); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				_ = g.run.Process.Kill()
				<-g.done
			}
		}
		if t.Failed() {
			t.Logf("--- console of guest %s (kernel %s):\n%s", g.name, g.kernel, g.out.String())
		}
	})
}

func (g *vmGuest) exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// qemuPID is the guest's QEMU process (scripts/vm/run -> timeout -> QEMU).
func (g *vmGuest) qemuPID(t *testing.T) int {
	t.Helper()
	pid, err := g.findQEMU()
	if err != nil {
		t.Fatalf("guest %s: %v", g.name, err)
	}
	return pid
}

func (g *vmGuest) findQEMU() (int, error) {
	parents := map[int]int{}
	comms := map[int]string{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		parents[pid], comms[pid] = ppid, s[open+1:end]
	}
	root := g.run.Process.Pid
	for pid, comm := range comms {
		if !strings.HasPrefix(comm, "qemu-system") {
			continue
		}
		for p := parents[pid]; p > 1; p = parents[p] {
			if p == root {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no QEMU process under scripts/vm/run (pid %d)", root)
}

// eventuallyVM is eventually that also fails at once, with the reason,
// when a guest that should be running has stopped.
func eventuallyVM(t *testing.T, guests []*vmGuest, timeout time.Duration, cond func() string) {
	t.Helper()
	eventually(t, timeout, func() string {
		for _, g := range guests {
			if g.exited() {
				t.Fatalf("guest %s stopped (scripts/vm/run: %v)", g.name, g.run.ProcessState)
			}
		}
		return cond()
	})
}

// sinkRecord is one connection a guest's sink received.
type sinkRecord struct {
	bytes   int
	seconds float64
}

func (r sinkRecord) mbps() float64 { return float64(r.bytes) * 8 / r.seconds / 1e6 }

// waitSink waits for the first connection the guest's sink recorded on
// port.
func waitSink(t *testing.T, guests []*vmGuest, g *vmGuest, port int) sinkRecord {
	t.Helper()
	var rec sinkRecord
	eventuallyVM(t, guests, 3*time.Minute, func() string {
		f, err := os.Open(g.sinkFile)
		if err != nil {
			return err.Error()
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var p int
			var peer string
			if n, _ := fmt.Sscanf(sc.Text(), "sink %d %d %g %s", &p, &rec.bytes, &rec.seconds, &peer); n == 4 && p == port && rec.seconds > 0 {
				return ""
			}
		}
		return fmt.Sprintf("no connection recorded on %s:%d yet", g.name, port)
	})
	return rec
}

// vmTask is a task the test framework launches: on the guest named host
// (or on any but notHost), from a regular or a revocable offer.
type vmTask struct {
	id, host, notHost string
	revocable         bool
	needs, cmd        string
}

// vmFramework launches the tasks it is given on offers that match them and
// records their states.
type vmFramework struct {
	t       *testing.T
	mu      sync.Mutex
	pending []vmTask
	states  map[string]slacklinev1.TaskState
	hosts   map[string]string
}

func newVMFramework(t *testing.T, s *secureCluster) *vmFramework {
	f := &vmFramework{t: t, states: map[string]slacklinev1.TaskState{}, hosts: map[string]string{}}
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- the framework's log:\n%s", logs.String())
		}
	})
	// The principal batch may register in the role batch only (authz.yaml
	// of credentials init).
	c, err := frameworkapi.New(frameworkapi.Config{Coordinator: s.url, CAFile: s.file("ca.crt"), TokenFile: s.file("batch.token"),
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Framework: &slacklinev1.FrameworkInfo{Name: "vm-cluster", Roles: []string{"batch"}, FailoverTimeoutSeconds: 3600,
			Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx, frameworkapi.HandlerFuncs{OffersFunc: f.offers, UpdateFunc: f.update})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func (f *vmFramework) want(task vmTask) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, task)
}

func (f *vmFramework) state(id string) slacklinev1.TaskState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.states[id]
}

func (f *vmFramework) host(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hosts[id]
}

func (f *vmFramework) offers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range offers {
		have, revocable, err := frameworkapi.OfferResources(o)
		launched := false
		for i, task := range f.pending {
			needs := resources.MustParse(task.needs)
			if err != nil || task.revocable != revocable || (task.host != "" && o.GetHostname() != task.host) ||
				o.GetHostname() == task.notHost || !have.Contains(needs) {
				continue
			}
			info := frameworkapi.NewTask(task.id, task.id, o, needs, &slacklinev1.CommandInfo{Value: task.cmd, Shell: true})
			if err := c.Launch(ctx, []string{o.GetId()}, []*slacklinev1.TaskInfo{info}, frameworkapi.Filters(0)); err != nil {
				f.t.Logf("launch %s on %s: %v", task.id, o.GetHostname(), err)
				break
			}
			f.pending = append(f.pending[:i:i], f.pending[i+1:]...)
			f.hosts[task.id], f.states[task.id] = o.GetHostname(), slacklinev1.TaskState_TASK_STATE_STAGING
			launched = true
			break
		}
		if !launched {
			_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(1))
		}
	}
}

func (f *vmFramework) update(_ context.Context, _ *frameworkapi.Client, st *slacklinev1.TaskStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[st.GetTaskId()] = st.GetState()
	if st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING && st.GetState() != slacklinev1.TaskState_TASK_STATE_STARTING {
		f.t.Logf("task %s on %s: %v %v %q", st.GetTaskId(), f.hosts[st.GetTaskId()], st.GetState(), st.GetReason(), st.GetMessage())
	}
}
