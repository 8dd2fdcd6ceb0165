package containerizer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"golang.org/x/sys/unix"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeTree creates files (path -> content) under a new temporary directory.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

var (
	fakeV2Files = map[string]string{
		"cgroup.controllers":     "cpu io memory pids",
		"cgroup.subtree_control": "cpu memory",
	}
	fakeHybridFiles = map[string]string{
		"unified/cgroup.controllers":   "",
		"cpu/cpu.shares":               "1024",
		"memory/memory.limit_in_bytes": "9223372036854771712",
	}
)

func fakeConfig(t *testing.T, files map[string]string) Config {
	work := t.TempDir()
	return Config{
		CgroupRoot: "slackline", CgroupMountpoint: fakeTree(t, files),
		StateDir: filepath.Join(work, "containers"), SandboxDir: filepath.Join(work, "sandboxes"),
		Logger: quietLogger(),
		// Nothing is launched on a fake tree: any supervisor will do.
		SupervisorCommand: []string{"/nonexistent/slackline-supervisor"},
	}
}

func TestNewOnFakeTrees(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		mode  Mode
		want  map[string]string // file -> content after New
	}{
		{"v2", fakeV2Files, ModeV2, map[string]string{
			"slackline/cgroup.subtree_control":           "+cpu +memory",
			"slackline-revocable/cpu.weight":             "1",
			"slackline-revocable/cgroup.subtree_control": "+cpu +memory",
		}},
		{"hybrid", fakeHybridFiles, ModeHybrid, map[string]string{
			"cpu/slackline-revocable/cpu.shares": "2",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fakeConfig(t, tt.files)
			c, err := New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer c.Close()
			if c.Mode() != tt.mode {
				t.Errorf("Mode = %s, want %s", c.Mode(), tt.mode)
			}
			for file, want := range tt.want {
				path := filepath.Join(cfg.CgroupMountpoint, file)
				_ = os.Chmod(path, 0o644) // containerd creates fake-tree files with mode 0
				data, err := os.ReadFile(path)
				if err != nil || strings.TrimSpace(string(data)) != want {
					t.Errorf("%s = %q, %v; want %q", file, data, err, want)
				}
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	cfg := fakeConfig(t, map[string]string{"cpu/cpu.shares": "1024", "memory/memory.limit_in_bytes": "1"})
	if _, err := New(cfg); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "pure cgroup v1") {
		t.Errorf("New on pure v1 = %v, want ErrUnsupported", err)
	}
	cfg = fakeConfig(t, fakeV2Files)
	cfg.CgroupRoot = "../escape"
	if _, err := New(cfg); err == nil {
		t.Error("New accepted a cgroup root outside the hierarchy")
	}
	cfg = fakeConfig(t, fakeV2Files)
	cfg.StateDir = ""
	if _, err := New(cfg); err == nil {
		t.Error("New accepted an empty StateDir")
	}
}

// TestNewPermissionDenied runs New against a fake tree the caller cannot
// write, as a non-root agent would face /sys/fs/cgroup. As root, setfsuid on
// one locked thread (discarded afterwards) removes the bypass of file
// permissions; otherwise chmod makes the tree read-only.
func TestNewPermissionDenied(t *testing.T) {
	cfg := fakeConfig(t, fakeHybridFiles)
	mnt := cfg.CgroupMountpoint
	if os.Geteuid() == 0 {
		for d := mnt; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			_ = os.Chmod(d, 0o755)
		}
	} else {
		for _, d := range []string{mnt, mnt + "/cpu", mnt + "/memory", mnt + "/unified"} {
			_ = os.Chmod(d, 0o555)
		}
		t.Cleanup(func() {
			for _, d := range []string{mnt, mnt + "/cpu", mnt + "/memory", mnt + "/unified"} {
				_ = os.Chmod(d, 0o755)
			}
		})
	}
	// State and sandbox directories are created first, as the agent's user.
	for _, d := range []string{cfg.StateDir, cfg.SandboxDir} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		if os.Geteuid() == 0 {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			if err := unix.Setfsuid(65534); err != nil {
				errc <- err
				return
			}
		}
		_, err := New(cfg)
		errc <- err
	}()
	err := <-errc
	if !errors.Is(err, ErrPermission) {
		t.Fatalf("New = %v, want ErrPermission", err)
	}
	want := "cannot create " + filepath.Join(mnt, "cpu/slackline") + ": permission denied; run the agent as root or delegate the cgroup subtree (systemd Delegate=yes)"
	if err.Error() != want {
		t.Errorf("message:\n got %q\nwant %q", err.Error(), want)
	}
}

func TestDescribeExit(t *testing.T) {
	tests := []struct {
		name   string
		rec    exitRecord
		oom    bool
		killed bool
		mem    int64
		want   Exit
	}{
		{"success", exitRecord{ExitCode: 0}, false, false, 0, Exit{ContainerID: "c", Message: "exited with code 0"}},
		{"failure", exitRecord{ExitCode: 3}, false, false, 0, Exit{ContainerID: "c", ExitCode: 3, Message: "exited with code 3"}},
		{"signal", exitRecord{ExitCode: -1, Signal: 9}, false, false, 0,
			Exit{ContainerID: "c", ExitCode: -1, Signal: 9, Message: "killed by signal 9 (SIGKILL)"}},
		{"oom", exitRecord{ExitCode: -1, Signal: 9}, true, false, 64 << 20,
			Exit{ContainerID: "c", ExitCode: -1, Signal: 9, OOMKilled: true, Message: "OOM-killed: memory limit 64 MiB (killed by signal 9 (SIGKILL))"}},
		{"oom of a child", exitRecord{ExitCode: 137}, true, false, 1536 << 10,
			Exit{ContainerID: "c", ExitCode: 137, OOMKilled: true, Message: "OOM-killed: memory limit 1.5 MiB (exited with code 137)"}},
		{"killed", exitRecord{ExitCode: -1, Signal: 15}, false, true, 0,
			Exit{ContainerID: "c", ExitCode: -1, Signal: 15, Killed: true, Message: "killed on request (killed by signal 15 (SIGTERM))"}},
		{"no status", exitRecord{ExitCode: -1, Error: "the supervisor ended without recording the task's exit status"}, false, false, 0,
			Exit{ContainerID: "c", ExitCode: -1, Message: "the supervisor ended without recording the task's exit status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := describeExit("c", tt.rec, tt.oom, tt.killed, tt.mem)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommandLine(t *testing.T) {
	sandbox := t.TempDir()
	if err := os.WriteFile(filepath.Join(sandbox, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sandbox, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		cmd      *slacklinev1.CommandInfo
		wantPath string
		wantArgv []string
		wantErr  string
	}{
		{"shell", &slacklinev1.CommandInfo{Value: "echo hi | wc", Shell: true}, "/bin/sh", []string{"/bin/sh", "-c", "echo hi | wc"}, ""},
		{"argv includes argv0", &slacklinev1.CommandInfo{Value: "sh", Arguments: []string{"mysh", "-c", "true"}}, "/bin/sh", []string{"mysh", "-c", "true"}, ""},
		{"no arguments", &slacklinev1.CommandInfo{Value: "sh"}, "/bin/sh", []string{"sh"}, ""},
		{"relative to sandbox", &slacklinev1.CommandInfo{Value: "./run.sh"}, filepath.Join(sandbox, "run.sh"), []string{"./run.sh"}, ""},
		{"not executable", &slacklinev1.CommandInfo{Value: "./data"}, "", nil, "not an executable file"},
		{"missing", &slacklinev1.CommandInfo{Value: "does-not-exist"}, "", nil, "not found in PATH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, argv, err := commandLine(Spec{Command: tt.cmd}, "/nonexistent:/bin", sandbox)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %v, want ErrInvalidSpec containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || path != tt.wantPath || !cmp.Equal(argv, tt.wantArgv) {
				t.Errorf("commandLine = %q, %q, %v; want %q, %q", path, argv, err, tt.wantPath, tt.wantArgv)
			}
		})
	}
}

func TestTaskEnv(t *testing.T) {
	t.Setenv("PATH", "/agent/bin")
	t.Setenv("AGENT_SECRET", "x")
	spec := Spec{
		FrameworkID: "f1", TaskID: "t1",
		Command: &slacklinev1.CommandInfo{Value: "true", Environment: map[string]string{"A": "command", "B": "command", "SLACKLINE_TASK_ID": "spoofed"}},
		Env:     map[string]string{"B": "spec"},
		User:    "alice",
	}
	got := taskEnv(spec, "cid", "/sb/cid")
	want := []string{"A=command", "B=spec", "HOME=/sb/cid", "LOGNAME=alice", "PATH=/agent/bin", "SLACKLINE_CONTAINER_ID=cid",
		"SLACKLINE_FRAMEWORK_ID=f1", "SLACKLINE_SANDBOX=/sb/cid", "SLACKLINE_TASK_ID=t1", "USER=alice"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestWriteJSONAtomic(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "x.json")
	for i := range 3 {
		if err := writeJSON(file, map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]int
	if err := readJSON(file, &got); err != nil || got["n"] != 2 {
		t.Errorf("read back %v, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestExitQueueKeepsOrderWithoutBlocking(t *testing.T) {
	q := newExitQueue()
	defer q.close()
	for i := range 1000 { // far more than any channel buffer: push never blocks
		q.push(Exit{ContainerID: string(rune('a' + i%26)), ExitCode: i})
	}
	for i := range 1000 {
		if e := <-q.out; e.ExitCode != i {
			t.Fatalf("exit %d arrived as %d", i, e.ExitCode)
		}
	}
}

// TestRecoverDecisionsOnFakeTree drives Recover through checkpoints whose
// supervisors are gone, without privileges: the outcome comes from the exit
// file and the (fake) cgroup's OOM counter, or the container is lost.
func TestRecoverDecisionsOnFakeTree(t *testing.T) {
	cfg := fakeConfig(t, fakeHybridFiles)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mnt := cfg.CgroupMountpoint
	bootID, err := readBootID("/proc")
	if err != nil {
		t.Fatal(err)
	}
	type fixture struct {
		id       string
		bootID   string
		exit     *exitRecord
		oomKills string // memory.oom_control oom_kill now; baseline is 0
		noCgroup bool
		killed   bool
		wantExit Exit
	}
	fixtures := []fixture{
		{id: "done", bootID: bootID, exit: &exitRecord{ExitCode: 3}, oomKills: "0",
			wantExit: Exit{ContainerID: "done", ExitCode: 3, Message: "exited with code 3"}},
		{id: "oom", bootID: bootID, exit: &exitRecord{ExitCode: -1, Signal: 9}, oomKills: "1",
			wantExit: Exit{ContainerID: "oom", ExitCode: -1, Signal: 9, OOMKilled: true, Message: "OOM-killed: memory limit 64 MiB (killed by signal 9 (SIGKILL))"}},
		{id: "killed", bootID: bootID, exit: &exitRecord{ExitCode: 143}, oomKills: "0", killed: true,
			wantExit: Exit{ContainerID: "killed", ExitCode: 143, Killed: true, Message: "killed on request (exited with code 143)"}},
		{id: "rebooted", bootID: "another-boot", noCgroup: true,
			wantExit: Exit{ContainerID: "rebooted", ExitCode: -1, Lost: true}},
		{id: "vanished", bootID: bootID, noCgroup: true,
			wantExit: Exit{ContainerID: "vanished", ExitCode: -1, Lost: true}},
	}
	for _, f := range fixtures {
		rel := cgroups.ContainerRel(cfg.CgroupRoot, cgroups.Guaranteed, f.id)
		layout := c.layout
		paths := layout.PathsOf(rel)
		if !f.noCgroup {
			for _, d := range paths.Dirs() {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(paths.Memory, "memory.oom_control"),
				[]byte("oom_kill_disable 0\nunder_oom 0\noom_kill "+f.oomKills+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dir := filepath.Join(cfg.StateDir, f.id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cp := checkpoint{
			Version: checkpointVer, ID: f.id, Resources: "cpus:1;mem:64", Command: commandRecord{Value: "true"},
			Layout: layout, Cgroup: paths, Limits: cgroups.Limits{CPUs: 1, MemoryBytes: 64 << 20},
			BootID: f.bootID, KillRequested: f.killed,
			// A pid that cannot be the supervisor: its start time never matches.
			Supervisor: &procRef{Pid: os.Getpid(), StartTime: 1}, Task: &procRef{Pid: os.Getpid(), StartTime: 1},
		}
		if err := writeJSON(filepath.Join(dir, checkpointFile), &cp); err != nil {
			t.Fatal(err)
		}
		if f.exit != nil {
			if err := writeJSON(filepath.Join(dir, exitFile), f.exit); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An orphaned cgroup (no checkpoint) is removed; an empty state directory too.
	orphan := c.layout.PathsOf(cgroups.ContainerRel(cfg.CgroupRoot, cgroups.Revocable, "orphan"))
	for _, d := range orphan.Dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(d, "cgroup.procs"), nil, 0o644)
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "half-launched"), 0o755); err != nil {
		t.Fatal(err)
	}

	running, err := c.Recover(context.Background())
	if err != nil || len(running) != 0 {
		t.Fatalf("Recover = %v, %v; want nothing running", running, err)
	}
	got := map[string]Exit{}
	timeout := time.After(10 * time.Second)
	for len(got) < len(fixtures) {
		select {
		case e := <-c.Exits():
			got[e.ContainerID] = e
		case <-timeout:
			t.Fatalf("only %d exits: %v", len(got), got)
		}
	}
	for _, f := range fixtures {
		e := got[f.id]
		if f.wantExit.Lost {
			if !e.Lost || !strings.HasPrefix(e.Message, "container lost: ") {
				t.Errorf("%s: exit %+v, want Lost", f.id, e)
			}
			continue
		}
		if diff := cmp.Diff(f.wantExit, e); diff != "" {
			t.Errorf("%s: exit (-want +got):\n%s", f.id, diff)
		}
	}
	for _, d := range orphan.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("orphaned cgroup %s not removed", d)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "half-launched")); !errors.Is(err, os.ErrNotExist) {
		t.Error("state directory without checkpoint not removed")
	}
	if len(c.Containers()) != len(fixtures) {
		t.Errorf("Containers() = %d, want the %d ended containers until Destroy", len(c.Containers()), len(fixtures))
	}
	// Every change of what Containers returns moves ContainersVersion.
	version := c.ContainersVersion()
	if version == 0 {
		t.Error("ContainersVersion did not move while Recover readied containers")
	}
	for _, f := range fixtures {
		if err := c.Destroy(f.id); err != nil {
			t.Errorf("Destroy(%s): %v", f.id, err)
		}
		if v := c.ContainersVersion(); v == version {
			t.Errorf("Destroy(%s): ContainersVersion did not move", f.id)
		} else {
			version = v
		}
		if _, err := os.Stat(filepath.Join(mnt, "cpu", cfg.CgroupRoot, "guaranteed", f.id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: cgroup left after Destroy", f.id)
		}
	}
	if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 0 {
		t.Errorf("checkpoints left after Destroy: %v", entries)
	}
	if err := c.Kill(context.Background(), "done"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Kill of a destroyed container = %v, want ErrNotFound", err)
	}
}

// TestRecoverSetsAsideUnreadableCheckpoints: a checkpoint torn by a host
// crash (empty, or cut short) cannot be recovered. Its container is not
// known after Recover (the agent reports its task lost), its cgroups are
// removed like an orphan's, and its state directory is set aside, at most
// maxSetAside of them, instead of being skipped on every start forever.
func TestRecoverSetsAsideUnreadableCheckpoints(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, fakeHybridFiles)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const torn = maxSetAside + 2
	var cgroupDirs []string
	for i := range torn {
		id := fmt.Sprintf("torn-%d", i)
		dir := filepath.Join(cfg.StateDir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		content := []byte(`{"version": 1, "id": "torn-`) // cut short
		if i%2 == 0 {
			content = nil // empty: a rename whose data never reached the disk
		}
		if err := os.WriteFile(filepath.Join(dir, checkpointFile), content, 0o600); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			p := c.layout.PathsOf(cgroups.ContainerRel(cfg.CgroupRoot, cgroups.Guaranteed, id))
			for _, d := range p.Dirs() {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				_ = os.WriteFile(filepath.Join(d, "cgroup.procs"), nil, 0o644)
				cgroupDirs = append(cgroupDirs, d)
			}
		}
	}
	for round := range 2 { // the set-aside directory is not a container on the next start
		running, err := c.Recover(context.Background())
		if err != nil || len(running) != 0 {
			t.Fatalf("round %d: Recover = %v, %v; want nothing running", round, running, err)
		}
		if n := len(c.Containers()); n != 0 {
			t.Fatalf("round %d: %d containers known, want none", round, n)
		}
	}
	entries, err := os.ReadDir(cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != setAsideDir {
		t.Fatalf("state directory holds %v, want only %s", entries, setAsideDir)
	}
	aside, err := os.ReadDir(filepath.Join(cfg.StateDir, setAsideDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(aside) != maxSetAside {
		t.Errorf("%d set aside, want the newest %d", len(aside), maxSetAside)
	}
	for _, e := range aside {
		if strings.HasPrefix(e.Name(), "torn-0.") || strings.HasPrefix(e.Name(), "torn-1.") {
			t.Errorf("%s kept: the oldest should have been removed", e.Name())
		}
	}
	for _, d := range cgroupDirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s of an unreadable checkpoint not removed", d)
		}
	}
}
