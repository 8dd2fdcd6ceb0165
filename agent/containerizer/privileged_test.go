package containerizer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
	"golang.org/x/sys/unix"
)

func shell(cmd string) *slacklinev1.CommandInfo {
	return &slacklinev1.CommandInfo{Value: cmd, Shell: true}
}

func launch(t *testing.T, c *Containerizer, spec Spec) *Container {
	t.Helper()
	if spec.Resources.IsEmpty() {
		spec.Resources = resources.MustParse("cpus:0.5;mem:64")
	}
	ct, err := c.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	return ct
}

func TestExitCodes(t *testing.T) {
	c := newTest(t, testConfig(t))
	tests := []struct {
		name     string
		command  *slacklinev1.CommandInfo
		wantCode int
		wantMsg  string
	}{
		{"shell exit 3", shell("exit 3"), 3, "exited with code 3"},
		{"true", &slacklinev1.CommandInfo{Value: "true"}, 0, "exited with code 0"},
		{"argv", &slacklinev1.CommandInfo{Value: "sh", Arguments: []string{"sh", "-c", "exit $0", "5"}}, 5, "exited with code 5"},
		{"signal", shell("kill -USR1 $$"), -1, "killed by signal 10 (SIGUSR1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := launch(t, c, Spec{TaskID: tt.name, Command: tt.command})
			e := waitExit(t, c, ct.ID)
			if e.ExitCode != tt.wantCode || e.Message != tt.wantMsg || e.Killed || e.OOMKilled || e.Lost {
				t.Errorf("exit = %+v, want code %d and message %q", e, tt.wantCode, tt.wantMsg)
			}
			if err := c.Destroy(ct.ID); err != nil {
				t.Errorf("Destroy: %v", err)
			}
		})
	}
}

// parseProcCgroup maps each controller of a /proc/<pid>/cgroup file to the
// process's cgroup in that hierarchy; the v2 tree's line ("0::/path") maps
// to "".
func parseProcCgroup(content string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(content), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			out[ctrl] = parts[2]
		}
	}
	return out
}

// checkInCgroups fails unless content (a /proc/<pid>/cgroup) puts the
// process in rel in every hierarchy the containerizer uses.
func checkInCgroups(t *testing.T, c *Containerizer, content, rel string) {
	t.Helper()
	got := parseProcCgroup(content)
	want := []string{""}
	if c.Mode() == ModeHybrid {
		want = append(want, "cpu", "memory")
	}
	for _, ctrl := range want {
		if got[ctrl] != "/"+rel {
			t.Errorf("cgroup of controller %q = %q, want %q; /proc/<pid>/cgroup:\n%s", ctrl, got[ctrl], "/"+rel, content)
		}
	}
}

func TestTaskIsInItsCgroupsAtExec(t *testing.T) {
	c := newTest(t, testConfig(t))

	// What the command itself sees as its first act proves it was exec'd
	// inside the cgroups: its cgroup namespace was entered once the shim
	// had joined them, so each is the root of its view.
	ct := launch(t, c, Spec{TaskID: "cat", Command: &slacklinev1.CommandInfo{Value: "cat", Arguments: []string{"cat", "/proc/self/cgroup"}}})
	if e := waitExit(t, c, ct.ID); e.ExitCode != 0 {
		t.Fatalf("cat: %+v", e)
	}
	out, err := os.ReadFile(filepath.Join(ct.Sandbox, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	if hasCgroupNamespaces() {
		checkInCgroups(t, c, string(out), "")
	} else {
		checkInCgroups(t, c, string(out), ct.CgroupPath)
	}
	if !strings.HasPrefix(ct.CgroupPath, c.cfg.CgroupRoot+"/guaranteed/") {
		t.Errorf("CgroupPath = %q", ct.CgroupPath)
	}

	// A running task: its pid is the one listed in the cgroup.
	ct = launch(t, c, Spec{TaskID: "sleep", Revocable: true, Command: shell("exec sleep 1000")})
	data, err := os.ReadFile("/proc/" + strconv.Itoa(ct.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	checkInCgroups(t, c, string(data), ct.CgroupPath)
	if !strings.HasPrefix(ct.CgroupPath, cgroups.Subtree(c.cfg.CgroupRoot, cgroups.Revocable)+"/") {
		t.Errorf("revocable CgroupPath = %q", ct.CgroupPath)
	}
	pids, err := c.Pids(ct.ID)
	if err != nil || !slices.Contains(pids, ct.Pid) {
		t.Errorf("Pids = %v, %v; want %d among them", pids, err, ct.Pid)
	}
	// The pid is the shim's until it execs the task: read the task's
	// environment once the command runs (the shell execs sleep).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(ct.Pid) + "/cmdline")
		if strings.HasPrefix(string(cmdline), "sleep\x00") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not exec the task: cmdline %q", ct.Pid, cmdline)
		}
	}
	env, _ := os.ReadFile("/proc/" + strconv.Itoa(ct.Pid) + "/environ")
	for _, want := range []string{"SLACKLINE_TASK_ID=sleep", "SLACKLINE_SANDBOX=" + ct.Sandbox, "SLACKLINE_CONTAINER_ID=" + ct.ID} {
		if !slices.Contains(strings.Split(string(env), "\x00"), want) {
			t.Errorf("task environment lacks %q", want)
		}
	}
	if strings.Contains(string(env), supervisorEnv) {
		t.Errorf("task environment leaks the agent's: %q", env)
	}
	if err := c.Kill(context.Background(), ct.ID); err != nil {
		t.Fatal(err)
	}
	waitExit(t, c, ct.ID)
}

func TestOOMKilled(t *testing.T) {
	c := newTest(t, testConfig(t))
	// tail keeps a newline-less stream in memory: far beyond 64 MiB.
	ct := launch(t, c, Spec{TaskID: "oom", Resources: resources.MustParse("cpus:1;mem:64"),
		Command: shell("head -c 400M /dev/zero | tail")})
	e := waitExit(t, c, ct.ID)
	if !e.OOMKilled || !strings.HasPrefix(e.Message, "OOM-killed: memory limit 64 MiB") {
		t.Errorf("exit = %+v, want OOMKilled with the limit in the message", e)
	}
	if err := c.Destroy(ct.ID); err != nil {
		t.Error(err)
	}
}

func TestKillLeavesNoProcess(t *testing.T) {
	c := newTest(t, testConfig(t))
	// Ignores SIGTERM and leaves a daemonized child outside its process group.
	ct := launch(t, c, Spec{TaskID: "stubborn",
		Command: shell(`trap "" TERM; (setsid sleep 1000 &); sleep 1000; sleep 1000`)})
	eventually(t, "the daemonized child", func() bool {
		pids, _ := c.Pids(ct.ID)
		return len(pids) >= 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Kill(ctx, ct.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if pids, err := c.Pids(ct.ID); err != nil || len(pids) != 0 {
		t.Errorf("after Kill: pids %v, %v", pids, err)
	}
	e := waitExit(t, c, ct.ID)
	// The shell ignored SIGTERM: only the cgroup-wide SIGKILL ended it.
	if !e.Killed || e.Signal != 9 || !strings.HasPrefix(e.Message, "killed on request") {
		t.Errorf("exit = %+v, want Killed by SIGKILL", e)
	}
	layout := c.layout
	paths := layout.PathsOf(ct.CgroupPath)
	if err := c.Destroy(ct.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, d := range paths.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Destroy (%v)", d, err)
		}
	}
	if _, err := os.Stat(ct.Sandbox); err != nil {
		t.Errorf("sandbox removed by Destroy: %v", err)
	}
	if err := c.Destroy(ct.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Destroy = %v, want ErrNotFound", err)
	}
}

func TestLaunchFailuresCleanUp(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	notExec := filepath.Join(traversableTempDir(t), "garbage")
	if err := os.WriteFile(notExec, []byte{0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command *slacklinev1.CommandInfo
		wantErr string
	}{
		{"not found", &slacklinev1.CommandInfo{Value: "/nonexistent/binary"}, "no such file"},
		{"not in PATH", &slacklinev1.CommandInfo{Value: "no-such-command-here"}, "not found in PATH"},
		{"exec format", &slacklinev1.CommandInfo{Value: notExec}, "exec format error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Launch(context.Background(), Spec{ContainerID: "fail-" + strings.ReplaceAll(tt.name, " ", "-"),
				Resources: resources.MustParse("cpus:1;mem:32"), Command: tt.command})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Launch error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	for _, class := range []cgroups.Class{cgroups.Guaranteed, cgroups.Revocable} {
		for _, d := range c.layout.PathsOf(filepath.Join(cfg.CgroupRoot, string(class))).Dirs() {
			entries, _ := os.ReadDir(d)
			for _, e := range entries {
				if e.IsDir() {
					t.Errorf("cgroup %s left after failed launches", filepath.Join(d, e.Name()))
				}
			}
		}
	}
	entries, _ := os.ReadDir(cfg.StateDir)
	for _, e := range entries {
		t.Errorf("state left after failed launches: %s", e.Name())
	}
	if leases := leasesOf(t, cfg); len(leases) > 0 {
		t.Errorf("dynamic ids still leased after failed launches: %v", leases)
	}
	if len(c.Containers()) != 0 {
		t.Errorf("Containers() = %v", c.Containers())
	}
}

func TestRecoverRunning(t *testing.T) {
	cfg := testConfig(t)
	a := newTest(t, cfg)
	ct := launch(t, a, Spec{TaskID: "long", Command: shell("exec sleep 1000")})
	a.Close() // the agent "dies"; the supervisor is detached and lives on

	b := newTest(t, cfg)
	running, err := b.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0].ID != ct.ID || running[0].Pid != ct.Pid || running[0].CgroupPath != ct.CgroupPath {
		t.Fatalf("Recover = %+v, want %s with pid %d", running, ct.ID, ct.Pid)
	}
	if err := b.Kill(context.Background(), ct.ID); err != nil {
		t.Fatal(err)
	}
	if e := waitExit(t, b, ct.ID); !e.Killed || e.Signal != 15 {
		t.Errorf("exit after re-adoption = %+v, want killed by SIGTERM", e)
	}
	if err := b.Destroy(ct.ID); err != nil {
		t.Error(err)
	}
}

func TestRecoverExitedWhileDown(t *testing.T) {
	cfg := testConfig(t)
	a := newTest(t, cfg)
	ct := launch(t, a, Spec{TaskID: "short", Command: shell("sleep 0.3; exit 7")})
	a.Close()
	var cp checkpoint
	if err := readJSON(filepath.Join(cfg.StateDir, ct.ID, checkpointFile), &cp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the task's and its supervisor's end while no agent watches", func() bool {
		return !alive("/proc", cp.Supervisor)
	})

	b := newTest(t, cfg)
	running, err := b.Recover(context.Background())
	if err != nil || len(running) != 0 {
		t.Fatalf("Recover = %v, %v; want nothing running", running, err)
	}
	if e := waitExit(t, b, ct.ID); e.ExitCode != 7 || e.Lost || e.Killed {
		t.Errorf("exit = %+v, want code 7", e)
	}
	if err := b.Destroy(ct.ID); err != nil {
		t.Error(err)
	}
}

func TestRecoverOtherBootIsLost(t *testing.T) {
	cfg := testConfig(t)
	a := newTest(t, cfg)
	ct := launch(t, a, Spec{TaskID: "rebooted", Command: shell("exec sleep 1000")})
	a.Close()
	file := filepath.Join(cfg.StateDir, ct.ID, checkpointFile)
	var cp checkpoint
	if err := readJSON(file, &cp); err != nil {
		t.Fatal(err)
	}
	cp.BootID = "00000000-0000-0000-0000-000000000000"
	if err := writeJSON(file, &cp); err != nil {
		t.Fatal(err)
	}
	// A reboot ends the supervisor too (the task is left in its cgroup,
	// which a reboot would have removed): a live one would write its exit
	// file into the state directory while Destroy removes it.
	killAndReap(t, cp.Supervisor.Pid)
	b := newTest(t, cfg)
	if running, err := b.Recover(context.Background()); err != nil || len(running) != 0 {
		t.Fatalf("Recover = %v, %v", running, err)
	}
	if e := waitExit(t, b, ct.ID); !e.Lost {
		t.Errorf("exit = %+v, want Lost", e)
	}
	// Destroy cleans up even what a real reboot would have removed.
	if err := b.Destroy(ct.ID); err != nil {
		t.Error(err)
	}
}

func TestRealCPUWeights(t *testing.T) {
	cfg := testConfig(t)
	cfg.CPUHardLimit = true
	c := newTest(t, cfg)
	g := launch(t, c, Spec{TaskID: "g", Resources: resources.MustParse("cpus:2;mem:128"), Command: shell("exec sleep 1000")})
	r := launch(t, c, Spec{TaskID: "r", Revocable: true, Resources: resources.MustParse("cpus:0.5;mem:64"), Command: shell("exec sleep 1000")})
	read := func(dir, file string) string {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	l := c.layout
	switch c.Mode() {
	case ModeHybrid:
		gp, rp := l.PathsOf(g.CgroupPath), l.PathsOf(r.CgroupPath)
		revocableRoot := filepath.Join(l.CPU, cgroups.Subtree(cfg.CgroupRoot, cgroups.Revocable))
		for _, tc := range []struct{ dir, file, want string }{
			{gp.CPU, "cpu.shares", "2048"},
			{gp.CPU, "cpu.cfs_quota_us", "200000"},
			{gp.CPU, "cpu.cfs_period_us", "100000"},
			{gp.Memory, "memory.limit_in_bytes", "134217728"},
			{rp.CPU, "cpu.shares", "512"},
			{rp.CPU, "cpu.cfs_quota_us", "50000"},
			{rp.Memory, "memory.limit_in_bytes", "67108864"},
			{filepath.Join(l.CPU, cfg.CgroupRoot, "guaranteed"), "cpu.shares", "1024"},
		} {
			if got := read(tc.dir, tc.file); got != tc.want {
				t.Errorf("%s/%s = %s, want %s", tc.dir, tc.file, got, tc.want)
			}
		}
		// Lowest priority: shares 2, or SCHED_IDLE where the kernel has cpu.idle
		// (the kernel then reports the idle weight, not the shares written).
		if _, err := os.Stat(filepath.Join(revocableRoot, "cpu.idle")); err == nil {
			if got := read(revocableRoot, "cpu.idle"); got != "1" {
				t.Errorf("revocable cpu.idle = %s, want 1", got)
			}
		} else if got := read(revocableRoot, "cpu.shares"); got != "2" {
			t.Errorf("revocable cpu.shares = %s, want 2", got)
		}
	case ModeV2:
		gp, rp := l.PathsOf(g.CgroupPath), l.PathsOf(r.CgroupPath)
		if got := read(gp.Unified, "cpu.weight"); got != "200" {
			t.Errorf("guaranteed cpu.weight = %s", got)
		}
		if got := read(rp.Unified, "cpu.weight"); got != "50" {
			t.Errorf("revocable cpu.weight = %s", got)
		}
	}
	for _, ct := range []*Container{g, r} {
		if err := c.Kill(context.Background(), ct.ID); err != nil {
			t.Fatal(err)
		}
		waitExit(t, c, ct.ID)
		if err := c.Destroy(ct.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// killAndReap SIGKILLs pid and waits until it has exited (its pidfd
// becomes readable).
func killAndReap(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 1 {
			t.Fatalf("wait for %d to exit: %d, %v", pid, n, err)
		}
		return
	}
}
