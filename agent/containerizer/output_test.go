package containerizer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOutputIsBounded runs a task that writes to stdout without end: at
// most Config.OutputLimit stays in the sandbox, and its stderr still
// arrives.
func TestOutputIsBounded(t *testing.T) {
	cfg := testConfig(t)
	cfg.OutputLimit = 64 << 10
	c := newTest(t, cfg)
	ct := launch(t, c, Spec{TaskID: "chatty", Command: shell("echo started >&2; exec yes slackline")})
	size := func() int64 {
		var total int64
		for _, name := range []string{"stdout", "stdout.1"} {
			if fi, err := os.Stat(filepath.Join(ct.Sandbox, name)); err == nil {
				total += fi.Size()
			}
		}
		return total
	}
	older := func() uint64 {
		fi, err := os.Stat(filepath.Join(ct.Sandbox, "stdout.1"))
		if err != nil {
			return 0
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	eventually(t, "output rotated", func() bool { return older() != 0 })
	first := older()
	eventually(t, "output rotated again", func() bool { return older() != first })
	if got := size(); got > cfg.OutputLimit {
		t.Errorf("%d bytes of stdout on disk, limit %d", got, cfg.OutputLimit)
	}
	if err := c.Kill(t.Context(), ct.ID); err != nil {
		t.Fatal(err)
	}
	waitExit(t, c, ct.ID)
	if got := size(); got > cfg.OutputLimit {
		t.Errorf("%d bytes of stdout on disk after the end, limit %d", got, cfg.OutputLimit)
	}
	if b, _ := os.ReadFile(filepath.Join(ct.Sandbox, "stdout")); !strings.HasPrefix(string(b), "slackline\n") && !strings.Contains(string(b), "\nslackline\n") {
		t.Errorf("stdout %.40q... is not the task's output", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ct.Sandbox, "stderr")); string(b) != "started\n" {
		t.Errorf("stderr %q", b)
	}
	// The files rotation made are the task's user's, as Launch's were.
	owner := func(name string) uint32 {
		fi, err := os.Stat(filepath.Join(ct.Sandbox, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	if owner("stdout") != owner("stderr") || owner("stdout.1") != owner("stderr") {
		t.Errorf("owners: stdout %d, stdout.1 %d, stderr %d", owner("stdout"), owner("stdout.1"), owner("stderr"))
	}
}

// TestForkBombStopsAtPidsMax runs a task that forks far more children
// than its pids.max allows: its cgroup never holds more, its forks fail,
// and the host's other processes are untouched (the test itself keeps
// forking: it launches a second task afterwards).
func TestForkBombStopsAtPidsMax(t *testing.T) {
	cfg := testConfig(t)
	cfg.PidsMax = 16
	c := newTest(t, cfg)
	if c.layout.Pids == "" {
		t.Skip("this host has no usable pids controller")
	}
	// Bounded, so that a broken limit cannot hurt the host: 200 sleepers.
	ct := launch(t, c, Spec{TaskID: "bomb", Command: shell("i=0; while [ $i -lt 200 ]; do sleep 600 & i=$((i+1)); done; echo done; sleep 600")})
	var cp checkpoint
	if err := readJSON(filepath.Join(cfg.StateDir, ct.ID, checkpointFile), &cp); err != nil {
		t.Fatal(err)
	}
	// The shell reports a fork the limit refused (and may give up there),
	// a line written in pieces ("/bin/sh: 0: ", then the reason): wait for
	// its end.
	eventually(t, "a fork to fail", func() bool {
		b, _ := os.ReadFile(filepath.Join(ct.Sandbox, "stderr"))
		return bytes.Contains(b, []byte("\n"))
	})
	n, ok := c.layout.PidsCurrent(cp.Cgroup)
	if !ok || n > cfg.PidsMax {
		t.Fatalf("pids.current %d (%v), want at most %d", n, ok, cfg.PidsMax)
	}
	if pids, _ := cp.Cgroup.Procs(); len(pids) > int(cfg.PidsMax) {
		t.Fatalf("%d processes in the cgroup, pids.max %d", len(pids), cfg.PidsMax)
	}
	if b, _ := os.ReadFile(filepath.Join(ct.Sandbox, "stderr")); !strings.Contains(strings.ToLower(string(b)), "fork") {
		t.Errorf("stderr %q: want the failed forks reported", b)
	}
	// The containerizer still launches; the bomb ends (the shell may have
	// given up at the first refused fork) when it is killed.
	other := launch(t, c, Spec{TaskID: "after", Command: shell("exit 0")})
	_ = c.Kill(t.Context(), ct.ID)
	exits := map[string]Exit{}
	deadline := time.After(slowHostDeadline)
	for len(exits) < 2 {
		select {
		case e := <-c.Exits():
			exits[e.ContainerID] = e
		case <-deadline:
			t.Fatalf("exits %v: want the bomb's and the next task's", exits)
		}
	}
	if e := exits[other.ID]; e.ExitCode != 0 {
		t.Errorf("a task launched after the bomb: %+v", e)
	}
}
