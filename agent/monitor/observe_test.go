package monitor

import (
	"path/filepath"
	"testing"
	"time"
)

// TestObserve: the observer sees each pass's time and the samples it
// published, as Latest returns them; a container no longer a target is
// not among them; a later Observe replaces the observer.
func TestObserve(t *testing.T) {
	t.Parallel()
	l := layouts[0]
	dir := t.TempDir()
	m := newTestMonitor(t, l.mode, dir, nil, 10)
	cg := filepath.Join(dir, "cgroup")
	for _, rel := range []string{"slackline/a", "slackline/b"} {
		l.write(t, cg, rel, 2_000_000)
	}
	m.SetTargets([]Target{{ID: "a", TaskID: "task-a", CgroupPath: "slackline/a"}, {ID: "b", CgroupPath: "slackline/b"}})
	type call struct {
		now time.Time
		ids []string
	}
	var calls []call
	m.Observe(func(now time.Time, published []Usage) {
		c := call{now: now}
		for _, u := range published {
			latest, _ := m.Latest(u.ContainerID)
			if latest.Stats != u.Stats || !u.Time.Equal(now) {
				t.Errorf("observed %s's sample of %v, not the one published at %v", u.ContainerID, u.Time, now)
			}
			c.ids = append(c.ids, u.ContainerID)
		}
		calls = append(calls, c)
	})
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	m.SetTargets([]Target{{ID: "a", TaskID: "task-a", CgroupPath: "slackline/a"}})
	if err := m.Sample(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || len(calls[0].ids) != 2 || len(calls[1].ids) != 1 || calls[1].ids[0] != "a" || !calls[1].now.Equal(t0.Add(time.Second)) {
		t.Fatalf("observer calls %+v, want both containers at t0, then a alone at t0+1s", calls)
	}
	m.Observe(func(time.Time, []Usage) {})
	if err := m.Sample(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("the replaced observer was called again: %d calls", len(calls))
	}
}
