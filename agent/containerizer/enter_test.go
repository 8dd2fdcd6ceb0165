package containerizer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	osexec "os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestExec runs commands inside a running container: they see the task's
// private /tmp, run as its user in its PID namespace and cgroups, return
// their exit codes and output, and are killed at their deadline.
func TestExec(t *testing.T) {
	cfg := testConfig(t)
	cfg.TaskUser = DynamicTaskUser
	c := newTest(t, cfg)
	ct := launch(t, c, Spec{TaskID: "exec", Command: shell("echo private > /tmp/marker && exec sleep 600")})
	t.Cleanup(func() { _ = c.Kill(context.Background(), ct.ID) })
	exec := func(timeout time.Duration, cmd *slacklinev1.CommandInfo) (int, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.Exec(ctx, ct.ID, cmd)
	}
	eventually(t, "the task wrote its marker", func() bool {
		code, _, err := exec(10*time.Second, shell("test -f /tmp/marker"))
		return err == nil && code == 0
	})
	uid := strings.TrimPrefix(ct.Spec.User, "slackline-")
	cmd := shell(`cat /tmp/marker; id -u; cat /proc/self/cgroup; echo "$SLACKLINE_TASK_ID $EXTRA"`)
	cmd.Environment = map[string]string{"EXTRA": "extra"}
	code, out, err := exec(10*time.Second, cmd)
	if err != nil || code != 0 {
		t.Fatalf("Exec = %d %q %v", code, out, err)
	}
	// In the task's cgroup namespace, rooted at its cgroups: "/" is the
	// task's own (outside it would read /../..).
	for _, want := range []string{"private\n", uid + "\n", "\n0::/\n", "exec extra"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q (the task's /tmp, user, cgroup, environment)", out, want)
		}
	}
	// On hybrid hosts, in the task's v1 cgroups too (the helper is born
	// in them, or joins them): "/" in every hierarchy the task has.
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[0] == "0" {
			continue
		}
		for ctrl := range strings.SplitSeq(f[1], ",") {
			if (ctrl == "cpu" || ctrl == "memory" || ctrl == "pids") && f[2] != "/" {
				t.Errorf("the command's cgroup in %s is %s, want the task's (/)", ctrl, f[2])
			}
		}
	}
	code, _, err = exec(10*time.Second, &slacklinev1.CommandInfo{Value: "sh", Arguments: []string{"sh", "-c", "exit 3"}})
	if err != nil || code != 3 {
		t.Errorf("exit 3: Exec = %d %v", code, err)
	}
	// The PID namespace: the task's init, its sleep, and the check's own.
	code, out, _ = exec(10*time.Second, shell("ls -d /proc/[0-9]*"))
	if n := len(strings.Fields(out)); code != 0 || n > 5 {
		t.Errorf("the check sees %d processes (%q), want the task's namespace only", n, out)
	}
	start := time.Now()
	_, _, err = exec(300*time.Millisecond, shell("sleep 100"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exec past its deadline = %v, want DeadlineExceeded", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("Exec past its deadline took %v to return", time.Since(start))
	}
	if _, _, err := c.Exec(context.Background(), "no-such-container", shell("true")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Exec in an unknown container = %v, want ErrNotFound", err)
	}
	_, _, err = exec(10*time.Second, &slacklinev1.CommandInfo{Value: "no-such-command-" + strconv.Itoa(int(time.Now().Unix()))})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Exec of a missing executable = %v, want not found", err)
	}
}

// TestDialInNamespace: a task with a network namespace of its own is
// dialled on the loopback inside it, not the host's.
func TestDialInNamespace(t *testing.T) {
	requirePrivileged(t)
	script := `import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.sendall(b"inside")
c.close()`
	cmd := osexec.Command("unshare", "--net", "sh", "-c", `ip link set lo up && exec /usr/bin/python3 -c "$0"`, script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var port int
	if _, err := fmt.Fscan(out, &port); err != nil {
		t.Fatalf("read the port: %v", err)
	}
	start, err := procStartTime("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ref := &procRef{Pid: cmd.Process.Pid, StartTime: start}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dialInNamespace(ctx, ref, addr)
	if err != nil {
		t.Fatalf("dialInNamespace: %v", err)
	}
	defer conn.Close()
	got, _ := io.ReadAll(conn)
	if string(got) != "inside" {
		t.Fatalf("read %q, want inside", got)
	}
	// A reused pid is never entered.
	if _, err := dialInNamespace(ctx, &procRef{Pid: ref.Pid, StartTime: ref.StartTime + 1}, addr); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dial with a stale start time = %v, want ErrNotFound", err)
	}
}
