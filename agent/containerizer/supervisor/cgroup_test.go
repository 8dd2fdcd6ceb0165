package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/privileged"
)

// TestKillReleasesMemory: KillAndWait frees a killed process's memory
// before the process runs to its exit (killwait.ReleaseMemory, which
// cgroups.Paths.KillAndWait shares). The process holds 96 MiB and is
// frozen by the v1 freezer, which a SIGKILL does not thaw: killed, it
// cannot run, and its memory stays until KillAndWait asks the kernel to
// reap it. It needs a hybrid host (the v1 freezer beside the v2
// tree); a pure v2 freezer lets a killed task exit.
func TestKillReleasesMemory(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	const mount = "/sys/fs/cgroup"
	freezerRoot, unifiedRoot := filepath.Join(mount, "freezer"), filepath.Join(mount, "unified")
	for _, dir := range []string{freezerRoot, unifiedRoot} {
		if _, err := os.Stat(dir); err != nil {
			t.Skipf("needs a hybrid host's v1 freezer and v2 tree to hold a killed process: %v", err)
		}
	}
	rel := fmt.Sprintf("slackline-supervisor-test-%d", os.Getpid())
	freezer, unified := filepath.Join(freezerRoot, rel), filepath.Join(unifiedRoot, rel)
	for _, dir := range []string{freezer, unified} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(file, value string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(value), 0); err != nil {
			t.Fatal(err)
		}
	}
	// The shell waits for a line (it is moved into the cgroups first), then
	// holds 96 MiB in a variable.
	cmd := exec.Command("/bin/sh", "-c", `read go; x=$(head -c 100663296 /dev/zero | tr '\0' a); echo ready; read never`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("THAWED"), 0)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for _, dir := range []string{freezer, unified} {
			for deadline := time.Now().Add(5 * time.Second); os.Remove(dir) != nil && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	write(filepath.Join(unified, "cgroup.procs"), strconv.Itoa(pid))
	write(filepath.Join(freezer, "cgroup.procs"), strconv.Itoa(pid))
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the shell said %q, %v; want ready", line, err)
	}
	if rss := vmRSS(t, pid); rss < 90<<20 {
		t.Fatalf("the shell holds %d bytes, want 96 MiB", rss)
	}
	write(filepath.Join(freezer, "freezer.state"), "FROZEN")
	for deadline := time.Now().Add(10 * time.Second); ; {
		state, err := os.ReadFile(filepath.Join(freezer, "freezer.state"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(bytes.TrimSpace(state), []byte("FROZEN")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("freezer.state %q 10 s after FROZEN was asked", bytes.TrimSpace(state))
		}
		time.Sleep(10 * time.Millisecond)
	}

	c := Cgroup{Unified: unified}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	// Killed and frozen: it cannot exit, and nothing has freed its memory.
	if rss := vmRSS(t, pid); rss < 90<<20 {
		t.Fatalf("the killed, frozen shell holds %d bytes before KillAndWait: the premise (a killed process keeps its memory until it runs) does not hold", rss)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.KillAndWait(ctx); err == nil {
		t.Fatal("KillAndWait returned with the frozen process still in the cgroup")
	}
	if rss := vmRSS(t, pid); rss > 8<<20 {
		t.Errorf("the killed shell still holds %d bytes after KillAndWait; want its memory released while it cannot run", rss)
	}
	write(filepath.Join(freezer, "freezer.state"), "THAWED")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := c.KillAndWait(ctx2); err != nil {
		t.Fatal(err)
	}
}

// vmRSS returns the resident memory of process pid (benchutil.RSSBytes).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	rss, err := benchutil.RSSBytes(pid)
	if err != nil {
		t.Fatal(err)
	}
	return rss
}
