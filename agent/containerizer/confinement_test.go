package containerizer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/resources"
)

func hasCgroupNamespaces() bool {
	_, err := os.Stat("/proc/self/ns/cgroup")
	return err == nil
}

func lookupIDs(t *testing.T, name string) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// dead reports whether pid has ended: gone, or a zombie its new parent
// (an orphan's reaper, outside the test's control) has not reaped yet.
func dead(pid int) bool {
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return true
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(data), ')')
	return i > 0 && strings.HasPrefix(strings.TrimSpace(string(data[i+1:])), "Z")
}

// readSandbox returns a file of ct's sandbox, trimmed.
func readSandbox(t *testing.T, ct *Container, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(ct.Sandbox, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// statField returns field n (1-based, as in proc(5)) of /proc/<pid>/stat.
func statField(t *testing.T, pid, n int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(data), ')')
	return strings.Fields(string(data[i+1:]))[n-3]
}

// TestTaskRunsConfinedAsTheDefaultUser: a task with no user runs as the
// agent's default, a named user (nobody) or a dynamic user of its own,
// with no_new_privs, in its own session, cgroup namespace and sandbox.
func TestTaskRunsConfinedAsTheDefaultUser(t *testing.T) {
	t.Run("nobody", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.TaskUser = "nobody"
		uid, gid := lookupIDs(t, "nobody")
		testConfinedAs(t, cfg, func(id string) (int, int, string) { return uid, gid, "nobody" })
	})
	t.Run("dynamic", func(t *testing.T) {
		testConfinedAs(t, testConfig(t), func(id string) (int, int, string) {
			n, err := strconv.Atoi(id)
			if err != nil || n < int(testIDs.First) || n >= int(testIDs.First+testIDs.Count) {
				t.Fatalf("task's uid %q: want one of the dynamic range %v", id, testIDs)
			}
			return n, n, "slackline-" + id
		})
	})
}

// testConfinedAs launches a task as cfg's default user; want returns the
// uid, gid and name expected, given the uid the task reports.
func testConfinedAs(t *testing.T, cfg Config, want func(uid string) (int, int, string)) {
	c := newTest(t, cfg)
	ct := launch(t, c, Spec{TaskID: "whoami",
		Command: shell(`id -u > uid; id -g > gid; grep NoNewPrivs /proc/self/status > nnp; echo $USER > user; exec sleep 1000`)})
	eventually(t, "the task's reports", func() bool {
		_, err := os.Stat(filepath.Join(ct.Sandbox, "user"))
		return err == nil
	})
	eventually(t, "the task's exec of sleep", func() bool {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ct.Pid))
		return strings.TrimSpace(string(comm)) == "sleep"
	})
	uid, gid, name := want(readSandbox(t, ct, "uid"))
	for file, want := range map[string]string{
		"uid": strconv.Itoa(uid), "gid": strconv.Itoa(gid), "nnp": "NoNewPrivs:\t1", "user": name,
	} {
		if got := readSandbox(t, ct, file); got != want {
			t.Errorf("task's %s = %q, want %q", file, got, want)
		}
	}
	if got := ct.Spec.User; got != name {
		t.Errorf("Container.Spec.User = %q, want %q", got, name)
	}
	// Its own session: session id (field 6) and process group (field 5)
	// are its pid.
	if sid, pgrp := statField(t, ct.Pid, 6), statField(t, ct.Pid, 5); sid != strconv.Itoa(ct.Pid) || pgrp != sid {
		t.Errorf("task %d: session %s, process group %s; want its own", ct.Pid, sid, pgrp)
	}
	if hasCgroupNamespaces() {
		mine, _ := os.Readlink("/proc/self/ns/cgroup")
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/cgroup", ct.Pid))
		if err != nil || its == mine {
			t.Errorf("task's cgroup namespace %q (%v), the test's %q: want its own", its, err, mine)
		}
	}
	// The sandbox is the user's and closed to others.
	for name, want := range map[string]os.FileMode{"": os.ModeDir | 0o750, "stdout": 0o640, "stderr": 0o640} {
		st, err := os.Lstat(filepath.Join(ct.Sandbox, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode() != want || int(sys.Uid) != uid || int(sys.Gid) != gid {
			t.Errorf("sandbox %q: mode %v owner %d:%d, want %v %d:%d", name, st.Mode(), sys.Uid, sys.Gid, want, uid, gid)
		}
	}
	// The state directory is root's alone.
	if st, err := os.Stat(filepath.Join(c.cfg.StateDir, ct.ID)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("state directory: %v, %v; want mode 0700", st.Mode(), err)
	}
	if err := c.Kill(context.Background(), ct.ID); err != nil {
		t.Fatal(err)
	}
	waitExit(t, c, ct.ID)
}

// TestDynamicUsersIsolateTasks: two tasks with the default (dynamic) user
// run as different users: neither can signal the other or read the
// other's sandbox, which two tasks of one named user could. Once a task's
// container is destroyed its sandbox is root's, mode 0700, so whoever gets
// its id after the range wraps finds nothing.
func TestDynamicUsersIsolateTasks(t *testing.T) {
	c := newTest(t, testConfig(t))
	a := launch(t, c, Spec{TaskID: "a", Command: shell(`echo secret > secret; exec sleep 1000`)})
	eventually(t, "a's secret", func() bool {
		_, err := os.Stat(filepath.Join(a.Sandbox, "secret"))
		return err == nil
	})
	b := launch(t, c, Spec{TaskID: "b", Command: shell(fmt.Sprintf(
		`id -u > uid; if kill -0 %d 2>/dev/null; then echo yes; else echo no; fi > signal; `+
			`if cat %s/secret >/dev/null 2>&1; then echo yes; else echo no; fi > read; touch done`,
		a.Pid, a.Sandbox))})
	if e := waitExit(t, c, b.ID); e.ExitCode != 0 {
		t.Fatalf("b: %+v", e)
	}
	if readSandbox(t, b, "uid") == strconv.Itoa(int(fileOwner(t, a.Sandbox))) {
		t.Fatalf("a and b share uid %s", readSandbox(t, b, "uid"))
	}
	if got := readSandbox(t, b, "signal"); got != "no" {
		t.Errorf("b could signal a (kill -0: %s)", got)
	}
	if got := readSandbox(t, b, "read"); got != "no" {
		t.Errorf("b could read a's sandbox (%s)", got)
	}
	if err := c.Kill(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	waitExit(t, c, a.ID)
	if err := c.Destroy(a.ID); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(a.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if owner := fileOwner(t, a.Sandbox); owner != 0 || st.Mode().Perm() != 0o700 {
		t.Errorf("a's sandbox after Destroy: owner %d mode %v, want root's, 0700", owner, st.Mode().Perm())
	}
}

// fileOwner returns the uid owning path.
func fileOwner(t *testing.T, path string) uint32 {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}

// TestTaskCannotLeaveItsCgroups has a task, and a child of it in a new
// session, try to move itself into the cgroups an escape would aim for:
// the hierarchies' roots, the agent's root, both subtrees. Every write must
// fail, and both stay in the container's cgroups.
func TestTaskCannotLeaveItsCgroups(t *testing.T) {
	c := newTest(t, testConfig(t))
	root := c.cfg.CgroupRoot
	var targets []string
	for _, rel := range []string{"", root, cgroups.Subtree(root, cgroups.Revocable), cgroups.Subtree(root, cgroups.Guaranteed)} {
		targets = append(targets, c.layout.PathsOf(rel).ProcsFiles()...)
	}
	if c.Mode() == ModeHybrid {
		targets = append(targets, filepath.Join(c.layout.CPU, cgroups.Subtree(root, cgroups.Revocable), "tasks"))
	}
	// $ESCAPE ROLE: records its pid, tries every target, then sleeps. (In
	// the environment: the host's /tmp, where the test's files are, is not
	// the task's.)
	body := "echo $$ > $1.pid\nfor f in " + strings.Join(targets, " ") +
		"; do if echo $$ > $f; then echo \"$1 moved to $f\"; fi; done\nexec sleep 1000\n"
	ct := launch(t, c, Spec{TaskID: "escape", Env: map[string]string{"ESCAPE": body},
		Command: shell(`setsid sh -c "$ESCAPE" escape child & exec sh -c "$ESCAPE" escape main`)})
	var child int
	eventually(t, "both attempts", func() bool {
		data, _ := os.ReadFile(filepath.Join(ct.Sandbox, "child.pid"))
		child, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		if child > 0 {
			child = hostPid(c, ct.ID, child)
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		mainComm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ct.Pid))
		// The supervisor copies the output: it may arrive a moment later.
		errs, _ := os.ReadFile(filepath.Join(ct.Sandbox, "stderr"))
		return child > 0 && strings.TrimSpace(string(comm)) == "sleep" && strings.TrimSpace(string(mainComm)) == "sleep" &&
			strings.Count(string(errs), "\n") >= 2*len(targets)
	})
	if out := readSandbox(t, ct, "stdout"); out != "" {
		t.Errorf("task moved itself:\n%s", out)
	}
	errs := readSandbox(t, ct, "stderr")
	if n := strings.Count(errs, "Permission denied"); n != 2*len(targets) {
		t.Errorf("%d writes refused for lack of permission, want %d; stderr:\n%s", n, 2*len(targets), errs)
	}
	for _, pid := range []int{ct.Pid, child} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		checkInCgroups(t, c, string(data), ct.CgroupPath)
	}
	if pids, _ := c.Pids(ct.ID); !slices.Contains(pids, child) || !slices.Contains(pids, ct.Pid) {
		t.Errorf("Pids = %v, want %d and %d among them", pids, ct.Pid, child)
	}
	if sid := statField(t, child, 6); sid != strconv.Itoa(child) {
		t.Errorf("child's session %s, want its own (%d)", sid, child)
	}
	if files := c.layout.MembershipFilesWritableByOthers(ct.CgroupPath); len(files) > 0 {
		t.Errorf("membership files writable by others than root: %v", files)
	}
	if err := c.Kill(context.Background(), ct.ID); err != nil {
		t.Fatal(err)
	}
	waitExit(t, c, ct.ID)
	if !dead(child) {
		t.Errorf("child %d in its own session survived the kill", child)
	}
}

// TestDaemonsEndWithTheTask: processes a task put in new sessions, directly
// or double-forked, are killed when its main process exits.
func TestDaemonsEndWithTheTask(t *testing.T) {
	c := newTest(t, testConfig(t))
	// The daemons sleep for a time no other process of the host does.
	nap := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1e6)
	ct := launch(t, c, Spec{TaskID: "daemons", Command: shell(
		`setsid sh -c 'echo $$ > setsid.pid; exec sleep ` + nap + `' & ` +
			`(setsid sh -c 'echo $$ > daemon.pid; exec sleep ` + nap + `' &) ; ` +
			`while [ ! -s setsid.pid ] || [ ! -s daemon.pid ]; do sleep 0.05; done; exit 4`)})
	e := waitExit(t, c, ct.ID)
	if e.ExitCode != 4 {
		t.Errorf("exit = %+v, want code 4", e)
	}
	if pids := processesWith(t, "sleep\x00"+nap+"\x00"); len(pids) > 0 {
		t.Errorf("the task's daemons %v outlived it", pids)
	}
	if pids, err := c.Pids(ct.ID); err != nil || len(pids) != 0 {
		t.Errorf("after the exit: pids %v, %v", pids, err)
	}
	if err := c.Destroy(ct.ID); err != nil {
		t.Error(err)
	}
}

func TestTaskUsers(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	for _, tt := range []struct {
		name, user, wantErr string
	}{
		{"root refused", "root", `user "root" is root (uid 0)`},
		{"unknown user", "no-such-user-here", `user "no-such-user-here" does not exist`},
		{"uid is not a name", "0", `user "0" does not exist`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Launch(context.Background(), Spec{ContainerID: "refused", User: tt.user,
				Resources: resources.MustParse("cpus:0.1;mem:32"), Command: shell("true")})
			if !errors.Is(err, ErrTaskUser) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Launch as %q = %v, want ErrTaskUser containing %q", tt.user, err, tt.wantErr)
			}
		})
	}
	if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 0 {
		t.Errorf("state left after refused launches: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(cfg.SandboxDir, "refused")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox created for a refused launch (%v)", err)
	}

	t.Run("root allowed", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.AllowRootTasks = true
		c := newTest(t, cfg)
		ct := launch(t, c, Spec{User: "root", Command: shell("id -u")})
		if e := waitExit(t, c, ct.ID); e.ExitCode != 0 {
			t.Fatalf("exit %+v", e)
		}
		if got := readSandbox(t, ct, "stdout"); got != "0" {
			t.Errorf("id -u = %q, want 0", got)
		}
	})
	t.Run("default user root refused by New", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.TaskUser = "root"
		if _, err := New(cfg); !errors.Is(err, ErrTaskUser) {
			t.Errorf("New with TaskUser root = %v, want ErrTaskUser", err)
		}
	})
}

func TestResolveUser(t *testing.T) {
	uid, gid := lookupIDs(t, "nobody")
	u, err := resolveUser("nobody", false)
	if err != nil || int(u.UID) != uid || int(u.GID) != gid || !slices.Contains(u.Groups, uint32(gid)) {
		t.Errorf("resolveUser(nobody) = %+v, %v; want uid %d gid %d with the primary group among its groups", u, err, uid, gid)
	}
	if u, err := resolveUser("root", true); err != nil || u.UID != 0 {
		t.Errorf("resolveUser(root, allowed) = %+v, %v", u, err)
	}
	for _, name := range []string{"root", "no-such-user-here", ""} {
		if _, err := resolveUser(name, false); !errors.Is(err, ErrTaskUser) {
			t.Errorf("resolveUser(%q) = %v, want ErrTaskUser", name, err)
		}
	}
}

func TestUntraversable(t *testing.T) {
	closed := filepath.Join(t.TempDir(), "closed")
	open := filepath.Join(closed, "open")
	if err := os.MkdirAll(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if got := untraversable(open); got != closed {
		t.Errorf("untraversable(%s) = %q, want %q", open, got, closed)
	}
	if got := untraversable("/usr/bin"); got != "" {
		t.Errorf("untraversable(/usr/bin) = %q, want none", got)
	}
}

func TestMembershipFilesWritableByOthers(t *testing.T) {
	mount := t.TempDir()
	unified := filepath.Join(mount, "a", "b")
	if err := os.MkdirAll(unified, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(mount, "cgroup.procs"), 0o644},
		{filepath.Join(mount, "a", "cgroup.procs"), 0o666},
		{filepath.Join(mount, "a", "b", "cgroup.procs"), 0o644},
		{filepath.Join(mount, "a", "b", "cgroup.threads"), 0o664},
	} {
		if err := os.WriteFile(f.path, nil, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f.path, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	l := cgroups.Layout{Mode: cgroups.ModeV2, Mountpoint: mount, Unified: mount}
	got := l.MembershipFilesWritableByOthers("a/b")
	want := []string{filepath.Join(mount, "a", "cgroup.procs"), filepath.Join(mount, "a", "b", "cgroup.threads")}
	if os.Geteuid() != 0 {
		// Owned by the test's user, not root: every file counts.
		want = []string{filepath.Join(mount, "cgroup.procs"), filepath.Join(mount, "a", "cgroup.procs"),
			filepath.Join(mount, "a", "b", "cgroup.procs"), filepath.Join(mount, "a", "b", "cgroup.threads")}
	}
	if !slices.Equal(got, want) {
		t.Errorf("MembershipFilesWritableByOthers = %v, want %v", got, want)
	}
}

// TestTaskRunsUnderAClosedWorkDir: the agent's work dir is root's, 0700, as
// in production and under `make run`; a task, which cannot search it, still
// starts in its sandbox and writes there by relative path, with and without
// its own namespaces.
func TestTaskRunsUnderAClosedWorkDir(t *testing.T) {
	for _, isolation := range []struct {
		name string
		iso  Isolation
	}{{"namespaces", DefaultIsolation}, {"none", Isolation{NoNamespaces: true, NoSeccomp: true}}} {
		t.Run(isolation.name, func(t *testing.T) {
			cfg := testConfig(t)
			// Root's, 0700, and outside /tmp: the private /tmp of a task's
			// mount namespace is made of directories it can search.
			closed, err := os.MkdirTemp("/run", "slackline-closed-work-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(closed) })
			cfg.StateDir, cfg.SandboxDir = filepath.Join(closed, "containers"), filepath.Join(closed, "sandboxes")
			cfg.Isolation = isolation.iso
			c := newTest(t, cfg)
			ct := launch(t, c, Spec{TaskID: "closed", Command: shell(`id -u > uid; echo started > out`)})
			if exit := waitExit(t, c, ct.ID); exit.ExitCode != 0 {
				t.Fatalf("task under a closed work dir: %+v", exit)
			}
			if got := readSandbox(t, ct, "out"); got != "started" {
				t.Errorf("sandbox file out = %q, want started", got)
			}
		})
	}
}
