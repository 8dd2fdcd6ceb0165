package containerizer

import (
	"context"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// warmPids returns the pids of the ready warm supervisors.
func warmPids(c *Containerizer) []int {
	c.warm.mu.Lock()
	defer c.warm.mu.Unlock()
	var pids []int
	for _, w := range c.warm.ready {
		pids = append(pids, w.proc.cmd.Process.Pid)
	}
	return pids
}

// waitWarm waits until one warm supervisor is ready and returns its pid.
func waitWarm(t *testing.T, c *Containerizer) int {
	t.Helper()
	eventually(t, "a warm supervisor", func() bool { return len(warmPids(c)) == 1 })
	return warmPids(c)[0]
}

// TestWarmSupervisorRunsTheNextLaunch: a launch takes the warm supervisor
// (it becomes the container's), a replacement is started, and the task
// runs and reports as with a supervisor of its own.
func TestWarmSupervisorRunsTheNextLaunch(t *testing.T) {
	c := newTest(t, testConfig(t))
	warm := waitWarm(t, c)
	ct := launch(t, c, Spec{TaskID: "warm", Command: shell("exit 7")})
	c.mu.Lock()
	sup := c.containers[ct.ID].cp.Supervisor.Pid
	c.mu.Unlock()
	if sup != warm {
		t.Errorf("supervisor %d, want the warm one %d", sup, warm)
	}
	if e := waitExit(t, c, ct.ID); e.ExitCode != 7 {
		t.Errorf("exit %+v, want code 7", e)
	}
	next := waitWarm(t, c)
	if next == warm {
		t.Errorf("the replacement is the supervisor taken, %d", next)
	}
	if st := c.WarmSupervisorStats(); st.Hits != 1 || st.Misses != 0 || st.DiedIdle != 0 || st.StartFailures != 0 {
		t.Errorf("stats %+v, want 1 hit", st)
	}
}

// TestWarmSupervisorDiedIdle: a warm supervisor killed while it waits is
// taken out of the pool and counted; the next launch starts a supervisor
// of its own and a replacement.
func TestWarmSupervisorDiedIdle(t *testing.T) {
	c := newTest(t, testConfig(t))
	warm := waitWarm(t, c)
	if err := unix.Kill(warm, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead warm supervisor out of the pool", func() bool { return c.WarmSupervisorStats().DiedIdle == 1 })
	if pids := warmPids(c); len(pids) != 0 {
		t.Fatalf("warm supervisors %v after the only one died", pids)
	}
	ct := launch(t, c, Spec{TaskID: "cold", Command: shell("exit 3")})
	if e := waitExit(t, c, ct.ID); e.ExitCode != 3 {
		t.Errorf("exit %+v, want code 3", e)
	}
	if next := waitWarm(t, c); next == warm {
		t.Errorf("replacement %d is the dead one", next)
	}
	if st := c.WarmSupervisorStats(); st.Hits != 0 || st.Misses != 1 || st.DiedIdle != 1 {
		t.Errorf("stats %+v, want 1 miss, 1 died idle", st)
	}
}

// TestWarmSupervisorNotAdopted: a second containerizer on the same state
// (an agent's restart) recovers the running container, not the first one's
// warm supervisor, which holds no container; Close ends and reaps the warm
// supervisors.
func TestWarmSupervisorNotAdopted(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	ct := launch(t, c, Spec{TaskID: "sleep", Command: shell("exec sleep 1000")})
	warm := waitWarm(t, c)
	c2 := newTest(t, cfg)
	got, err := c2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != ct.ID {
		t.Errorf("recovered %v, want only %s", got, ct.ID)
	}
	for _, r := range got {
		c2.mu.Lock()
		sup := c2.containers[r.ID].cp.Supervisor.Pid
		c2.mu.Unlock()
		if sup == warm {
			t.Errorf("container %s adopted warm supervisor %d", r.ID, warm)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(warm, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("warm supervisor %d after Close: kill 0 = %v, want ESRCH", warm, err)
	}
	if err := c2.Kill(context.Background(), ct.ID); err != nil {
		t.Fatal(err)
	}
	waitExit(t, c2, ct.ID)
}
