package cgrouptest

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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
