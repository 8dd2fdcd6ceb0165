package jobs

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	base := "name: etl\ncommand: echo hi\nresources: \"cpus:1;mem:64\"\n"
	tests := []struct {
		name, text string
		field      string // "" when valid
	}{
		{"minimal", base, ""},
		{"json", `{"name":"etl","command":"true","resources":"cpus:1","completions":3}`, ""},
		{"cron", base + "schedule: \"*/5 * * * *\"\n", ""},
		{"cron with seconds", base + "schedule: \"*/2 * * * * *\"\nconcurrency: replace\n", ""},
		{"no name", "command: x\nresources: cpus:1\n", "name"},
		{"bad name", strings.Replace(base, "etl", "ETL_1", 1), "name"},
		{"long name", strings.Replace(base, "etl", "a"+strings.Repeat("b", MaxNameLength), 1), "name"},
		{"no command", "name: etl\nresources: cpus:1\n", "command"},
		{"no resources", "name: etl\ncommand: x\n", "resources"},
		{"bad resources", strings.Replace(base, "cpus:1;mem:64", "cpus:x", 1), "resources"},
		{"no cpus", strings.Replace(base, "cpus:1;mem:64", "mem:64", 1), "resources"},
		{"ports", strings.Replace(base, "cpus:1;mem:64", "cpus:1;ports:[80-80]", 1), "resources"},
		{"negative completions", base + "completions: -1\n", "completions"},
		{"too many completions", base + "completions: 100001\n", "completions"},
		{"completions not a number", base + "completions: ten\n", "completions"},
		{"negative parallelism", base + "parallelism: -2\n", "parallelism"},
		{"negative retries", base + "retries: -1\n", "retries"},
		{"bad backoff", base + "backoff: soon\n", "backoff"},
		{"not a mapping", "- a\n- b\n", "spec"},
		{"max_backoff below backoff", base + "backoff: 1m\nmax_backoff: 1s\n", "max_backoff"},
		{"priority", base + "priority: 1001\n", "priority"},
		{"revocable", base + "revocable: sometimes\n", "revocable"},
		{"prefer_wait without prefer", base + "prefer_wait: 1s\n", "prefer_wait"},
		{"bad schedule", base + "schedule: \"every tuesday\"\n", "schedule"},
		{"concurrency without schedule", base + "concurrency: allow\n", "concurrency"},
		{"bad concurrency", base + "schedule: \"@hourly\"\nconcurrency: sometimes\n", "concurrency"},
		{"index env", base + "environment: {SLACKLINE_JOB_INDEX: \"1\"}\n", "environment"},
		{"bad env name", base + "environment: {\"A B\": \"1\"}\n", "environment"},
		{"unknown field", base + "completion: 3\n", "completion"},
		{"role with slash", base + "role: a/b\n", "role"},
		{"empty", "", "spec"},
		{"too big", base + "labels: {a: \"" + strings.Repeat("x", MaxSpecBytes) + "\"}\n", "spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSpec([]byte(tt.text))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("ParseSpec: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("ParseSpec error = %v, want a FieldError", err)
			}
			if fe.Field != tt.field {
				t.Errorf("field = %q (%v), want %q", fe.Field, err, tt.field)
			}
		})
	}
}

func TestParseSpecDefaults(t *testing.T) {
	t.Parallel()
	s, err := ParseSpec([]byte("name: etl\ncommand: x\nresources: cpus:1\ncompletions: 7\nrevocable: prefer\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Role != "*" || s.Parallelism != 7 || *s.Retries != DefaultRetries || s.PreferWait != Duration(DefaultPreferWait) {
		t.Errorf("defaults: %+v", s)
	}
	if got := []time.Duration{s.backoff(1), s.backoff(2), s.backoff(3), s.backoff(20)}; !cmp.Equal(got,
		[]time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, DefaultMaxBackoff}) {
		t.Errorf("backoffs = %v", got)
	}
}

func TestParseTaskID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		id     string
		job    string
		i, a   int
		wantOK bool
	}{
		{"etl.3.1", "etl", 3, 1, true},
		{"etl-1700000000.0.12", "etl-1700000000", 0, 12, true},
		{"etl.3", "", 0, 0, false},
		{"etl.x.1", "", 0, 0, false},
		{"etl.-1.1", "", 0, 0, false},
		{"etl.01.1", "", 0, 0, false},
		{"batch-0-1-abc", "", 0, 0, false},
	} {
		job, i, a, ok := ParseTaskID(tt.id)
		if ok != tt.wantOK || (ok && (job != tt.job || i != tt.i || a != tt.a)) {
			t.Errorf("ParseTaskID(%q) = %q %d %d %v", tt.id, job, i, a, ok)
		}
	}
}

// spec parses a spec or fails the test.
func spec(t *testing.T, text string) Spec {
	t.Helper()
	s, err := ParseSpec([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// offerSeq numbers the offers of every test (they run in parallel).
var offerSeq atomic.Int64

// offer returns an offer of agent in role "*".
func offer(agent, res string, revocable bool) *slacklinev1.Offer {
	n := int(offerSeq.Add(1))
	return &slacklinev1.Offer{
		Id:        agent + "-o" + strings.Repeat("x", n%3) + string(rune('a'+n%26)) + "-" + strconv.Itoa(n),
		AgentId:   agent,
		Resources: resources.MustParse(res).Proto("*", resources.Revocability(revocable)),
	}
}

func status(id string, state slacklinev1.TaskState, reason slacklinev1.Reason) *slacklinev1.TaskStatus {
	return &slacklinev1.TaskStatus{TaskId: id, AgentId: "a1", State: state, Reason: reason, Message: "msg"}
}

func launchedIDs(p Plan) []string {
	var ids []string
	for _, l := range p.Launches {
		for _, task := range l.Tasks {
			ids = append(ids, task.GetTaskId())
		}
	}
	return ids
}

func mustSubmit(t *testing.T, c *Core, text string, now time.Time) *Job {
	t.Helper()
	j, err := c.Submit(spec(t, text), "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

const (
	finished  = slacklinev1.TaskState_TASK_STATE_FINISHED
	failed    = slacklinev1.TaskState_TASK_STATE_FAILED
	killed    = slacklinev1.TaskState_TASK_STATE_KILLED
	running   = slacklinev1.TaskState_TASK_STATE_RUNNING
	noReason  = slacklinev1.Reason_REASON_UNSPECIFIED
	preempted = slacklinev1.Reason_REASON_CONTAINER_PREEMPTED
)

func TestQueueOrderPriorityThenSubmission(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	mustSubmit(t, c, "name: first\ncommand: x\nresources: cpus:1\n", t0)
	mustSubmit(t, c, "name: second\ncommand: x\nresources: cpus:1\n", t0)
	mustSubmit(t, c, "name: urgent\ncommand: x\nresources: cpus:1\npriority: 10\n", t0)
	var got []string
	for range 3 {
		p, _ := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
		got = append(got, launchedIDs(p)...)
	}
	if want := []string{"urgent.0.1", "first.0.1", "second.0.1"}; !cmp.Equal(got, want) {
		t.Errorf("launch order = %v, want %v", got, want)
	}
}

func TestIndexedCompletionsAndParallelism(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	j := mustSubmit(t, c, "name: arr\ncommand: x\nresources: cpus:1\ncompletions: 3\nparallelism: 2\n", t0)
	p, _ := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:8", false)}, t0)
	if got := launchedIDs(p); !cmp.Equal(got, []string{"arr.0.1", "arr.1.1"}) {
		t.Fatalf("launched %v, want indexes 0 and 1 (parallelism 2)", got)
	}
	if env := p.Launches[0].Tasks[1].GetCommand().GetEnvironment()[IndexEnv]; env != "1" {
		t.Errorf("%s = %q, want 1", IndexEnv, env)
	}
	if p.Launches[0].RefuseSeconds >= 0 {
		t.Errorf("refuse = %v with parallelism reached, want the default", p.Launches[0].RefuseSeconds)
	}
	c.Update(status("arr.0.1", running, noReason), t0)
	c.Update(status("arr.0.1", finished, noReason), t0)
	p, _ = c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:8", false)}, t0)
	if got := launchedIDs(p); !cmp.Equal(got, []string{"arr.2.1"}) {
		t.Fatalf("launched %v, want index 2", got)
	}
	// A duplicate FINISHED of a finished index changes nothing.
	c.Update(status("arr.0.1", finished, noReason), t0)
	c.Update(status("arr.1.1", finished, noReason), t0)
	c.Update(status("arr.2.1", finished, noReason), t0)
	if j.State != Succeeded || j.succeeded != 3 {
		t.Errorf("job %s with %d succeeded, want SUCCEEDED with 3", j.State, j.succeeded)
	}
	// Nothing left: offers are declined.
	p, _ = c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:8", false)}, t0)
	if len(p.Launches) != 0 || len(p.Declines) != 1 {
		t.Errorf("idle plan %+v, want a decline", p)
	}
}

func TestRetriesWithBackoffThenFailure(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	j := mustSubmit(t, c, "name: flaky\ncommand: x\nresources: cpus:1\ncompletions: 2\nretries: 2\nbackoff: 10s\n", t0)
	p, _ := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:2", false)}, t0)
	if len(launchedIDs(p)) != 2 {
		t.Fatal("want both indexes launched")
	}
	out, _ := c.Update(status("flaky.0.1", failed, slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED), t0)
	if out != OutcomeFailed || j.Indexes[0].NotBefore != t0.Add(10*time.Second) {
		t.Fatalf("outcome %v, not before %v; want a failure with a 10s backoff", out, j.Indexes[0].NotBefore)
	}
	// Not before the backoff.
	p, _ = c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:2", false)}, t0.Add(5*time.Second))
	if len(p.Launches) != 0 {
		t.Fatalf("launched %v during the backoff", launchedIDs(p))
	}
	if got := c.NextWake(); got != t0.Add(10*time.Second) {
		t.Errorf("NextWake = %v, want the backoff's end", got)
	}
	eff := c.Tick(t0.Add(10 * time.Second))
	if !cmp.Equal(eff.Revive, []string{"*"}) {
		t.Errorf("tick at the backoff's end: %+v, want a revival", eff)
	}
	p, _ = c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:2", false)}, t0.Add(10*time.Second))
	if got := launchedIDs(p); !cmp.Equal(got, []string{"flaky.0.2"}) {
		t.Fatalf("launched %v, want the second attempt", got)
	}
	c.Update(status("flaky.0.2", failed, slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED), t0.Add(11*time.Second))
	if j.Indexes[0].NotBefore != t0.Add(31*time.Second) {
		t.Errorf("second backoff ends %v, want 20s after the failure", j.Indexes[0].NotBefore)
	}
	c.Tick(t0.Add(31 * time.Second))
	p, _ = c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:2", false)}, t0.Add(31*time.Second))
	if got := launchedIDs(p); !cmp.Equal(got, []string{"flaky.0.3"}) {
		t.Fatalf("launched %v, want the third attempt", got)
	}
	st := status("flaky.0.3", failed, slacklinev1.Reason_REASON_CONTAINER_LIMITATION_MEMORY)
	st.Message = "out of memory"
	_, eff = c.Update(st, t0.Add(32*time.Second))
	if j.State != Failed {
		t.Fatalf("job %s after 3 failures with retries 2, want FAILED", j.State)
	}
	for _, want := range []string{"index 0 failed 3 times", "REASON_CONTAINER_LIMITATION_MEMORY: out of memory"} {
		if !strings.Contains(j.Message, want) {
			t.Errorf("message %q lacks %q", j.Message, want)
		}
	}
	if !cmp.Equal(eff.Kills, []Kill{{TaskID: "flaky.1.1", AgentID: "a1"}}) {
		t.Errorf("kills %v, want the other running index", eff.Kills)
	}
	if j.Failures != 3 || j.Indexes[1].State != IndexCancelled {
		t.Errorf("failures %d, index 1 %v", j.Failures, j.Indexes[1].State)
	}
}

func TestPreemptedAndLostTasksAreRequeuedWithoutFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		state  slacklinev1.TaskState
		reason slacklinev1.Reason
		want   Outcome
		event  string
	}{
		{"qos correction", killed, preempted, OutcomePreempted, "preempted"},
		{"maintenance", killed, slacklinev1.Reason_REASON_AGENT_DRAINED, OutcomePreempted, "preempted"},
		{"revocation", failed, preempted, OutcomePreempted, "preempted"},
		{"agent lost", slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_REMOVED, OutcomeLost, "lost"},
		{"gone after reconciliation", slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_RECONCILIATION, OutcomeLost, "lost"},
		{"command failed", failed, slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED, OutcomeFailed, "failed"},
		{"killed by someone else", killed, slacklinev1.Reason_REASON_TASK_KILLED, OutcomeFailed, "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := New(Config{})
			j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\nretries: 0\n", t0)
			c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
			out, _ := c.Update(status("j.0.1", tt.state, tt.reason), t0)
			if out != tt.want {
				t.Fatalf("outcome %v, want %v", out, tt.want)
			}
			last := j.Events[len(j.Events)-1].Message
			if tt.want == OutcomeFailed {
				if j.State != Failed || !strings.Contains(j.Message, tt.reason.String()) {
					t.Errorf("job %s %q, want FAILED naming %s", j.State, j.Message, tt.reason)
				}
				return
			}
			if j.State == Failed || j.Failures != 0 || j.Indexes[0].State != IndexPending {
				t.Errorf("job %s, failures %d, index %v: want re-queued without failure", j.State, j.Failures, j.Indexes[0].State)
			}
			if !strings.Contains(last, tt.event) || !strings.Contains(last, tt.reason.String()) || !strings.Contains(last, "not a failure") {
				t.Errorf("event %q does not say why", last)
			}
			if (tt.want == OutcomePreempted) != (j.Preempted == 1) || (tt.want == OutcomeLost) != (j.Lost == 1) {
				t.Errorf("preempted %d lost %d", j.Preempted, j.Lost)
			}
			p, _ := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
			if got := launchedIDs(p); !cmp.Equal(got, []string{"j.0.2"}) {
				t.Errorf("relaunch %v, want j.0.2 at once", got)
			}
		})
	}
}

func TestRevocablePolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		policy     string
		offers     []*slacklinev1.Offer
		at         time.Duration
		wantLaunch bool
		wantRev    bool // the task's cpus are revocable
	}{
		{"never on regular", "never", []*slacklinev1.Offer{offer("a1", "cpus:2;mem:512", false)}, 0, true, false},
		{"never refuses slack", "never", []*slacklinev1.Offer{offer("a1", "cpus:2;mem:512", true)}, 0, false, false},
		{"only refuses regular", "only", []*slacklinev1.Offer{offer("a1", "cpus:2;mem:512", false)}, 0, false, false},
		{"only takes slack cpus and regular memory", "only",
			[]*slacklinev1.Offer{offer("a1", "cpus:2", true), offer("a1", "cpus:1;mem:512", false)}, 0, true, true},
		{"only needs memory somewhere", "only", []*slacklinev1.Offer{offer("a1", "cpus:2", true)}, 0, false, false},
		{"prefer takes slack", "prefer",
			[]*slacklinev1.Offer{offer("a1", "cpus:2;mem:512", true), offer("a1", "cpus:2;mem:512", false)}, 0, true, true},
		{"prefer waits for slack", "prefer", []*slacklinev1.Offer{offer("a1", "cpus:2;mem:512", false)}, 10 * time.Second, false, false},
		{"prefer takes regular after the wait", "prefer", []*slacklinev1.Offer{offer("a1", "cpus:2;mem:512", false)}, 30 * time.Second, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := New(Config{})
			mustSubmit(t, c, "name: j\ncommand: x\nresources: \"cpus:1;mem:256\"\nrevocable: "+tt.policy+"\n", t0)
			p, _ := c.Offers(tt.offers, t0.Add(tt.at))
			if got := len(p.Launches) == 1; got != tt.wantLaunch {
				t.Fatalf("launched %v, want %v (declines %v)", launchedIDs(p), tt.wantLaunch, p.Declines)
			}
			if !tt.wantLaunch {
				// Regular offers come back soon while a slack job
				// waits; revocable ones are held for a regular partner.
				if got := len(p.Declines) + len(p.ShortDeclines) + len(c.Held()); got != len(tt.offers) {
					t.Errorf("declined %v, short %v, held %v: want every offer accounted for", p.Declines, p.ShortDeclines, c.Held())
				}
				if tt.policy == "never" && (len(p.Declines) != len(tt.offers) || len(c.Held()) != 0) {
					t.Errorf("a never job: declined %v, held %v; want every offer declined", p.Declines, c.Held())
				}
				return
			}
			if len(p.Launches[0].OfferIDs) != len(tt.offers) {
				t.Errorf("accepted %v, want every offer of the agent", p.Launches[0].OfferIDs)
			}
			regular, revocable, err := resources.FromProto(p.Launches[0].Tasks[0].GetResources())
			if err != nil {
				t.Fatal(err)
			}
			if got := revocable.CPUs() == 1; got != tt.wantRev {
				t.Errorf("regular %s revocable %s, want revocable cpus %v", regular, revocable, tt.wantRev)
			}
			if total := regular.Add(revocable); !total.Equal(resources.MustParse("cpus:1;mem:256")) {
				t.Errorf("task resources %s", total)
			}
		})
	}
}

func TestCancelKillsAndStopsOffers(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\ncompletions: 3\nparallelism: 1\n", t0)
	// Parallelism 1 reached: offers stop.
	if _, eff := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:4", false)}, t0); !cmp.Equal(eff.Suppress, []string{"*"}) {
		t.Errorf("effects %+v, want offers suppressed at the parallelism", eff)
	}
	eff, err := c.Cancel("j", t0)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(eff.Kills, []Kill{{TaskID: "j.0.1", AgentID: "a1"}}) || len(eff.Revive) != 0 {
		t.Errorf("effects %+v, want the running task killed and no revival", eff)
	}
	if j.State != Cancelled || j.Indexes[2].State != IndexCancelled {
		t.Errorf("job %s", j.State)
	}
	// The kill's update changes nothing; a cancelled job stays so.
	if out, _ := c.Update(status("j.0.1", killed, slacklinev1.Reason_REASON_TASK_KILLED), t0); out != OutcomeNone {
		t.Errorf("outcome %v", out)
	}
	if _, err := c.Cancel("j", t0); !errors.Is(err, ErrFinal) {
		t.Errorf("second cancel: %v", err)
	}
	if _, err := c.Cancel("nope", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	// A stale task still running is killed.
	if _, eff := c.Update(status("j.1.7", running, noReason), t0); len(eff.Kills) != 1 {
		t.Errorf("stale running task not killed: %+v", eff)
	}
}

func TestSubmitRefusals(t *testing.T) {
	t.Parallel()
	c := New(Config{Roles: []string{"analytics"}, MaxJobs: 1})
	if _, err := c.Submit(spec(t, "name: j\ncommand: x\nresources: cpus:1\n"), "", t0); !errors.Is(err, ErrRole) {
		t.Errorf("role *: %v", err)
	}
	mustSubmit(t, c, "name: j\nrole: analytics\ncommand: x\nresources: cpus:1\n", t0)
	if _, err := c.Submit(spec(t, "name: j\nrole: analytics\ncommand: x\nresources: cpus:1\n"), "", t0); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := c.Submit(spec(t, "name: k\nrole: analytics\ncommand: x\nresources: cpus:1\n"), "", t0); !errors.Is(err, ErrFull) || c.LimitHits[LimitJobs] != 1 {
		t.Errorf("full: %v, hits %v", err, c.LimitHits)
	}
}

func TestSuppressWhenIdleReviveWhenWorkArrives(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	if eff := c.Subscribed(t0); !cmp.Equal(eff.Suppress, []string{"*"}) {
		t.Fatalf("idle subscription: %+v, want a suppression", eff)
	}
	mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\n", t0)
	if eff := c.Sync(t0); !cmp.Equal(eff.Revive, []string{"*"}) {
		t.Fatalf("after submit: %+v, want a revival", eff)
	}
	if eff := c.Sync(t0); len(eff.Revive)+len(eff.Suppress) != 0 {
		t.Errorf("second sync: %+v, want nothing", eff)
	}
	p, eff := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
	if len(p.Launches) != 1 || !cmp.Equal(eff.Suppress, []string{"*"}) || p.Launches[0].RefuseSeconds >= 0 {
		t.Errorf("plan %+v effects %+v: want the launch, default refusal and a suppression", p, eff)
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\ndeadline: 1m\n", t0)
	c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
	if eff := c.Tick(t0.Add(59 * time.Second)); len(eff.Kills) != 0 || j.State != Running {
		t.Fatalf("before the deadline: %+v %s", eff, j.State)
	}
	eff := c.Tick(t0.Add(time.Minute))
	if j.State != Failed || !strings.Contains(j.Message, "deadline 1m0s exceeded") || len(eff.Kills) != 1 {
		t.Errorf("after the deadline: %s %q %+v", j.State, j.Message, eff)
	}
}

func TestCronConcurrency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy     string
		wantRuns   int
		wantActive int
		wantKills  int
		event      string
	}{
		{"forbid", 1, 1, 0, "skipped: run cron-1767225660 is still active (concurrency forbid)"},
		{"allow", 2, 2, 0, "started run cron-1767225720"},
		{"replace", 2, 1, 1, "started run cron-1767225720"},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			t.Parallel()
			c := New(Config{})
			cj := mustSubmit(t, c, "name: cron\ncommand: x\nresources: cpus:1\nschedule: \"* * * * *\"\nconcurrency: "+tt.policy+"\n", t0.Add(time.Second))
			if cj.State != Scheduled || cj.NextRun != t0.Add(time.Minute) || c.NextWake() != t0.Add(time.Minute) {
				t.Fatalf("cron job %s next %v", cj.State, cj.NextRun)
			}
			if eff := c.Tick(t0.Add(59 * time.Second)); len(cj.Runs) != 0 || len(eff.Revive) != 0 {
				t.Fatal("run started early")
			}
			c.Tick(t0.Add(time.Minute))
			if len(cj.Runs) != 1 || c.Job(cj.Runs[0]).Parent != "cron" {
				t.Fatalf("runs %v", cj.Runs)
			}
			c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0.Add(time.Minute))
			eff := c.Tick(t0.Add(2 * time.Minute))
			if len(cj.Runs) != tt.wantRuns || len(eff.Kills) != tt.wantKills {
				t.Fatalf("runs %v kills %v", cj.Runs, eff.Kills)
			}
			active := 0
			for _, r := range cj.Runs {
				if !IsFinal(c.Job(r).State) {
					active++
				}
			}
			if active != tt.wantActive {
				t.Errorf("%d active runs, want %d", active, tt.wantActive)
			}
			var events []string
			for _, e := range cj.Events {
				events = append(events, e.Message)
			}
			if !strings.Contains(strings.Join(events, "\n"), tt.event) {
				t.Errorf("events %q lack %q", events, tt.event)
			}
			if cj.NextRun != t0.Add(3*time.Minute) {
				t.Errorf("next run %v", cj.NextRun)
			}
			// Cancelling the cron job cancels its active runs.
			if _, err := c.Cancel("cron", t0.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			for _, r := range cj.Runs {
				if !IsFinal(c.Job(r).State) {
					t.Errorf("run %s still %s", r, c.Job(r).State)
				}
			}
		})
	}
}

func TestCronKeepsBoundedRuns(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	cj := mustSubmit(t, c, "name: cron\ncommand: x\nresources: cpus:1\nschedule: \"@every 1m\"\nconcurrency: allow\n", t0)
	for range MaxRunsKept + 5 {
		now := cj.NextRun
		c.Tick(now)
		if _, err := c.Cancel(cj.Runs[len(cj.Runs)-1], now); err != nil {
			t.Fatal(err)
		}
	}
	d := c.TakeDirty()
	if len(cj.Runs) != MaxRunsKept || len(d.Deleted) != 5 || c.LimitHits[LimitRuns] != 5 {
		t.Errorf("runs %d, deleted %v, hits %v", len(cj.Runs), d.Deleted, c.LimitHits)
	}
}

func TestRestoreRebuildsQueues(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\ncompletions: 4\n", t0)
	c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:2", false)}, t0)
	c.Update(status("j.0.1", finished, noReason), t0)
	d := c.TakeDirty()
	if len(d.Jobs) != 1 || !cmp.Equal(d.Indexes["j"], []int{0, 1, 2, 3}) {
		t.Fatalf("dirty %+v", d)
	}
	// A new core from the records resumes where this one was.
	r := New(Config{})
	copyJob := *j
	copyJob.Indexes = append([]Index(nil), j.Indexes...)
	r.Restore(&copyJob)
	if got := r.Launched(); !cmp.Equal(got, []Kill{{TaskID: "j.1.1", AgentID: "a1"}}) {
		t.Errorf("launched after restore %v", got)
	}
	p, _ := r.Offers([]*slacklinev1.Offer{offer("a1", "cpus:2", false)}, t0)
	if got := launchedIDs(p); !cmp.Equal(got, []string{"j.2.1", "j.3.1"}) {
		t.Errorf("launched %v after restore", got)
	}
	if n := r.Counts(); n.Tasks[IndexSucceeded] != 1 || n.Tasks[IndexLaunched] != 3 {
		t.Errorf("counts %+v", n)
	}
}

func TestLateFinishOfALostTaskSucceedsTheIndexOnce(t *testing.T) {
	t.Parallel()
	for _, relaunched := range []bool{false, true} {
		c := New(Config{})
		j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\n", t0)
		c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
		c.Update(status("j.0.1", slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_RECONCILIATION), t0)
		if relaunched {
			c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
		}
		out, eff := c.Update(status("j.0.1", finished, noReason), t0)
		if out != OutcomeSucceeded || j.State != Succeeded || j.succeeded != 1 || j.launched != 0 || len(j.pending) != 0 {
			t.Fatalf("relaunched %v: outcome %v, job %s, %d succeeded", relaunched, out, j.State, j.succeeded)
		}
		if wantKills := map[bool]int{false: 0, true: 1}[relaunched]; len(eff.Kills) != wantKills {
			t.Errorf("relaunched %v: kills %v", relaunched, eff.Kills)
		}
		// The killed attempt's update changes nothing.
		if out, _ := c.Update(status("j.0.2", killed, slacklinev1.Reason_REASON_TASK_KILLED), t0); out != OutcomeNone || j.succeeded != 1 {
			t.Errorf("update of the killed attempt: %v", out)
		}
	}
}

func TestRevocableOfferHeldUntilItsRegularPartner(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	mustSubmit(t, c, "name: j\ncommand: x\nresources: \"cpus:1;mem:256\"\ncompletions: 2\nrevocable: only\n", t0)
	rev := offer("a1", "cpus:2", true)
	p, _ := c.Offers([]*slacklinev1.Offer{rev}, t0)
	if len(p.Launches)+len(p.Declines) != 0 || !cmp.Equal(c.Held(), []string{rev.GetId()}) {
		t.Fatalf("plan %+v, held %v: want the revocable offer held", p, c.Held())
	}
	if c.NextWake() != t0.Add(HoldFor) {
		t.Errorf("NextWake %v, want the hold's end", c.NextWake())
	}
	reg := offer("a1", "mem:1024", false)
	p, _ = c.Offers([]*slacklinev1.Offer{reg}, t0.Add(time.Second))
	if len(p.Launches) != 1 || len(p.Launches[0].Tasks) != 2 || len(p.Launches[0].OfferIDs) != 2 || len(c.Held()) != 0 {
		t.Fatalf("plan %+v, held %v: want both indexes on the pair", p, c.Held())
	}
	// A held offer nobody pairs goes back after HoldFor.
	c2 := New(Config{})
	mustSubmit(t, c2, "name: j\ncommand: x\nresources: \"cpus:1;mem:256\"\nrevocable: only\n", t0)
	c2.Offers([]*slacklinev1.Offer{rev}, t0)
	if eff := c2.Tick(t0.Add(HoldFor - time.Second)); len(eff.Declines) != 0 {
		t.Errorf("declined %v early", eff.Declines)
	}
	if eff := c2.Tick(t0.Add(HoldFor)); !cmp.Equal(eff.Declines, []string{rev.GetId()}) || len(c2.Held()) != 0 {
		t.Errorf("after HoldFor: declines %v, held %v", eff.Declines, c2.Held())
	}
	// A rescinded held offer is forgotten.
	c2.Offers([]*slacklinev1.Offer{rev}, t0)
	c2.Rescind(rev.GetId())
	if len(c2.Held()) != 0 {
		t.Errorf("held %v after rescind", c2.Held())
	}
}

// TestFailedLaunchIsReconciledBeforeARelaunch: an Accept call that failed
// may have launched its tasks, so the index stays launched and its task is
// reconciled (again every ReconcileEvery while no answer comes, and after
// a restart) instead of being relaunched at once, which could run it
// twice. A status of the task confirms the launch; GONE or UNKNOWN, a task
// the coordinator never launched, re-queues the index as a loss.
func TestFailedLaunchIsReconciledBeforeARelaunch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer *slacklinev1.TaskStatus // nil: no answer
		// relaunch: the index is launched again (attempt 2) on the next
		// offer.
		relaunch bool
	}{
		{"launched after all", status("j.0.1", running, slacklinev1.Reason_REASON_RECONCILIATION), false},
		{"finished after all", status("j.0.1", finished, noReason), false},
		{"gone", status("j.0.1", slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_RECONCILIATION), true},
		{"unknown", status("j.0.1", slacklinev1.TaskState_TASK_STATE_UNKNOWN, slacklinev1.Reason_REASON_RECONCILIATION), true},
		{"no answer", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := New(Config{})
			j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\n", t0)
			p, _ := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
			eff := c.LaunchFailed(p.Launches[0].Tasks, t0, "deadline exceeded")
			if want := []Kill{{TaskID: "j.0.1", AgentID: "a1"}}; !cmp.Equal(eff.Reconcile, want) {
				t.Fatalf("reconcile %v, want %v", eff.Reconcile, want)
			}
			if p, _ := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0); len(launchedIDs(p)) != 0 {
				t.Fatalf("relaunched %v before the coordinator answered", launchedIDs(p))
			}
			// A restart keeps the launch unconfirmed.
			d := c.TakeDirty()
			if !cmp.Equal(d.Indexes["j"], []int{0}) || j.Indexes[0].ReconcileAt.IsZero() {
				t.Fatalf("dirty %v, index %+v", d.Indexes, j.Indexes[0])
			}
			if tt.answer != nil {
				c.Update(tt.answer, t0.Add(time.Second))
			}
			p, _ = c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0.Add(time.Second))
			if got := len(launchedIDs(p)) > 0; got != tt.relaunch {
				t.Fatalf("relaunched %v (%v), want %v", got, launchedIDs(p), tt.relaunch)
			}
			if tt.relaunch && (launchedIDs(p)[0] != "j.0.2" || j.Indexes[0].Losses != 1 || j.Failures != 0) {
				t.Errorf("relaunch %v, index %+v, %d failures", launchedIDs(p), j.Indexes[0], j.Failures)
			}
			later := t0.Add(ReconcileEvery)
			wantWake := map[bool]time.Time{true: later}[tt.answer == nil]
			if got := c.NextWake(); !got.Equal(wantWake) {
				t.Errorf("next wake %v, want %v", got, wantWake)
			}
			eff = c.Tick(later)
			if tt.answer == nil {
				if want := []Kill{{TaskID: "j.0.1", AgentID: "a1"}}; !cmp.Equal(eff.Reconcile, want) {
					t.Errorf("reconcile at the next tick %v, want %v", eff.Reconcile, want)
				}
			} else if len(eff.Reconcile) != 0 {
				t.Errorf("reconciled %v again after the answer", eff.Reconcile)
			}
		})
	}
}

// TestNotLaunchedRequeuesAtOnce: tasks whose Accept was never sent (the
// store failed) are re-queued at once, as a loss.
func TestNotLaunchedRequeuesAtOnce(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\n", t0)
	p, _ := c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
	c.NotLaunched(p.Launches[0].Tasks, t0, "the job store failed")
	p, _ = c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
	if got := launchedIDs(p); !cmp.Equal(got, []string{"j.0.2"}) || j.Indexes[0].Losses != 1 || j.Failures != 0 {
		t.Errorf("launched %v, index %+v", got, j.Indexes[0])
	}
}

// TestRestoreKeepsRequeueOrder: indexes re-queued (preempted, lost,
// retried) launch after those queued before them, and a core restored from
// the records (a restart) launches them in the same order.
func TestRestoreKeepsRequeueOrder(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	j := mustSubmit(t, c, "name: j\ncommand: x\nresources: cpus:1\ncompletions: 6\n", t0)
	c.Offers([]*slacklinev1.Offer{offer("a1", "cpus:4", false)}, t0)
	// 0-3 launched, 4 and 5 pending; 3 then 0 then 2 are re-queued.
	c.Update(status("j.3.1", killed, preempted), t0)
	c.Update(status("j.0.1", slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_UNREACHABLE), t0)
	c.Update(status("j.2.1", killed, preempted), t0)
	want := []string{"j.4.1", "j.5.1", "j.3.2", "j.0.2", "j.2.2"}

	r := New(Config{})
	restored := *j
	restored.Indexes = append([]Index(nil), j.Indexes...)
	r.Restore(&restored)
	for name, core := range map[string]*Core{"running": c, "restored": r} {
		var got []string
		for range want {
			p, _ := core.Offers([]*slacklinev1.Offer{offer("a1", "cpus:1", false)}, t0)
			got = append(got, launchedIDs(p)...)
			if ids := launchedIDs(p); len(ids) == 1 {
				core.Update(status(ids[0], finished, noReason), t0)
			}
		}
		if !cmp.Equal(got, want) {
			t.Errorf("%s core launched %v, want %v", name, got, want)
		}
	}
}
