// Tests of scripts/vm/test's own logic (the plan, the summary, the failure
// digest) without guests: scripts/vm/testdata/fake-run stands in for
// scripts/vm/run and runs the guests' part (scripts/vm/guest-tests) on the
// host, on the fixture packages under scripts/vm/testdata.
package vm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// harness runs scripts/vm/test on the kernels and packages with the fake
// runner and env, returning its output lines and exit status.
func harness(t *testing.T, kernels string, env []string, pkgs ...string) ([]string, int) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the harness builds test binaries with the go command, which is not on PATH")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(wd, "test"), "--kernels", kernels, "--quick")
	cmd.Args = append(cmd.Args, pkgs...)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), "SLACKLINE_VM_RUN="+filepath.Join(wd, "testdata", "fake-run"),
		"SLACKLINE_VM_TEST_OUT="+t.TempDir(), "SLACKLINE_VM_HARNESS_FIXTURE=1", "SLACKLINE_VM_JOBS=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	status := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("scripts/vm/test: %v\n%s", err, out)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n"), status
}

func index(lines []string, substr string) int {
	for i, l := range lines {
		if strings.Contains(l, substr) {
			return i
		}
	}
	return -1
}

func lastIndex(lines []string, substr string) int {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return i
		}
	}
	return -1
}

// A failing package: the last 25 lines (what a CI log's tail shows) name
// the failing test after every guest console line, the digest shows the
// test's message and the output before its FAIL line (up to 40 lines), and
// the kernel log is summarized, not printed.
func TestFailureDigestEndsTheOutput(t *testing.T) {
	t.Parallel()
	lines, status := harness(t, "6.1", []string{"SLACKLINE_VM_SINGLE_THREAD_PACKAGES=scripts/vm/testdata/pass"},
		"./scripts/vm/testdata/pass", "./scripts/vm/testdata/fail")
	text := strings.Join(lines, "\n")
	if status != 1 {
		t.Fatalf("exit status %d, want 1:\n%s", status, text)
	}
	tail := lines[max(0, len(lines)-25):]
	for _, want := range []string{"vm test: FAILED: kernel 6.1: scripts/vm/testdata/fail: TestFails", "vm: 1 passed, 1 failed",
		"vm test: kernel 6.1: 1 packages passed, 1 failed",
		"6.1-multi-kernel1.log: 1 errors (1 OOM kills, 0 lines of oopses, panics or stalls)"} {
		if index(tail, want) < 0 {
			t.Errorf("the output's last 25 lines lack %q:\n%s", want, strings.Join(tail, "\n"))
		}
	}
	digest := index(lines, "vm test: failure digest")
	if digest < 0 {
		t.Fatalf("no failure digest:\n%s", text)
	}
	if last := lastIndex(lines, "6.1/"); last > digest {
		t.Errorf("a guest's console line %q comes after the digest (line %d)", lines[last], digest)
	}
	d := lines[digest:]
	for _, want := range []string{"=== vm test: kernel 6.1: FAIL github.com/slackline/slackline/scripts/vm/testdata/fail",
		"fail_test.go:25: the fixture's failure message", "fixture output line 60", "fixture output line 22", "--- FAIL: TestFails"} {
		if index(d, want) < 0 {
			t.Errorf("the digest lacks %q:\n%s", want, strings.Join(d, "\n"))
		}
	}
	// 40 lines of context: the first output lines and the other tests'
	// are left out, and nothing of the passing package or the kernel log.
	for _, unwanted := range []string{"fixture output line 21\n", "later output line", "testdata/pass", "Memory cgroup out of memory"} {
		if strings.Contains(strings.Join(d, "\n")+"\n", unwanted) {
			t.Errorf("the digest has %q:\n%s", unwanted, strings.Join(d, "\n"))
		}
	}
}

// Every package in the single-threaded group leaves the multi-threaded one
// empty: the summary is printed all the same, and the status is 0 (the
// summary's sums failed on the empty group's log before).
func TestEmptyGroupKeepsTheSummary(t *testing.T) {
	t.Parallel()
	lines, status := harness(t, "6.1 6.12", []string{"SLACKLINE_VM_SINGLE_THREAD_PACKAGES=scripts/vm/testdata/pass"},
		"./scripts/vm/testdata/pass")
	text := strings.Join(lines, "\n")
	if status != 0 {
		t.Fatalf("exit status %d, want 0:\n%s", status, text)
	}
	for _, want := range []string{"vm test: kernel 6.1: 1 packages passed, 0 failed; single guest:",
		"vm test: kernel 6.12: 1 packages passed, 0 failed; single guest:", "vm: 2 passed, 0 failed"} {
		if index(lines, want) < 0 {
			t.Errorf("the output lacks %q:\n%s", want, text)
		}
	}
	if index(lines, "failure digest") >= 0 || index(lines, "FAILED") >= 0 {
		t.Errorf("a digest without a failure:\n%s", text)
	}
}

// SLACKLINE_VM_SINGLE_THREAD_KERNELS runs both of a kernel's guests
// single-threaded; the other kernels' multi-threaded group stays so.
func TestSingleThreadKernels(t *testing.T) {
	t.Parallel()
	lines, status := harness(t, "6.1 6.12", []string{"SLACKLINE_VM_SINGLE_THREAD_PACKAGES=", "SLACKLINE_VM_SINGLE_THREAD_KERNELS=6.12"},
		"./scripts/vm/testdata/pass")
	text := strings.Join(lines, "\n")
	if status != 0 {
		t.Fatalf("exit status %d, want 0:\n%s", status, text)
	}
	for _, want := range []string{"6.1/multi: fake-run: TCG thread multi", "6.12/multi: fake-run: TCG thread single", "vm: 2 passed, 0 failed"} {
		if index(lines, want) < 0 {
			t.Errorf("the output lacks %q:\n%s", want, text)
		}
	}
}

// SIGTERM stops every guest (here the stand-in, which never ends on its
// own) and exits 143. The guests used to be found by their comm, "run",
// which a #!/usr/bin/env bash script never has: scripts/vm/test waited
// for them forever.
func TestTerminateStopsTheGuests(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the harness builds test binaries with the go command, which is not on PATH")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "guest.pid")
	// The bound only ends a hung run (the old behaviour), it times nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(wd, "test"), "--kernels", "6.1", "./scripts/vm/testdata/pass")
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), "SLACKLINE_VM_RUN="+filepath.Join(wd, "testdata", "fake-run"),
		"SLACKLINE_VM_TEST_OUT="+filepath.Join(dir, "out"), "SLACKLINE_VM_FAKE_HANG="+pidFile)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second // the guests' pipes outlive a killed script
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var guest int
	for guest == 0 {
		if data, err := os.ReadFile(pidFile); err == nil {
			guest, _ = strconv.Atoi(strings.TrimSpace(string(data)))
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the stand-in guest never started:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(guest, syscall.SIGKILL) }) // if it outlived the test
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("scripts/vm/test did not stop on SIGTERM:\n%s", out.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 143 {
		t.Errorf("exit = %v, want status 143:\n%s", err, out.String())
	}
	if err := syscall.Kill(guest, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the guest's runner (pid %d) is still there after SIGTERM: %v", guest, err)
	}
	if !strings.Contains(out.String(), "fake-run: terminated") {
		t.Errorf("the guest was not terminated:\n%s", out.String())
	}
}
