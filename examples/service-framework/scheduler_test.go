package main

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func testScheduler(instances int) *scheduler {
	return newScheduler(schedulerConfig{
		name: "svc", incarnation: "x", instances: instances, need: resources.MustParse("cpus:1;mem:128"),
		command: "sleep 1000", moveTimeout: 30 * time.Second,
	})
}

func offerOn(agent string, unavailableFrom time.Time) *slacklinev1.Offer {
	o := &slacklinev1.Offer{Id: "o-" + agent, AgentId: agent, Hostname: agent, Resources: resources.MustParse("cpus:2;mem:1024").Proto("*", resources.Regular)}
	if !unavailableFrom.IsZero() {
		o.Unavailability = &slacklinev1.Unavailability{Start: timestamppb.New(unavailableFrom)}
	}
	return o
}

func status(id string, state slacklinev1.TaskState) *slacklinev1.TaskStatus {
	return &slacklinev1.TaskStatus{TaskId: id, State: state}
}

// placed returns the agents of a plan's launches.
func placed(p plan) []string {
	var out []string
	for _, l := range p.launches {
		out = append(out, l.task.GetAgentId())
	}
	return out
}

func TestPlacementPrefersAvailableAgents(t *testing.T) {
	s := testScheduler(2)
	p := s.offers([]*slacklinev1.Offer{
		offerOn("soon", t0.Add(time.Hour)),
		offerOn("later", t0.Add(48*time.Hour)),
		offerOn("free", time.Time{}),
	}, t0)
	if got := placed(p); !slices.Equal(got, []string{"free", "later"}) {
		t.Fatalf("placed on %v, want [free later] (no unavailability, then the latest)", got)
	}
	if !slices.Equal(p.declines, []string{"o-soon"}) {
		t.Fatalf("declined %v, want [o-soon]", p.declines)
	}
	// One per agent: a second offer of a used agent is declined.
	if p := s.offers([]*slacklinev1.Offer{offerOn("free", time.Time{})}, t0); len(p.launches) != 0 {
		t.Fatalf("second instance on one agent: %v", p.launches)
	}
}

// TestMigrationOnInverseOffer is the blog post's scenario: replacement
// first, then the old instance stops, then the inverse offer is accepted;
// the RUNNING count never drops below N.
func TestMigrationOnInverseOffer(t *testing.T) {
	s := testScheduler(2)
	p := s.offers([]*slacklinev1.Offer{offerOn("a", time.Time{}), offerOn("b", time.Time{})}, t0)
	ids := map[string]string{} // agent -> task id
	for _, l := range p.launches {
		ids[l.task.GetAgentId()] = l.task.GetTaskId()
		s.update(status(l.task.GetTaskId(), slacklinev1.TaskState_TASK_STATE_RUNNING), t0)
	}
	running := func() int { _, r := s.counts(); return r }

	inverse := &slacklinev1.InverseOffer{Id: "io-1", AgentId: "a"}
	p = s.inverseOffers([]*slacklinev1.InverseOffer{inverse}, t0)
	if len(p.kills)+len(p.acceptInverse)+len(p.declineInverse) != 0 || !p.revive {
		t.Fatalf("on the inverse offer: %+v, want a revive and nothing else", p)
	}
	// a is draining: its offer is not used; c gets the replacement.
	p = s.offers([]*slacklinev1.Offer{offerOn("a", t0.Add(time.Hour)), offerOn("c", time.Time{})}, t0.Add(time.Second))
	if got := placed(p); !slices.Equal(got, []string{"c"}) || len(p.kills) != 0 {
		t.Fatalf("replacement placed on %v with kills %v, want [c] and no kill yet", got, p.kills)
	}
	replacement := p.launches[0].task.GetTaskId()
	p = s.update(status(replacement, slacklinev1.TaskState_TASK_STATE_STARTING), t0.Add(2*time.Second))
	if len(p.kills) != 0 {
		t.Fatal("killed the old instance before the replacement runs")
	}
	p = s.update(status(replacement, slacklinev1.TaskState_TASK_STATE_RUNNING), t0.Add(3*time.Second))
	if len(p.kills) != 1 || p.kills[0].taskID != ids["a"] || len(p.acceptInverse) != 0 {
		t.Fatalf("after the replacement runs: %+v, want a kill of %s and no accept yet", p, ids["a"])
	}
	if running() < 2 {
		t.Fatalf("%d running, want >= 2", running())
	}
	p = s.update(status(ids["a"], slacklinev1.TaskState_TASK_STATE_KILLED), t0.Add(4*time.Second))
	if !slices.Equal(p.acceptInverse, []string{"io-1"}) {
		t.Fatalf("after the old instance ended: %+v, want io-1 accepted", p)
	}
	if running() != 2 || p.revive {
		t.Fatalf("%d running (revive %v), want 2 and no revive", running(), p.revive)
	}
	// a is left alone until it shows up without unavailability.
	if p := s.update(status(ids["b"], slacklinev1.TaskState_TASK_STATE_FAILED), t0.Add(5*time.Second)); !p.revive {
		t.Fatal("no revive after an instance failed")
	}
	if got := placed(s.offers([]*slacklinev1.Offer{offerOn("a", t0.Add(time.Hour))}, t0.Add(6*time.Second))); len(got) != 0 {
		t.Fatalf("placed on the agent it left: %v", got)
	}
	if got := placed(s.offers([]*slacklinev1.Offer{offerOn("a", time.Time{})}, t0.Add(7*time.Second))); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("placed on %v, want [a] once it is back UP", got)
	}
}

func TestInverseOfferDeclinedWhenItCannotMove(t *testing.T) {
	s := testScheduler(1)
	p := s.offers([]*slacklinev1.Offer{offerOn("a", time.Time{})}, t0)
	id := p.launches[0].task.GetTaskId()
	s.update(status(id, slacklinev1.TaskState_TASK_STATE_RUNNING), t0)
	s.inverseOffers([]*slacklinev1.InverseOffer{{Id: "io-1", AgentId: "a"}}, t0)
	// No other agent: nothing happens until the move timeout, then a decline.
	if p := s.offers([]*slacklinev1.Offer{offerOn("a", t0.Add(time.Hour))}, t0.Add(29*time.Second)); len(p.declineInverse)+len(p.kills)+len(p.launches) != 0 {
		t.Fatalf("before the timeout: %+v", p)
	}
	p = s.offers([]*slacklinev1.Offer{offerOn("a", t0.Add(time.Hour))}, t0.Add(30*time.Second))
	if !slices.Equal(p.declineInverse, []string{"io-1"}) || len(p.kills) != 0 {
		t.Fatalf("at the timeout: %+v, want io-1 declined and the instance kept", p)
	}
	// An inverse offer for an agent it does not use is accepted at once.
	if p := s.inverseOffers([]*slacklinev1.InverseOffer{{Id: "io-2", AgentId: "z"}}, t0); !slices.Equal(p.acceptInverse, []string{"io-2"}) {
		t.Fatalf("unused agent: %+v, want io-2 accepted", p)
	}
	// A rescinded inverse offer is forgotten.
	s.inverseOffers([]*slacklinev1.InverseOffer{{Id: "io-3", AgentId: "a"}}, t0)
	s.rescindInverse("io-3")
	if len(s.held) != 0 {
		t.Fatalf("held after rescind: %v", s.held)
	}
}

// TestUnhealthyInstanceIsReplaced: instances carry the health check; one
// the agent killed for failing it (FAILED, REASON_TASK_HEALTH_CHECK_STATUS_FAILED)
// is missing at once, offers are revived and the next offer replaces it.
func TestUnhealthyInstanceIsReplaced(t *testing.T) {
	s := testScheduler(1)
	s.cfg.healthCheck = &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: 8080}}
	p := s.offers([]*slacklinev1.Offer{offerOn("a", time.Time{})}, t0)
	if len(p.launches) != 1 || p.launches[0].task.GetHealthCheck().GetHttp().GetPort() != 8080 {
		t.Fatalf("launches %v, want one instance with the health check", p.launches)
	}
	id := p.launches[0].task.GetTaskId()
	s.update(status(id, slacklinev1.TaskState_TASK_STATE_RUNNING), t0)
	unhealthy := status(id, slacklinev1.TaskState_TASK_STATE_RUNNING)
	unhealthy.Healthy = new(bool)
	if p := s.update(unhealthy, t0); p.revive || len(p.kills) != 0 {
		t.Fatalf("an unhealthy but running instance changed the plan: %+v (the agent decides the kill)", p)
	}
	failed := status(id, slacklinev1.TaskState_TASK_STATE_FAILED)
	failed.Reason = slacklinev1.Reason_REASON_TASK_HEALTH_CHECK_STATUS_FAILED
	if p := s.update(failed, t0); !p.revive {
		t.Fatal("an instance killed for its health did not revive offers")
	}
	if s.unhealthyReplaced != 1 {
		t.Fatalf("unhealthyReplaced = %d, want 1", s.unhealthyReplaced)
	}
	p = s.offers([]*slacklinev1.Offer{offerOn("a", time.Time{})}, t0)
	if len(p.launches) != 1 || p.launches[0].task.GetTaskId() == id {
		t.Fatalf("launches %v, want a new instance replacing %s", p.launches, id)
	}
}

func TestParseHealthCheck(t *testing.T) {
	for in, want := range map[string]*slacklinev1.HealthCheck{
		"http:8080/healthz": {Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: 8080, Path: "/healthz"}},
		"http:80":           {Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: 80}},
		"tcp:5432":          {Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 5432}},
		"command:test -f x": {Type: slacklinev1.HealthCheck_TYPE_COMMAND, Command: &slacklinev1.CommandInfo{Value: "test -f x", Shell: true}},
	} {
		hc, err := parseHealthCheck(in)
		if err != nil {
			t.Errorf("parseHealthCheck(%q): %v", in, err)
			continue
		}
		if !proto.Equal(hc, want) {
			t.Errorf("parseHealthCheck(%q) = %v, want %v", in, hc, want)
		}
	}
	for _, bad := range []string{"", "http:", "http:0", "tcp:70000", "command:", "udp:53", "8080"} {
		if _, err := parseHealthCheck(bad); err == nil {
			t.Errorf("parseHealthCheck(%q) accepted", bad)
		}
	}
}
