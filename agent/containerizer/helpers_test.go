package containerizer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// supervisorEnv makes the test binary act as the supervisor (and its exec
// shim): the tests' Config.SupervisorCommand is the test binary itself.
const supervisorEnv = "SLACKLINE_CONTAINERIZER_TEST_SUPERVISOR"

func TestMain(m *testing.M) {
	if os.Getenv(supervisorEnv) == "1" {
		// Dispatched like the agent binary: "<exe> supervise run|exec <dir>".
		if len(os.Args) < 2 || os.Args[1] != "supervise" {
			os.Exit(2)
		}
		os.Exit(SuperviseMain(os.Args[2:]))
	}
	// Inherited by the supervisors the tests start (not by tasks: they get
	// an explicit environment).
	os.Setenv(supervisorEnv, "1")
	// The tests' containerizers share one host state of dynamic ids, as
	// the agents of a host do, with a range of this run's own, so that
	// other runs on the host (whose tasks' uids a test may look for) do
	// not meet them.
	dir, err := os.MkdirTemp("", "slackline-test-uids-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testIDsDir = dir
	var b [4]byte
	_, _ = rand.Read(b[:])
	testIDs = IDRange{First: 2_100_000_000 + uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]), Count: 100_000}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testIDsDir and testIDs are the dynamic ids' host state and range of
// every test containerizer (testConfig).
var (
	testIDsDir string
	testIDs    IDRange
)

// leasesOf returns the dynamic ids leased to containers of cfg's agent.
func leasesOf(t *testing.T, cfg Config) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cfg.DynamicIDsDir, dynamicLeases))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		var l uidLease
		if readJSON(filepath.Join(cfg.DynamicIDsDir, dynamicLeases, e.Name()), &l) == nil && l.StateDir == cfg.StateDir {
			out = append(out, e.Name()+" "+l.Container)
		}
	}
	return out
}

const realMountpoint = "/sys/fs/cgroup"

// requirePrivileged skips the test when it cannot use real cgroups here,
// unless SLACKLINE_TEST_PRIVILEGED=1 (CI), which makes that a failure.
func requirePrivileged(t *testing.T) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "not running as root"
	} else if _, err := cgroups.Detect(realMountpoint); err != nil {
		reason = "no usable cgroups: " + err.Error()
	}
	if reason == "" {
		return
	}
	if os.Getenv("SLACKLINE_TEST_PRIVILEGED") == "1" {
		t.Fatalf("privileged test cannot run: %s (SLACKLINE_TEST_PRIVILEGED=1 makes this a failure, not a skip)", reason)
	}
	t.Skipf("skipping privileged test: %s; run as root on a cgroup v2 or hybrid host (CI sets SLACKLINE_TEST_PRIVILEGED=1)", reason)
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// testConfig is a Config on the real cgroups with a unique root and
// temporary state and sandbox directories; the root is removed (after
// killing whatever is left in it) when the test ends.
func testConfig(t *testing.T) Config {
	t.Helper()
	requirePrivileged(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work := traversableTempDir(t)
	cfg := Config{
		CgroupRoot:        "slackline-test-" + randomSuffix(),
		CgroupMountpoint:  realMountpoint,
		StateDir:          filepath.Join(work, "containers"),
		SandboxDir:        filepath.Join(work, "sandboxes"),
		KillGracePeriod:   300 * time.Millisecond,
		SupervisorCommand: []string{exe, "supervise"},
		DynamicIDs:        testIDs,
		DynamicIDsDir:     testIDsDir,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	t.Cleanup(func() { removeRealRoot(t, cfg.CgroupRoot) })
	return cfg
}

// traversableTempDir returns a new temporary directory that every user can
// search (t.TempDir's are root's, 0700, and so is their parent): tasks run
// as nobody and must reach their sandboxes, and files tests hand them.
func traversableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// newTest returns a Containerizer for cfg, closed when the test ends.
func newTest(t *testing.T, cfg Config) *Containerizer {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// removeRealRoot kills every process under the test's root and removes its
// cgroups bottom-up in every hierarchy. It only touches that root.
func removeRealRoot(t testing.TB, root string) {
	layout, err := cgroups.Detect(realMountpoint)
	if err != nil {
		return
	}
	all := layout.PathsOf(root)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range []cgroups.Paths{all, layout.PathsOf(cgroups.Subtree(root, cgroups.Revocable))} {
		if err := p.KillAndWait(ctx); err != nil {
			t.Errorf("cleanup: kill processes under %s: %v", p.Rel, err)
		}
	}
	// The revocable subtree is the root's sibling (cgroups.Subtree).
	tops := append(all.Dirs(), layout.PathsOf(cgroups.Subtree(root, cgroups.Revocable)).Dirs()...)
	if layout.Mode == cgroups.ModeHybrid && layout.CPUSet != "" {
		tops = append(tops, filepath.Join(layout.CPUSet, root), filepath.Join(layout.CPUSet, cgroups.Subtree(root, cgroups.Revocable)))
	}
	if layout.Mode == cgroups.ModeHybrid && layout.Blkio != "" {
		tops = append(tops, filepath.Join(layout.Blkio, cgroups.Subtree(root, cgroups.Revocable)))
	}
	for _, top := range tops {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		for _, d := range dirs {
			// A killed process leaves its cgroups a moment after it left
			// cgroup.procs (an init's exit waits for its namespace's).
			err := unix.Rmdir(d)
			for errors.Is(err, unix.EBUSY) && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
				err = unix.Rmdir(d)
			}
			if err != nil {
				t.Errorf("cleanup: rmdir %s: %v", d, err)
			}
		}
	}
}

// waitExit returns the next Exit for id, failing after a deadline.
// slowHostDeadline bounds the waits of the tests: long, because the
// privileged tests also run in emulated guests on a loaded host (make
// test-vm), where a task's start or OOM kill took over 30 s; a passing
// test never waits for it.
const slowHostDeadline = 3 * time.Minute

func waitExit(t *testing.T, c *Containerizer, id string) Exit {
	t.Helper()
	deadline := time.After(slowHostDeadline)
	for {
		select {
		case e := <-c.Exits():
			if e.ContainerID == id {
				return e
			}
			t.Logf("exit of another container: %+v", e)
		case <-deadline:
			t.Fatalf("no exit for container %s", id)
		}
	}
}

// eventually polls cond until it holds, failing after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(slowHostDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hostPid returns the host's pid of the process of container id whose pid
// in the task's PID namespace is nsPid (the innermost of NSpid in
// /proc/<pid>/status), or nsPid when no process of the container has it
// (tasks without namespaces see the host's pids).
func hostPid(c *Containerizer, id string, nsPid int) int {
	pids, _ := c.Pids(id)
	for _, p := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == strconv.Itoa(nsPid) {
				return p
			}
		}
	}
	return nsPid
}

// processesWith returns the host's processes whose command line (NUL
// separated, as in /proc/<pid>/cmdline) contains s; zombies have none.
func processesWith(t *testing.T, s string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmd)+"\x00", s) {
			out = append(out, pid)
		}
	}
	return out
}
