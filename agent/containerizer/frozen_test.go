package containerizer

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

// TestFrozenCgroup: the first of a cgroup and its ancestors below the
// mount asked to freeze, or "" (no file, 0, above the mount ignored).
func TestFrozenCgroup(t *testing.T) {
	t.Parallel()
	mount := t.TempDir()
	write := func(rel, v string) {
		dir := filepath.Join(mount, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if v != "" {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("root", "0")
	write("root/revocable", "1")
	write("root/revocable/task", "0")
	write("root/guaranteed", "0")
	write("root/guaranteed/task", "0")
	write("root/self", "0")
	write("root/self/task", "1")
	write("root/nofile/task", "")
	if err := os.WriteFile(filepath.Join(mount, "cgroup.freeze"), []byte("1"), 0o644); err != nil {
		t.Fatal(err) // the mount itself (the root cgroup has no such file): ignored
	}
	for _, tt := range []struct {
		dir, mount, want string
	}{
		{"root/revocable/task", mount, "root/revocable"},
		{"root/guaranteed/task", mount, ""},
		{"root/self/task", mount, "root/self/task"},
		{"root/nofile/task", mount, ""},
		{"root/revocable/task", "", ""},
		{"", mount, ""},
		{"root/revocable/task", filepath.Join(mount, "root/revocable"), ""}, // the walk stops below the mount
	} {
		dir := ""
		if tt.dir != "" {
			dir = filepath.Join(mount, tt.dir)
		}
		want := ""
		if tt.want != "" {
			want = filepath.Join(mount, tt.want)
		}
		if got := frozenCgroup(dir, tt.mount); got != want {
			t.Errorf("frozenCgroup(%q, %q) = %q, want %q", tt.dir, tt.mount, got, want)
		}
	}
}

// TestExecFrozen: a COMMAND check of a task paused by the QoS freezer
// (the revocable subtree frozen) returns ErrFrozen at once instead of
// blocking in the helper's start until thaw (before, Exec started the
// helper born in the frozen cgroup and its Start never returned within
// the deadline). A start racing with a freeze returns at its deadline, and
// the process it eventually starts is killed and reaped once thawed.
func TestExecFrozen(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	ct := launch(t, c, Spec{TaskID: "frozen", Revocable: true, Command: shell("exec sleep 600")})
	t.Cleanup(func() { _ = c.SetRevocableFrozen(false); _ = c.Kill(context.Background(), ct.ID) })
	exec := func(timeout time.Duration) (int, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.Exec(ctx, ct.ID, shell("true"))
	}
	if code, out, err := exec(slowHostDeadline); err != nil || code != 0 {
		t.Fatalf("Exec before the freeze = %d %q %v", code, out, err)
	}
	if c.Frozen(ct.ID) {
		t.Fatal("Frozen before the freeze")
	}
	if err := c.SetRevocableFrozen(true); err != nil {
		t.Fatal(err)
	}
	if !c.Frozen(ct.ID) {
		t.Fatal("not Frozen once the revocable subtree froze")
	}
	// The deadline is far: only ErrFrozen (not DeadlineExceeded) shows
	// that Exec did not wait for it.
	if _, _, err := exec(slowHostDeadline); !errors.Is(err, ErrFrozen) {
		t.Fatalf("Exec in a frozen container = %v, want ErrFrozen", err)
	}

	// A start that blocks because the cgroup froze after the check.
	internal, err := c.lookup(ct.ID)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	dir := internal.cp.Cgroup.Unified
	c.mu.Unlock()
	started := make(chan *osexec.Cmd, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = startWithin(ctx, &internal.stuckStarts, func() (*osexec.Cmd, error) {
		cmd, _, err := supervisor.StartInCgroup(func() *osexec.Cmd {
			cmd := osexec.Command("sleep", "600")
			cmd.SysProcAttr = &syscall.SysProcAttr{}
			return cmd
		}, dir)
		started <- cmd
		return cmd, err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start in a frozen cgroup = %v, want DeadlineExceeded", err)
	}
	// While that start is stuck, Exec starts no other (checked before
	// cgroup.freeze, which might not show the freeze).
	if _, _, err := exec(slowHostDeadline); !errors.Is(err, ErrFrozen) || !strings.Contains(err.Error(), "still blocked") {
		t.Fatalf("Exec while a start is stuck = %v, want ErrFrozen (still blocked)", err)
	}
	if err := c.SetRevocableFrozen(false); err != nil {
		t.Fatal(err)
	}
	var cmd *osexec.Cmd
	select {
	case cmd = <-started:
	case <-time.After(slowHostDeadline):
		t.Fatal("the start did not return after the thaw")
	}
	if cmd.Process != nil {
		eventually(t, "the late-started process killed and reaped", func() bool {
			return errors.Is(unix.Kill(cmd.Process.Pid, 0), unix.ESRCH)
		})
	}
	eventually(t, "the stuck start no longer counted", func() bool { return internal.stuckStarts.Load() == 0 })
	if c.Frozen(ct.ID) {
		t.Error("Frozen after the thaw")
	}
	if code, out, err := exec(slowHostDeadline); err != nil || code != 0 {
		t.Errorf("Exec after the thaw = %d %q %v", code, out, err)
	}
}
