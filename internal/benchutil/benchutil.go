// Package benchutil holds what Slackline's benchmark programs under
// scripts/bench share: building the binaries they start, free loopback
// ports, a process's CPU time and RSS from /proc, and percentiles.
package benchutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Build compiles the packages (e.g. "./cmd/slackline-agent") into dir.
func Build(dir string, packages ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, packages...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %v: %w", packages, err)
	}
	return nil
}

// FreeAddr returns a loopback address with a port free right now.
func FreeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("listen on loopback: %v", err))
	}
	defer ln.Close()
	return ln.Addr().String()
}

// CPUSeconds returns a process's user+system CPU time from /proc/PID/stat.
func CPUSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

// RSSBytes returns a process's resident set size from /proc/PID/status.
func RSSBytes(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// Percentile returns the p-quantile (0..1) of ds, rounded to round; ds is
// not modified. It interpolates linearly between the two closest ranks
// (the definition of R's and numpy's default): taking the lower rank alone
// made the p99 of 10 trials their second largest value.
func Percentile(ds []time.Duration, p float64, round time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pos := p * float64(len(s)-1)
	i := int(pos)
	if i >= len(s)-1 {
		return s[len(s)-1].Round(round)
	}
	return (s[i] + time.Duration((pos-float64(i))*float64(s[i+1]-s[i]))).Round(round)
}
