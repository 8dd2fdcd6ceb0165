package nettest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// HelperEnv names the helper a test binary runs instead of its tests
// (RunHelper); NetnsEnv the namespace file it enters first.
const (
	HelperEnv = "SLACKLINE_NETTEST_HELPER"
	NetnsEnv  = "SLACKLINE_NETTEST_NETNS"
)

// Helpers are the workloads every test binary using this package can run
// as a helper process: after printing "ready" each waits for a line on
// stdin, then runs and prints its result on one line.
//
//	send ADDR CC DURATION               bytes sent
//	rr ADDR RATE CONNS REQ RESP DURATION latencies in µs, space separated
var Helpers = map[string]func(args []string) error{
	"send": helperSend,
	"rr":   helperRR,
}

// RunHelper runs the helper named by HelperEnv, from Helpers or extra, in
// the namespace named by NetnsEnv, and reports whether it did: a TestMain
// calls it first and exits when it returns true.
func RunHelper(extra map[string]func(args []string) error) bool {
	name := os.Getenv(HelperEnv)
	if name == "" {
		return false
	}
	h, ok := Helpers[name]
	if !ok {
		h, ok = extra[name]
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", name)
		os.Exit(2)
	}
	if err := InNetns(os.Getenv(NetnsEnv), func() error { return h(os.Args[1:]) }); err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", name, err)
		os.Exit(1)
	}
	return true
}

// Ready tells the parent the helper is ready, then waits for its go.
func Ready() error {
	fmt.Println("ready")
	_, err := bufio.NewReader(os.Stdin).ReadString('\n')
	return err
}

func helperSend(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("send ADDR CC DURATION, got %q", args)
	}
	d, err := time.ParseDuration(args[2])
	if err != nil {
		return err
	}
	if err := Ready(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	n, err := Send(ctx, args[0], args[1])
	if err != nil {
		return err
	}
	fmt.Println(n)
	return nil
}

func helperRR(args []string) error {
	if len(args) != 6 {
		return fmt.Errorf("rr ADDR RATE CONNS REQ RESP DURATION, got %q", args)
	}
	var nums [4]float64
	for i := range nums {
		v, err := strconv.ParseFloat(args[1+i], 64)
		if err != nil {
			return err
		}
		nums[i] = v
	}
	d, err := time.ParseDuration(args[5])
	if err != nil {
		return err
	}
	if err := Ready(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lat, err := RequestResponse(ctx, RR{Addr: args[0], Rate: nums[0], Conns: int(nums[1]), RequestBytes: int(nums[2]), ResponseBytes: int(nums[3])})
	if err != nil {
		return err
	}
	fmt.Println(FormatLatencies(lat))
	return nil
}

// Helper is a helper process the test started.
type Helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

// StartHelper starts the running binary as helper name, born in the v2
// cgroup directory cgroupDir ("" keeps the caller's) and entering the
// namespace netns, and waits until it is ready. Extra environment
// variables come from env.
func StartHelper(cgroupDir, netns string, env []string, name string, args ...string) (*Helper, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), HelperEnv+"="+name, NetnsEnv+"="+netns), env...)
	cmd.Stderr = os.Stderr
	// No Pdeathsig: it fires when the forking thread ends, and threads
	// locked into a namespace (InNetns) end with their goroutine.
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if cgroupDir != "" {
		dir, err := os.Open(cgroupDir)
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start helper %s: %w", name, err)
	}
	h := &Helper{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(out)}
	line, err := h.stdout.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		h.Kill()
		return nil, fmt.Errorf("helper %s not ready: %q %v", name, line, err)
	}
	return h, nil
}

// Go lets the helper run.
func (h *Helper) Go() error {
	_, err := io.WriteString(h.stdin, "go\n")
	return err
}

// Wait waits for the helper to exit and returns what it printed after
// "ready", trimmed.
func (h *Helper) Wait() (string, error) {
	rest, _ := io.ReadAll(h.stdout)
	if err := h.cmd.Wait(); err != nil {
		return "", fmt.Errorf("helper %v: %w", h.cmd.Args, err)
	}
	return strings.TrimSpace(string(rest)), nil
}

// Signal sends sig to the helper.
func (h *Helper) Signal(sig os.Signal) error { return h.cmd.Process.Signal(sig) }

// Pid returns the helper's process id.
func (h *Helper) Pid() int { return h.cmd.Process.Pid }

// Kill kills the helper and reaps it.
func (h *Helper) Kill() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// ParseLatencies parses a helper's "rr" output.
func ParseLatencies(s string) ([]time.Duration, error) {
	fields := strings.Fields(s)
	out := make([]time.Duration, 0, len(fields))
	for _, f := range fields {
		us, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse latencies: %w", err)
		}
		out = append(out, time.Duration(us)*time.Microsecond)
	}
	return out, nil
}
