package service

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/etcdtest"
	"github.com/slackline/slackline/jobs"
	"github.com/slackline/slackline/resources"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func offer(id string) *slacklinev1.Offer {
	return &slacklinev1.Offer{Id: id, AgentId: "a1", Resources: resources.MustParse("cpus:2;mem:1024").Proto("*", resources.Regular)}
}

// flush writes what the core changed, as the service does.
func flush(t *testing.T, s Store, c *jobs.Core) {
	t.Helper()
	b, err := encode(c, c.TakeDirty())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(b); err != nil {
		t.Fatal(err)
	}
}

// storeKind opens a store, and opens it again after a Close (a restart).
type storeKind struct {
	name string
	open func(t *testing.T) (open func() Store)
}

// storeKinds are the stores the contract tests run against: bbolt, and
// etcd (a real etcd-server; small transactions so that batches are cut).
var storeKinds = []storeKind{
	{"bolt", func(t *testing.T) func() Store {
		path := filepath.Join(t.TempDir(), "jobs.db")
		return func() Store {
			s, err := OpenStore(path)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}},
	{"etcd", func(t *testing.T) func() Store {
		client := etcdtest.Start(t, 1).Client(t)
		return func() Store { return NewEtcdStore(client, EtcdStoreOptions{Prefix: "/test/jobs/", MaxTxnOps: 3}) }
	}},
}

// TestStoreRestoresEveryJobAndIndex: a core rebuilt from the store (a
// restart) describes every job exactly as the core that wrote it, and
// deleted cron runs are gone with their indexes; for each store.
func TestStoreRestoresEveryJobAndIndex(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			testStoreRestores(t, kind.open(t))
		})
	}
}

func testStoreRestores(t *testing.T, open func() Store) {
	s := open()
	c := jobs.New(jobs.Config{})
	for _, text := range []string{
		"name: a\ncommand: x\nresources: cpus:1\ncompletions: 3\n",
		"name: ab\ncommand: x\nresources: cpus:1\ncompletions: 2\nretries: 0\n",
		"name: cron\ncommand: x\nresources: cpus:1\nschedule: \"@every 1m\"\nconcurrency: allow\n",
	} {
		spec, err := jobs.ParseSpec([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Submit(spec, "alice", t0); err != nil {
			t.Fatal(err)
		}
	}
	c.Offers([]*slacklinev1.Offer{offer("o1")}, t0)
	flush(t, s, c)
	c.Update(&slacklinev1.TaskStatus{TaskId: "a.0.1", State: slacklinev1.TaskState_TASK_STATE_FINISHED}, t0)
	c.Update(&slacklinev1.TaskStatus{TaskId: "a.1.1", State: slacklinev1.TaskState_TASK_STATE_KILLED,
		Reason: slacklinev1.Reason_REASON_CONTAINER_PREEMPTED}, t0)
	now := t0
	for range jobs.MaxRunsKept + 2 {
		now = c.Job("cron").NextRun
		c.Tick(now)
		runs := c.Job("cron").Runs
		if _, err := c.Cancel(runs[len(runs)-1], now); err != nil {
			t.Fatal(err)
		}
		flush(t, s, c)
	}
	if err := s.SetFrameworkID("fw-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close()
	if id, err := s.FrameworkID(); err != nil || id != "fw-1" {
		t.Errorf("framework id %q %v", id, err)
	}
	loaded, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	r := jobs.New(jobs.Config{})
	for _, j := range loaded {
		r.Restore(j)
	}
	if len(r.Jobs()) != len(c.Jobs()) || len(r.Jobs()) != 3+jobs.MaxRunsKept {
		t.Fatalf("restored %d jobs, wrote %d", len(r.Jobs()), len(c.Jobs()))
	}
	for _, j := range c.Jobs() {
		got := r.Job(j.Spec.Name)
		if got == nil {
			t.Fatalf("job %s not restored", j.Spec.Name)
		}
		if diff := cmp.Diff(j.Detail(), got.Detail(), protocmp.Transform()); diff != "" {
			t.Errorf("job %s differs after restore (-wrote +restored):\n%s", j.Spec.Name, diff)
		}
	}
	if n := r.Counts(); n.Tasks[jobs.IndexPending] != 4 || n.Tasks[jobs.IndexSucceeded] != 1 || n.Preempted != 1 || len(r.Launched()) != 0 {
		t.Errorf("counts after restore %+v, launched %v", n, r.Launched())
	}
	// The restored queue launches where the old one left off, in the same
	// order (a re-queued index after those queued before it).
	launch := func(c *jobs.Core) string {
		p, _ := c.Offers([]*slacklinev1.Offer{offer("o2")}, now)
		var ids []string
		for _, l := range p.Launches {
			for _, task := range l.Tasks {
				ids = append(ids, task.GetTaskId())
			}
		}
		return strings.Join(ids, ",")
	}
	if got, want := launch(r), launch(c); got != want || got != "a.2.1,a.1.2" {
		t.Errorf("launched %s after restore, want %s (as before the restart) = a.2.1,a.1.2", got, want)
	}
}
