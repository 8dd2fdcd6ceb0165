package main

import (
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

func testConfig(tasks int) schedulerConfig {
	return schedulerConfig{
		name:        "batch",
		incarnation: "abc",
		tasks:       tasks,
		need:        resources.MustParse("cpus:1;mem:128"),
		command:     "sleep 1",
		labels:      map[string]string{"sim.duration": "1s"},
		maxAttempts: 3,
	}
}

func testOffer(id, text string, revocability resources.Revocability) *slacklinev1.Offer {
	return &slacklinev1.Offer{Id: id, AgentId: "agent-" + id, Resources: resources.MustParse(text).Proto("*", revocability)}
}

// planSummary is a plan in comparable form.
type planSummary struct {
	Launches map[string][]string // offer id -> task ids
	Refuse   map[string]float64  // offer id -> refuse seconds of its launch (-1: default)
	Declines []string
	Suppress bool
}

func summarize(p offerPlan) planSummary {
	s := planSummary{Declines: append(p.declines, p.shortDeclines...), Suppress: p.suppress}
	if len(s.Declines) == 0 {
		s.Declines = nil
	}
	for _, l := range p.launches {
		if s.Launches == nil {
			s.Launches, s.Refuse = map[string][]string{}, map[string]float64{}
		}
		for _, t := range l.tasks {
			s.Launches[l.offerID] = append(s.Launches[l.offerID], t.GetTaskId())
		}
		s.Refuse[l.offerID] = -1
		if l.filters != nil {
			s.Refuse[l.offerID] = l.filters.GetRefuseSeconds()
		}
	}
	return s
}

func TestSchedulerOffers(t *testing.T) {
	tests := []struct {
		name        string
		tasks       int
		maxPerOffer int
		revocable   bool
		suppressed  bool
		offers      []*slacklinev1.Offer
		want        planSummary
	}{
		{
			name:   "launches as many as fit, refuse 0 while tasks remain",
			tasks:  5,
			offers: []*slacklinev1.Offer{testOffer("o1", "cpus:2;mem:1024", resources.Regular), testOffer("o2", "cpus:0.5;mem:1024", resources.Regular)},
			want: planSummary{
				Launches: map[string][]string{"o1": {"batch-0-1-abc", "batch-1-1-abc"}},
				Refuse:   map[string]float64{"o1": 0},
				Declines: []string{"o2"},
			},
		},
		{
			name:   "last tasks: default refusal and suppress",
			tasks:  2,
			offers: []*slacklinev1.Offer{testOffer("o1", "cpus:4;mem:1024", resources.Regular)},
			want: planSummary{
				Launches: map[string][]string{"o1": {"batch-0-1-abc", "batch-1-1-abc"}},
				Refuse:   map[string]float64{"o1": -1},
				Suppress: true,
			},
		},
		{
			name:        "capped per offer",
			tasks:       5,
			maxPerOffer: 1,
			offers:      []*slacklinev1.Offer{testOffer("o1", "cpus:4;mem:1024", resources.Regular), testOffer("o2", "cpus:4;mem:1024", resources.Regular)},
			want: planSummary{
				Launches: map[string][]string{"o1": {"batch-0-1-abc"}, "o2": {"batch-1-1-abc"}},
				Refuse:   map[string]float64{"o1": 0, "o2": 0},
			},
		},
		{
			name:   "regular framework declines revocable offers",
			tasks:  1,
			offers: []*slacklinev1.Offer{testOffer("v1", "cpus:4;mem:1024", resources.Revocable)},
			want:   planSummary{Declines: []string{"v1"}},
		},
		{
			name:      "revocable framework declines regular offers",
			tasks:     1,
			revocable: true,
			offers:    []*slacklinev1.Offer{testOffer("o1", "cpus:4;mem:1024", resources.Regular), testOffer("v1", "cpus:1;mem:128", resources.Revocable)},
			want: planSummary{
				Launches: map[string][]string{"v1": {"batch-0-1-abc"}},
				Refuse:   map[string]float64{"v1": -1},
				Declines: []string{"o1"},
				Suppress: true,
			},
		},
		{
			name:   "nothing pending: decline and suppress",
			tasks:  0,
			offers: []*slacklinev1.Offer{testOffer("o1", "cpus:4;mem:1024", resources.Regular)},
			want:   planSummary{Declines: []string{"o1"}, Suppress: true},
		},
		{
			name:       "already suppressed: no second suppress",
			tasks:      0,
			suppressed: true,
			offers:     []*slacklinev1.Offer{testOffer("o1", "cpus:4;mem:1024", resources.Regular)},
			want:       planSummary{Declines: []string{"o1"}},
		},
		{
			name:   "invalid offer is declined",
			tasks:  1,
			offers: []*slacklinev1.Offer{{Id: "bad", Resources: []*slacklinev1.Resource{{Name: "gpus", Scalar: 1}}}},
			want:   planSummary{Declines: []string{"bad"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(tt.tasks)
			cfg.maxPerOffer = tt.maxPerOffer
			cfg.revocable = tt.revocable
			s := newScheduler(cfg)
			s.setSuppressed(tt.suppressed)
			got := summarize(s.offers(tt.offers))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSchedulerTaskInfo(t *testing.T) {
	o := &slacklinev1.Offer{Id: "v1", AgentId: "agent-7", Resources: resources.MustParse("cpus:2;mem:512").Proto("eng", resources.Revocable)}
	cfg := testConfig(1)
	cfg.revocable = true
	cfg.image = "registry:5000/app:v1"
	s := newScheduler(cfg)
	plan := s.offers([]*slacklinev1.Offer{o})
	if len(plan.launches) != 1 || len(plan.launches[0].tasks) != 1 {
		t.Fatalf("plan = %+v, want one launch of one task", plan)
	}
	info := plan.launches[0].tasks[0]
	if info.GetAgentId() != "agent-7" || info.GetCommand().GetValue() != "sleep 1" || !info.GetCommand().GetShell() {
		t.Errorf("task = %v, want agent-7 running sleep 1 with a shell", info)
	}
	if diff := cmp.Diff(map[string]string{"sim.duration": "1s"}, info.GetLabels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if info.GetImage() != "registry:5000/app:v1" {
		t.Errorf("image = %q, want the --image", info.GetImage())
	}
	for _, r := range info.GetResources() {
		if r.GetRole() != "eng" || !r.GetRevocable() {
			t.Errorf("resource %v: want role eng, revocable", r)
		}
	}
}

func status(id string, state slacklinev1.TaskState) *slacklinev1.TaskStatus {
	return &slacklinev1.TaskStatus{TaskId: id, AgentId: "agent-o1", State: state}
}

// invalidOffer is the coordinator's LOST for a launch on an offer that was
// not outstanding.
func invalidOffer(id string) *slacklinev1.TaskStatus {
	st := status(id, lost)
	st.AgentId, st.Reason = "", slacklinev1.Reason_REASON_INVALID_OFFERS
	return st
}

const (
	running  = slacklinev1.TaskState_TASK_STATE_RUNNING
	finished = slacklinev1.TaskState_TASK_STATE_FINISHED
	failedSt = slacklinev1.TaskState_TASK_STATE_FAILED
	lost     = slacklinev1.TaskState_TASK_STATE_LOST
	killed   = slacklinev1.TaskState_TASK_STATE_KILLED
)

// outcomeSummary is an outcome in comparable form.
type outcomeSummary struct {
	Changed, Requeued, GaveUp, Kill, Revive, Done bool
}

func summarizeOutcome(o outcome) outcomeSummary {
	return outcomeSummary{o.changed, o.requeued, o.gaveUp, o.kill, o.revive, o.done}
}

func TestSchedulerUpdates(t *testing.T) {
	big := testOffer("o1", "cpus:100;mem:100000", resources.Regular)
	type step struct {
		offers bool                    // deliver big before the update
		status *slacklinev1.TaskStatus // update to apply
		suppr  *bool                   // set suppression before the update
		want   outcomeSummary
	}
	yes := true
	tests := []struct {
		name         string
		tasks        int
		steps        []step
		wantFinished int
		wantFailed   int
		wantQueue    int
	}{
		{
			name:  "runs to completion",
			tasks: 2,
			steps: []step{
				{offers: true, status: status("batch-0-1-abc", running), want: outcomeSummary{Changed: true}},
				{status: status("batch-0-1-abc", running)}, // duplicate: no change
				{status: status("batch-0-1-abc", finished), want: outcomeSummary{Changed: true}},
				{status: status("batch-1-1-abc", finished), want: outcomeSummary{Changed: true, Done: true}},
				{status: status("batch-1-1-abc", finished), want: outcomeSummary{Done: true}}, // re-sent
			},
			wantFinished: 2,
		},
		{
			name:  "failures are retried up to three launches",
			tasks: 1,
			steps: []step{
				{offers: true, status: status("batch-0-1-abc", failedSt), suppr: &yes, want: outcomeSummary{Changed: true, Requeued: true, Revive: true}},
				{offers: true, status: status("batch-0-2-abc", lost), want: outcomeSummary{Changed: true, Requeued: true, Revive: true}},
				{offers: true, status: status("batch-0-3-abc", killed), want: outcomeSummary{Changed: true, GaveUp: true, Done: true}},
			},
			wantFailed: 1,
		},
		{
			// The memory e2e tests' hog (--max-attempts 1) was given up in a
			// slow guest when its offer was rescinded before the launch.
			name:  "a launch on an offer no longer outstanding is not an attempt",
			tasks: 1,
			steps: []step{
				{offers: true, status: invalidOffer("batch-0-1-abc"), want: outcomeSummary{Changed: true, Requeued: true}},
				{offers: true, status: invalidOffer("batch-0-2-abc"), want: outcomeSummary{Changed: true, Requeued: true}},
				{offers: true, status: invalidOffer("batch-0-3-abc"), want: outcomeSummary{Changed: true, Requeued: true}},
				{offers: true, status: status("batch-0-4-abc", finished), want: outcomeSummary{Changed: true, Done: true}},
			},
			wantFinished: 1,
		},
		{
			name:  "retry then success",
			tasks: 1,
			steps: []step{
				{offers: true, status: status("batch-0-1-abc", lost), want: outcomeSummary{Changed: true, Requeued: true}},
				{offers: true, status: status("batch-0-2-abc", finished), want: outcomeSummary{Changed: true, Done: true}},
			},
			wantFinished: 1,
		},
		{
			name:  "stale launch still running is killed",
			tasks: 1,
			steps: []step{
				{offers: true, status: status("batch-0-1-abc", lost), want: outcomeSummary{Changed: true, Requeued: true}},
				{offers: true, status: status("batch-0-1-abc", running), want: outcomeSummary{Kill: true}},
				{status: status("batch-0-2-abc", running), want: outcomeSummary{Changed: true}},
			},
		},
		{
			name:  "failover: an earlier process's running task is adopted, not relaunched",
			tasks: 2,
			steps: []step{
				{status: status("batch-1-4-old", running), want: outcomeSummary{Changed: true}},
				{status: status("batch-1-4-old", finished), want: outcomeSummary{Changed: true}},
			},
			wantFinished: 1,
			wantQueue:    1,
		},
		{
			name:  "failover: an earlier launch of a task launched here is killed",
			tasks: 1,
			steps: []step{
				{offers: true, status: status("batch-0-2-old", running), want: outcomeSummary{Kill: true}},
			},
		},
		{
			name:  "foreign tasks are ignored",
			tasks: 1,
			steps: []step{
				{status: status("other-0-1-abc", running)},
				{status: status("batch-9-1-abc", running)}, // index out of range
			},
			wantQueue: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(testConfig(tt.tasks))
			for i, st := range tt.steps {
				if st.offers {
					s.offers([]*slacklinev1.Offer{big})
				}
				if st.suppr != nil {
					s.setSuppressed(*st.suppr)
				}
				got := summarizeOutcome(s.update(st.status))
				if diff := cmp.Diff(st.want, got); diff != "" {
					t.Errorf("step %d (%s %s): outcome (-want +got):\n%s", i, st.status.GetTaskId(), st.status.GetState(), diff)
				}
			}
			finished, failed := s.summary()
			if finished != tt.wantFinished || failed != tt.wantFailed {
				t.Errorf("summary() = %d finished, %d failed; want %d, %d", finished, failed, tt.wantFinished, tt.wantFailed)
			}
			if len(s.queue) != tt.wantQueue {
				t.Errorf("%d tasks pending, want %d", len(s.queue), tt.wantQueue)
			}
		})
	}
}

func TestSchedulerLaunchFailedRequeuesWithFreshIDs(t *testing.T) {
	s := newScheduler(testConfig(3))
	plan := s.offers([]*slacklinev1.Offer{testOffer("o1", "cpus:2;mem:1024", resources.Regular)})
	if len(plan.launches) != 1 {
		t.Fatalf("plan = %+v, want one launch", plan)
	}
	s.launchFailed(plan.launches[0])
	plan = s.offers([]*slacklinev1.Offer{testOffer("o2", "cpus:3;mem:1024", resources.Regular)})
	want := planSummary{
		Launches: map[string][]string{"o2": {"batch-0-2-abc", "batch-1-2-abc", "batch-2-1-abc"}},
		Refuse:   map[string]float64{"o2": -1},
		Suppress: true,
	}
	if diff := cmp.Diff(want, summarize(plan)); diff != "" {
		t.Errorf("plan after a failed launch (-want +got):\n%s", diff)
	}
	// A late update for the failed launch is stale, not the task's.
	if out := s.update(status("batch-0-1-abc", slacklinev1.TaskState_TASK_STATE_DROPPED)); out.changed || out.requeued {
		t.Errorf("update of the failed launch = %+v, want ignored", out)
	}
}

func TestParseFlags(t *testing.T) {
	opts, err := parseFlags([]string{"--label", "sim.duration=1s", "--label", "team=x", "--tasks", "3", "--revocable"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"sim.duration": "1s", "team": "x"}, opts.labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if opts.tasks != 3 || !opts.revocable || opts.name != "batch" || opts.role != "*" || opts.maxAttempts != 3 {
		t.Errorf("options = %+v", opts)
	}
	for _, bad := range [][]string{{"--label", "novalue"}, {"--tasks", "-1"}, {"--max-attempts", "0"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", bad)
		}
	}
}

// With --revocable a task takes revocable cpus and regular memory from two
// offers of one agent, accepted together; regular cpus are never used.
func TestSchedulerRevocableCPUsRegularMemory(t *testing.T) {
	rev := &slacklinev1.Offer{Id: "v1", AgentId: "a", Resources: resources.MustParse("cpus:1.25").Proto("*", resources.Revocable)}
	reg := &slacklinev1.Offer{Id: "r1", AgentId: "a", Resources: resources.MustParse("cpus:0.5;mem:1024").Proto("*", resources.Regular)}
	other := &slacklinev1.Offer{Id: "r2", AgentId: "b", Resources: resources.MustParse("cpus:8;mem:1024").Proto("*", resources.Regular)}
	cfg := testConfig(5)
	cfg.revocable = true
	cfg.need = resources.MustParse("cpus:0.5;mem:64")
	s := newScheduler(cfg)
	plan := s.offers([]*slacklinev1.Offer{rev, reg, other})
	if len(plan.launches) != 1 || len(plan.launches[0].tasks) != 2 {
		t.Fatalf("plan = %+v, want one launch of two tasks (1.25 revocable cpus)", plan)
	}
	if diff := cmp.Diff([]string{"v1", "r1"}, plan.launches[0].offerIDs()); diff != "" {
		t.Errorf("offers accepted (-want +got):\n%s", diff)
	}
	for _, info := range plan.launches[0].tasks {
		regular, revocable, err := resources.FromProto(info.GetResources())
		if err != nil || regular.String() != "mem:64" || revocable.String() != "cpus:0.5" {
			t.Errorf("task %s resources regular %v revocable %v (%v), want mem:64 and cpus:0.5", info.GetTaskId(), regular, revocable, err)
		}
	}
	// The other agent's regular offer has no revocable partner: it goes
	// back for a second only.
	if len(plan.declines) != 0 || len(plan.shortDeclines) != 1 || plan.shortDeclines[0] != "r2" {
		t.Fatalf("declines %v, short declines %v: want r2 declined briefly", plan.declines, plan.shortDeclines)
	}
	// A lone revocable offer is held until memory comes, then used.
	lone := &slacklinev1.Offer{Id: "v2", AgentId: "c", Resources: resources.MustParse("cpus:1").Proto("*", resources.Revocable)}
	if plan := s.offers([]*slacklinev1.Offer{lone}); len(plan.launches) != 0 || s.held["v2"].offer == nil {
		t.Fatalf("plan %+v, held %v: want v2 held", plan, s.held)
	}
	mem := &slacklinev1.Offer{Id: "r3", AgentId: "c", Resources: resources.MustParse("mem:512").Proto("*", resources.Regular)}
	plan = s.offers([]*slacklinev1.Offer{mem})
	if len(plan.launches) != 1 || len(plan.launches[0].tasks) != 2 {
		t.Fatalf("plan %+v, want two tasks on v2 + r3", plan)
	}
	if diff := cmp.Diff([]string{"v2", "r3"}, plan.launches[0].offerIDs()); diff != "" {
		t.Errorf("offers accepted (-want +got):\n%s", diff)
	}
	// Held too long, a revocable offer goes back.
	late := &slacklinev1.Offer{Id: "v3", AgentId: "d", Resources: resources.MustParse("cpus:1").Proto("*", resources.Revocable)}
	s.offers([]*slacklinev1.Offer{late})
	start := s.held["v3"].since
	s.now = func() time.Time { return start.Add(holdFor) }
	if plan := s.offers(nil); len(plan.declines) != 1 || plan.declines[0] != "v3" {
		t.Fatalf("declines after holdFor = %v, want v3", plan.declines)
	}
}
