package cgrouptest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/privileged"
)

// TestDescribe: a process left in a cgroup is named with its command and
// state, so that a report says whether it was stuck (D) or stopped (T).
func TestDescribe(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)
	// Asleep once it has run far enough to wait in nanosleep.
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = describe([]string{pid, "999999999"}); strings.Contains(got, pid+" sleep S") {
			break
		}
	}
	if want := "[" + pid + " sleep S"; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "; 999999999]") {
		t.Fatalf("describe = %q, want it to start %q and end with the gone process's bare pid", got, want)
	}
}

// TestEnterPriorityLeaveRemovesStrays: what a test leaves below the
// priority parent (a task cgroup whose process outlived its agent) is
// killed and removed when the tests leave, parent included, where it
// used to keep the parent busy and left it behind.
func TestEnterPriorityLeaveRemovesStrays(t *testing.T) {
	privileged.Require(t) // moves the test process: not parallel
	name := fmt.Sprintf("slackline-cgrouptest-%d", os.Getpid())
	leave, err := EnterPriority(name)
	if err != nil {
		t.Fatal(err)
	}
	v2 := filepath.Join(Mountpoint, "unified")
	if _, err := os.Stat(v2); err != nil {
		v2 = Mountpoint
	}
	stray := filepath.Join(v2, name, "agent-root", "task")
	if err := os.MkdirAll(stray, 0o755); err != nil {
		leave()
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		leave()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(stray, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		_ = cmd.Process.Kill()
		leave()
		t.Fatal(err)
	}
	leave()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the stray process still runs 30 s after leave")
	}
	for _, h := range hierarchies {
		if dir := filepath.Join(Mountpoint, h, name); h != "" || v2 == Mountpoint {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still exists after leave (stat: %v)", dir, err)
			}
		}
	}
}
