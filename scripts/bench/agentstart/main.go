// Command agentstart measures the node agent's start (run as root): the
// time from starting the real agent binary to its "registered" log line
// (the coordinator accepted it), and to its "eBPF monitor ready" line (the
// eBPF programs, loaded after registration, are verified and attached),
// over --starts starts one after the other against a real coordinator on
// loopback, each with a fresh work directory and stopped with SIGTERM
// before the next.
//
//	sudo go run ./scripts/bench/agentstart --starts 20
//	sudo go run ./scripts/bench/agentstart --agent /path/to/other/slackline-agent   # compare builds
//	make build && go build -o bin/ ./scripts/bench/agentstart &&
//	  sudo scripts/vm/run --kernel 6.1 -- bin/agentstart --bin bin --starts 10  # in a test guest
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/cgrouptest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench agentstart:", err)
		os.Exit(1)
	}
}

func run() error {
	starts := flag.Int("starts", 20, "agent starts measured")
	agentBin := flag.String("agent", "", "agent binary to measure (default: built from this tree, or --bin's)")
	binDir := flag.String("bin", "", "directory with prebuilt slackline-coordinator, slackline-agent and slackline-supervisor (default: build them; a host without Go, such as a test guest, needs it)")
	timeout := flag.Duration("timeout", 60*time.Second, "longest wait for one start's log lines")
	flag.Parse()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (the agent creates cgroups and loads eBPF programs)")
	}
	if *starts < 1 {
		return fmt.Errorf("--starts must be at least 1")
	}
	dir, err := os.MkdirTemp("", "slackline-bench-agentstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := *binDir
	if bin == "" {
		bin = dir
		pkgs := []string{"./cmd/slackline-coordinator"}
		if *agentBin == "" {
			pkgs = append(pkgs, "./cmd/slackline-agent", "./cmd/slackline-supervisor")
		}
		if err := benchutil.Build(dir, pkgs...); err != nil {
			return err
		}
	}
	if *agentBin == "" {
		*agentBin = filepath.Join(bin, "slackline-agent")
	}
	coordAddr := benchutil.FreeAddr()
	coord := exec.Command(filepath.Join(bin, "slackline-coordinator"), "--listen", coordAddr, "--work-dir", filepath.Join(dir, "coord"),
		"--log-level", "error", "--insecure") // a loopback cluster of the benchmark's own, no credentials
	coord.Stderr = os.Stderr
	coord.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := coord.Start(); err != nil {
		return err
	}
	defer func() { _ = coord.Process.Kill(); _ = coord.Wait() }()
	root := fmt.Sprintf("slackline-bench-start-%d", os.Getpid())
	defer cgrouptest.RemoveRoot(root)

	load0 := loadavg()
	var registered, ready []time.Duration
	for i := range *starts {
		reg, rdy, err := startOnce(*agentBin, coordAddr, filepath.Join(dir, fmt.Sprintf("agent-%d", i)), root, *timeout)
		if err != nil {
			return fmt.Errorf("start %d: %w", i+1, err)
		}
		registered = append(registered, reg)
		if rdy > 0 {
			ready = append(ready, rdy)
		}
	}
	ms := func(ds []time.Duration) string {
		return fmt.Sprintf("p50 %v  p90 %v  max %v", benchutil.Percentile(ds, 0.5, time.Millisecond),
			benchutil.Percentile(ds, 0.9, time.Millisecond), benchutil.Percentile(ds, 1, time.Millisecond))
	}
	fmt.Printf("agent start to registered, %d starts: %s  (load average %s -> %s)\n", len(registered), ms(registered), load0, loadavg())
	if len(ready) > 0 {
		fmt.Printf("agent start to eBPF monitor ready, %d starts: %s\n", len(ready), ms(ready))
	} else {
		fmt.Println("agent start to eBPF monitor ready: no such log line (an agent that loads its eBPF programs before registering)")
	}
	return nil
}

// startOnce starts the agent and returns the time to its "registered" log
// line and to its "eBPF monitor ready" line (0 when the agent logged none
// before registering: older agents load eBPF first).
func startOnce(bin, coordAddr, work, root string, timeout time.Duration) (registered, ready time.Duration, err error) {
	cmd := exec.Command(bin, "--coordinator", "http://"+coordAddr, "--listen", benchutil.FreeAddr(), "--work-dir", work,
		"--cgroup-root", root, "--resources", "cpus:2;mem:1024", "--hostname", filepath.Base(work), "--insecure")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	type line struct {
		text string
		at   time.Time
	}
	lines := make(chan line, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- line{sc.Text(), time.Now()}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	deadline := time.After(timeout)
	var last []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return 0, 0, fmt.Errorf("the agent exited early:\n%s", strings.Join(last, "\n"))
			}
			last = append(last, l.text)
			switch {
			case registered == 0:
				if strings.Contains(l.text, "msg=registered ") {
					registered = l.at.Sub(t0)
				}
			case strings.Contains(l.text, `msg="eBPF monitor ready"`):
				return registered, l.at.Sub(t0), nil
			case strings.Contains(l.text, `msg="agent start to registered"`):
				// This agent loads its eBPF monitor after registering:
				// wait for it.
			case !loadsLate(last):
				return registered, 0, nil // it loaded eBPF before registering
			}
		case <-deadline:
			return 0, 0, fmt.Errorf("no registration or eBPF monitor within %v:\n%s", timeout, strings.Join(last, "\n"))
		}
	}
}

// loadsLate reports whether the agent's log shows an agent that loads its
// eBPF monitor after registering (it logs its start timeline then).
func loadsLate(lines []string) bool {
	for _, l := range lines {
		if strings.Contains(l, `msg="agent start to registered"`) {
			return true
		}
	}
	return false
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:1], "")
}
