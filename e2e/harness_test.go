package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/agent"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/server"
)

// binDir holds the binaries built once for all tests.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

// EnvBinDir names a directory of prebuilt binaries (cmd/... and
// examples/...) that the tests use instead of building their own: the
// several-hosts test needs static ones on the repository's share, which its
// guests run (make test-vm-cluster).
const EnvBinDir = "SLACKLINE_E2E_BIN_DIR"

func runMain(m *testing.M) int {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		abs, err := filepath.Abs(dir)
		if err == nil {
			_, err = os.Stat(filepath.Join(abs, "slackline-agent"))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%s: no slackline-agent there: %v\n", EnvBinDir, dir, err)
			return 1
		}
		binDir = abs
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "slackline-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command("go", "build", "-o", dir+"/", "../cmd/...", "../examples/...")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		return 1
	}
	binDir = dir
	// The tests' processes (coordinators, agents, frameworks, tasks) run
	// under a cgroup of the highest CPU weight, so that they pass beside
	// other CPU-bound work (cgrouptest.EnterPriority).
	if os.Geteuid() == 0 {
		leave, err := cgrouptest.EnterPriority(fmt.Sprintf("slackline-e2e-%d", os.Getpid()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "cgroup of the tests:", err)
			return 1
		}
		defer leave()
	}
	return m.Run()
}

// process is a started binary whose output is kept for failure reports.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start starts a binary of binDir with SLACKLINE_INSECURE=1: the e2e tests
// run their own loopback clusters, most without credentials, which the
// coordinator and the agent refuse by default (tasks are local users). The
// tests of trust pass credentials, which apply whatever the variable says;
// startStrict leaves it out, to test the defaults themselves.
func start(t testing.TB, name string, args ...string) *process {
	t.Helper()
	return startWithEnv(t, append(strictEnv(), auth.EnvInsecure+"=1"), name, args...)
}

// startStrict starts a binary as an operator would, without
// SLACKLINE_INSECURE.
func startStrict(t testing.TB, name string, args ...string) *process {
	t.Helper()
	return startWithEnv(t, strictEnv(), name, args...)
}

// strictEnv is the test's environment without SLACKLINE_INSECURE.
func strictEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, auth.EnvInsecure+"=") })
}

func startWithEnv(t testing.TB, env []string, name string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = env
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- output of %s %s:\n%s", name, strings.Join(args, " "), out.String())
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill sends SIGKILL and waits.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// taskVisibleDir returns a new directory that tasks can search and read,
// removed when the test ends. Tasks run as users of their own, so it is
// mode 0755; and it is outside /tmp, /var/tmp and /dev/shm, which are a
// private tmpfs in each task's mount namespace (agent/containerizer), so it
// is not under t.TempDir either.
func taskVisibleDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "slackline-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// testAgentOptions are the options of an in-process agent under test:
// slackline-agent's defaults, with its cgroups under root (removed at the
// test's end, with its fresh work dir), a free loopback NodeService without
// credentials, tasks supervised by the built slackline-supervisor and killed
// 100 ms after SIGTERM, the test process left in its cgroup, and neither
// eBPF, network QoS, an oversubscription estimate nor QoS corrections
// (tests of those run the binary, or turn them on).
func testAgentOptions(t testing.TB, root, coordinatorURL string, logger *slog.Logger) agent.Options {
	t.Helper()
	o := agent.DefaultOptions()
	o.Coordinator, o.Listen, o.WorkDir, o.CgroupRoot = coordinatorURL, freeAddr(t), cgrouptest.WorkDir(t, root), root
	o.Insecure, o.IsolateAgent = true, false
	o.SupervisorCommand = []string{filepath.Join(binDir, "slackline-supervisor")}
	o.KillGracePeriod = 100 * time.Millisecond
	o.EBPF, o.NetworkInterfaces = false, []string{"none"}
	o.Estimator, o.QoSControllers = "noop", []string{"noop"}
	o.Logger = logger
	return o
}

// coordinatorArgs are flags for a coordinator with short timers. The agent
// timeout is not among them: an agent restarted by a test takes 3-6 s to
// register again on a loaded machine, and no test here waits for an agent
// to become unreachable (those that do pass their own).
// EnvAgentHeartbeat overrides the coordinators' agent heartbeat interval
// (default 200ms): in an emulated guest (docs/vm.md), ten times slower, an
// agent missed 200 ms heartbeats for 0.7 s every few seconds, registered
// again each time, and launches sent meanwhile were LOST.
const EnvAgentHeartbeat = "SLACKLINE_E2E_AGENT_HEARTBEAT"

func coordinatorArgs(addr, workDir string) []string {
	heartbeat := "200ms"
	if v := os.Getenv(EnvAgentHeartbeat); v != "" {
		heartbeat = v
	}
	return []string{"--listen", addr, "--work-dir", workDir, "--agent-heartbeat-interval", heartbeat,
		"--agent-timeout", "60s", "--framework-heartbeat-interval", "1s", "--allocation-interval", "200ms"}
}

func operator(addr string) slacklinev1connect.OperatorServiceClient {
	return slacklinev1connect.NewOperatorServiceClient(server.NewClient(), "http://"+addr)
}

// revocableStartTimeout bounds the wait for revocable tasks to run. They
// start at idle CPU priority (cpu.idle), supervisor included: idle beside
// the test's own processes only (cgrouptest.EnterPriority), they start in
// a second or two beside two CPU hogs, as on a quiet machine; without that
// cgroup (not root) a busy machine's other work delays them by tens of
// seconds, which the bound leaves room for.
const revocableStartTimeout = 3 * time.Minute

// EnvTimeoutScale multiplies the bounds of the tests whose scene an
// emulated guest slows by more than the bounds allow (a number >= 1,
// default 1; scaled says which). It is for the emulator only: under TCG a
// revocable dd's zero-fill of 1.5 GiB took 48-97 s of system time in an
// idle 6.1 guest (well under a second on the host), and a guaranteed
// stress-ng "hot working set" of 200 MiB, a pass a second, kept 1.2
// emulated CPUs busy, starving the revocable launches beside it
// (docs/vm.md, "e2e in a guest").
const EnvTimeoutScale = "SLACKLINE_E2E_TIMEOUT_SCALE"

// scaled is d times EnvTimeoutScale (d when unset).
func scaled(t testing.TB, d time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(EnvTimeoutScale)
	if v == "" {
		return d
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || f > 1000 {
		t.Fatalf("%s=%q: want a number from 1 to 1000", EnvTimeoutScale, v)
	}
	return time.Duration(float64(d) * f)
}

// eventually polls cond every 100 ms until it returns "" or timeout passes;
// it fails with the last reason cond gave.
func eventually(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("condition not met within %v: %s", timeout, last)
}

func getState(t testing.TB, op slacklinev1connect.OperatorServiceClient) (*slacklinev1.GetStateResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := op.GetState(ctx, connect.NewRequest(&slacklinev1.GetStateRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// runningTasks counts RUNNING tasks per framework name.
func runningTasks(state *slacklinev1.GetStateResponse) map[string]int {
	names := map[string]string{}
	for _, fw := range state.GetFrameworks() {
		names[fw.GetInfo().GetId()] = fw.GetInfo().GetName()
	}
	out := map[string]int{}
	for _, task := range state.GetTasks() {
		if task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
			out[names[task.GetFrameworkId()]]++
		}
	}
	return out
}
