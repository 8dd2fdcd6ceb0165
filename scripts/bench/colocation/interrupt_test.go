package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
)

// The test binary doubles as the benchmark: "disk" serves the modelled
// disk (setupDisk starts os.Executable), and with interruptEnv set it runs
// the benchmark's disk set-up and interrupts it (interruptedSetup).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "disk" {
		if err := runDiskServer(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "colocation disk:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if stage := os.Getenv(interruptEnv); stage != "" {
		os.Exit(interruptedSetup(stage))
	}
	os.Exit(m.Run())
}

const (
	interruptEnv = "COLOCATION_TEST_INTERRUPT" // the set-up step to interrupt, or "done"
	dirEnv       = "COLOCATION_TEST_DIR"       // the benchmark's directory
	cgroupEnv    = "COLOCATION_TEST_CGROUP"    // the disk server's cgroup
	// inBenchGroup is what interruptedSetup reports when the disk server
	// would get the terminal's SIGINT itself.
	inBenchGroup = "disk server in the benchmark's process group"
)

// interruptedSetup sets up the io scenario's disk as the benchmark does
// (startDisk, the signal handler installed) and, as the step named stage
// begins (or once set-up is done), sends SIGINT to its own process group,
// as a terminal's Ctrl-C does to the foreground job. The handler exits.
func interruptedSetup(stage string) int {
	layout, err := cgroups.Detect(cgrouptest.Mountpoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	o := options{binDir: os.Getenv(dirEnv), rootWeight: 1,
		disk: diskOptions{kind: "loop", rate: 1 << 30, size: 1 << 30, requestKiB: 1280, layout: layoutSplit}}
	ctrlC := func() { _ = syscall.Kill(-syscall.Getpgrp(), syscall.SIGINT) }
	cleanUpOnSignal()
	fired := false
	cleanup.beforeStep = func(name string) {
		if name == stage {
			fired = true
			ctrlC()
			// The step goes on once the handler has the signal, as a
			// step in flight when it comes would.
			<-cleanup.signal()
		}
	}
	d, err := startDisk(o, layout, os.Getenv(cgroupEnv))
	if err != nil {
		cleanup.waitForSignalCleanup()
		fmt.Fprintln(os.Stderr, "set-up failed without a signal:", err)
		return 1
	}
	if pgid, err := syscall.Getpgid(d.server.Process.Pid); err == nil && pgid == syscall.Getpgrp() {
		fmt.Fprintln(os.Stderr, inBenchGroup)
	}
	switch {
	case stage == "done":
		ctrlC()
	case !fired:
		cleanup.waitForSignalCleanup()
		fmt.Fprintf(os.Stderr, "no set-up step %q\n", stage)
		return 1
	}
	select {} // the handler exits
}

// TestDiskSetupInterrupted: a Ctrl-C (SIGINT to the benchmark's process
// group) as each step of the modelled disk's set-up begins, or once it is
// set up, leaves nothing behind: no mount (tmpfs store, FUSE, ext4), loop
// device, directory, cgroup or disk server; and the teardown meets no
// error (the disk server is not in the benchmark's process group, so it
// does not unmount its disk under the loop device on the terminal's
// SIGINT; it stops on the benchmark's SIGTERM).
func TestDiskSetupInterrupted(t *testing.T) {
	privileged.Require(t)
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			requireTool(t, tool)
		}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		requireTool(t, "/dev/fuse")
	}
	layout, err := cgroups.Detect(cgrouptest.Mountpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Parallel()
	stages := []string{"base", "cgroup", "directories", "store", "server", "losetup", "mkfs", "mount", "done"}
	if layout.Mode != cgroups.ModeV2 && layout.Blkio != "" {
		stages = append(stages, "blkio")
	}
	for _, stage := range stages {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cg := fmt.Sprintf("slackline-coloc-test-%d-%s", os.Getpid(), stage)
			// Registered after TempDir, so it runs first: whatever a
			// failing run left is removed from the host.
			t.Cleanup(func() { removeLeftovers(t, dir, layout, cg) })
			// A bound against a hung child only, far above the seconds
			// a run takes.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), interruptEnv+"="+stage, dirEnv+"="+dir, cgroupEnv+"="+cg)
			// A job of its own, as a shell starts the benchmark.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Errorf("benchmark ended with %v, want exit status 130 (the signal handler's)", err)
			}
			for _, bad := range []string{"modelled disk:", inBenchGroup, "set-up failed", "no set-up step"} {
				if strings.Contains(out.String(), bad) {
					t.Errorf("output has %q", bad)
				}
			}
			for _, l := range leftovers(dir, layout, cg) {
				t.Errorf("left behind: %s", l)
			}
			if t.Failed() {
				t.Logf("benchmark's output:\n%s", out.String())
			}
		})
	}
}

func requireTool(t *testing.T, tool string) {
	t.Helper()
	if os.Getenv(privileged.EnvVar) == "1" {
		t.Fatalf("%s is needed", tool)
	}
	t.Skipf("%s is needed", tool)
}

// leftovers lists what a benchmark whose directory is dir and whose disk
// server's cgroup is cg left behind.
func leftovers(dir string, l cgroups.Layout, cg string) []string {
	var left []string
	for _, m := range mountsUnder(dir) {
		left = append(left, "mount "+m)
	}
	for _, loop := range loopsUnder(dir) {
		left = append(left, "loop device "+loop)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		left = append(left, fmt.Sprintf("%d entries in %s (%s...)", len(entries), dir, entries[0].Name()))
	}
	for _, d := range cgroupDirs(l, cg) {
		if _, err := os.Stat(d); err == nil {
			left = append(left, "cgroup "+d)
		}
	}
	for _, pid := range processesUnder(dir) {
		left = append(left, fmt.Sprintf("process %d", pid))
	}
	return left
}

// removeLeftovers removes what leftovers lists.
func removeLeftovers(t *testing.T, dir string, l cgroups.Layout, cg string) {
	mounts := mountsUnder(dir)
	slices.Reverse(mounts) // the ext4 file system before the FUSE one
	for _, m := range mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	for _, loop := range loopsUnder(dir) {
		_ = exec.Command("losetup", "--detach", loop).Run()
	}
	for _, pid := range processesUnder(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, d := range cgroupDirs(l, cg) {
		removeCgroupDir(d)
	}
	if entries, _ := os.ReadDir(dir); len(mountsUnder(dir)) == 0 {
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	if left := leftovers(dir, l, cg); len(left) > 0 {
		t.Logf("could not remove: %v", left)
	}
}

func mountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/mounts")
	var ms []string
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			ms = append(ms, f[1])
		}
	}
	return ms
}

func loopsUnder(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var loops []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), dir+"/") {
			loops = append(loops, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return loops
}

func cgroupDirs(l cgroups.Layout, cg string) []string {
	dirs := l.PathsOf(cg).Dirs()
	if l.Mode != cgroups.ModeV2 && l.Blkio != "" {
		dirs = append(dirs, filepath.Join(l.Blkio, cg))
	}
	return dirs
}

// processesUnder lists the processes whose command line names dir (the
// disk server's --store and --mount).
func processesUnder(dir string) []int {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(b, []byte(dir+"/")) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(filepath.Base(filepath.Dir(f)), &pid); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}
