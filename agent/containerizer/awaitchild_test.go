package containerizer

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAwaitChildParksNoThread (#29): waiting for children that run parks
// no OS thread each (a Wait alone held one in waitid(2) per task's
// supervisor), and awaitChild returns only once its child has exited.
func TestAwaitChildParksNoThread(t *testing.T) {
	const n = 40
	threads := func() int {
		entries, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	type child struct {
		cmd   *exec.Cmd
		stdin *os.File
	}
	children := make([]child, n)
	for i := range children {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("cat") // exits at end of file on its stdin
		cmd.Stdin = r
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		children[i] = child{cmd, w}
	}
	t.Cleanup(func() {
		for _, c := range children {
			c.stdin.Close()
			_ = c.cmd.Wait()
		}
	})
	before := threads()
	exitedFirst := make(chan bool, n)
	for _, c := range children {
		go func() {
			awaitChild(c.cmd.Process.Pid)
			// Exited, not yet reaped: waitid with WNOWAIT sees it.
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, c.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			exitedFirst <- err == nil && info.Signo == int32(unix.SIGCHLD)
		}()
	}
	// Once every wait is parked in the runtime's poller ("IO wait"), none
	// has returned and the process has no thread per wait, as a wait
	// blocked in waitid(2) would hold ("syscall").
	deadline := time.Now().Add(30 * time.Second)
	for parkedInPoller() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d waits parked in the runtime's poller after 30 s", parkedInPoller(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(exitedFirst) > 0 {
		t.Fatal("awaitChild returned while its child was running")
	}
	if after := threads(); after >= before+n/2 {
		t.Fatalf("threads: %d before the waits, %d during: about one per waiting child", before, after)
	}
	for _, c := range children {
		c.stdin.Close()
	}
	for range n {
		if !<-exitedFirst {
			t.Fatal("awaitChild returned before its child had exited")
		}
	}
}

// parkedInPoller counts the goroutines waiting in awaitExit on the
// runtime's poller.
func parkedInPoller() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	parked := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "containerizer.awaitExit") {
			parked++
		}
	}
	return parked
}
