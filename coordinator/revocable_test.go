package coordinator

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

func (a *testAgent) sendEstimate(res string) {
	a.t.Helper()
	_, err := a.client.UpdateOversubscribedResources(context.Background(), connect.NewRequest(&slacklinev1.UpdateOversubscribedResourcesRequest{
		AgentId: a.id, SessionId: a.session, Resources: resources.MustParse(res).Proto("", resources.Revocable),
	}))
	if err != nil {
		a.t.Fatalf("UpdateOversubscribedResources: %v", err)
	}
}

var revocableCapable = []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES}

func isRevocableOffer(ev *slacklinev1.Event) bool { return revocableOfferOf(ev) != nil }

// revocableOfferOf returns the first revocable offer of an offers event
// (one pass may offer an agent's regular and revocable resources together).
func revocableOfferOf(ev *slacklinev1.Event) *slacklinev1.Offer {
	for _, o := range ev.GetOffers().GetOffers() {
		if len(o.GetResources()) > 0 && o.GetResources()[0].GetRevocable() {
			return o
		}
	}
	return nil
}

// offerResources parses an offer and checks it is all revocable or all
// regular, never mixed.
func offerResources(t *testing.T, o *slacklinev1.Offer) (resources.Resources, bool) {
	t.Helper()
	regular, revocable, err := resources.FromProto(o.GetResources())
	if err != nil {
		t.Fatal(err)
	}
	if !regular.IsEmpty() && !revocable.IsEmpty() {
		t.Fatalf("offer %s mixes regular %v and revocable %v", o.GetId(), regular, revocable)
	}
	return regular.Add(revocable), !revocable.IsEmpty()
}

// Port of Mesos's OversubscriptionTest.RevocableOffer: revocable resources
// reach only frameworks with the capability, in offers of their own.
func TestRevocableOffer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		capable := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "capable", Capabilities: revocableCapable})
		plain := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "plain"})
		agent.sendEstimate("cpus:1.5")

		ev := capable.next(isRevocableOffer)
		got, revocable := offerResources(t, revocableOfferOf(ev))
		if !revocable || got.String() != "cpus:1.5" {
			t.Fatalf("revocable offer = %v (revocable %v), want cpus:1.5", got, revocable)
		}
		plain.quiet(500*time.Millisecond, isRevocableOffer)

		agents, _ := tc.operator.GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		_, est, _ := resources.FromProto(agents.Msg.GetAgents()[0].GetRevocable())
		if est.String() != "cpus:1.5" {
			t.Fatalf("GetAgents revocable = %v", est)
		}
	})
}

// Ports of Mesos's RescindRevocableOfferWithIncreasedRevocable and
// ...WithDecreasedRevocable, where Slackline differs on purpose: an estimate
// that grows rescinds nothing and the growth comes in an offer of its own;
// one that shrinks rescinds only the offers that no longer fit (the newest
// first), and the rest of the shrunk estimate is offered again. Regular
// offers are left alone.
func TestRevocableOffersOnEstimateChange(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "capable", Capabilities: revocableCapable})
		regular := fw.nextOffer()
		revocableOffer := func(want string) *slacklinev1.Offer {
			t.Helper()
			o := revocableOfferOf(fw.next(isRevocableOffer))
			if got, _ := offerResources(t, o); got.String() != want {
				t.Fatalf("revocable offer %v, want %s", got, want)
			}
			return o
		}
		agent.sendEstimate("cpus:1")
		first := revocableOffer("cpus:1")

		agent.sendEstimate("cpus:1.5")
		second := revocableOffer("cpus:0.5")
		fw.quiet(300*time.Millisecond, isRescind)
		for _, ev := range fw.backlog {
			if isRescind(ev) {
				t.Fatalf("a grown estimate rescinded %s", ev.GetRescind().GetOfferId())
			}
		}

		// 1.5 cpus are held in two offers; at 1.2 the 0.5 of the newer one no
		// longer fits and it goes; the older one stays, and the 0.2 left of the
		// estimate is offered again.
		agent.sendEstimate("cpus:1.2")
		if id := fw.next(isRescind).GetRescind().GetOfferId(); id != second.GetId() {
			t.Fatalf("rescinded %s, want the newer revocable offer %s (the older is %s, the regular one %s)",
				id, second.GetId(), first.GetId(), regular.GetId())
		}
		revocableOffer("cpus:0.2")
		fw.quiet(300*time.Millisecond, isRescind)
	})
}

// Launching on a revocable offer makes a revocable task; revocable
// resources never count against quota.
func TestRevocableLaunchAndQuota(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		ctx := context.Background()
		if _, err := tc.operator.UpdateQuota(ctx, connect.NewRequest(&slacklinev1.UpdateQuotaRequest{Configs: []*slacklinev1.QuotaConfig{
			{Role: "batch", Limits: resources.MustParse("cpus:0.5;mem:256").Proto("", resources.Regular)}}})); err != nil {
			t.Fatal(err)
		}
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "capable", Roles: []string{"batch"}, Capabilities: revocableCapable})
		agent.sendEstimate("cpus:1.5;mem:512")
		offer := revocableOfferOf(fw.next(isRevocableOffer))
		got, _ := offerResources(t, offer)
		if got.CPUs() != 1.5 {
			t.Fatalf("revocable offer %v: quota (cpus 0.5) must not limit revocable resources", got)
		}
		task := taskInfo("rev", "cpus:1;mem:128")
		for _, r := range task.Resources {
			r.Revocable = true
		}
		mixed := taskInfo("mixed", "cpus:0.1")
		if err := launch(fw, offer, refuse(0), task, mixed); err != nil {
			t.Fatal(err)
		}
		if st := fw.nextUpdate(); st.GetTaskId() != "mixed" || st.GetState() != slacklinev1.TaskState_TASK_STATE_ERROR {
			t.Fatalf("update %v, want mixed ERROR (regular resources from a revocable offer)", st)
		}
		run := agent.nextCommand().GetRunTask()
		if run.GetTask().GetTaskId() != "rev" || !run.GetTask().GetResources()[0].GetRevocable() {
			t.Fatalf("agent got %v, want the revocable task", run)
		}
		agents, _ := tc.operator.GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		_, held, _ := resources.FromProto(agents.Msg.GetAgents()[0].GetAllocatedRevocable())
		if held.CPUs() < 1 {
			t.Fatalf("allocated_revocable = %v, want at least the task's cpus:1", held)
		}
		// A non-revocable estimate of ports is refused.
		_, err := agent.client.UpdateOversubscribedResources(ctx, connect.NewRequest(&slacklinev1.UpdateOversubscribedResourcesRequest{
			AgentId: agent.id, SessionId: agent.session, Resources: resources.MustParse("ports:[1-2]").Proto("", resources.Revocable)}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("ports estimate: %v, want InvalidArgument", err)
		}
	})
}

// A task may run on revocable cpus with regular memory (as in Mesos): the
// framework accepts a revocable and a regular offer of one agent together.
func TestRevocableCPUsWithRegularMemory(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "capable", Capabilities: revocableCapable})
		agent.sendEstimate("cpus:1")
		var regular, revocable *slacklinev1.Offer
		for regular == nil || revocable == nil {
			for _, o := range fw.next(isOffers).GetOffers().GetOffers() {
				if _, rev := offerResources(t, o); rev {
					revocable = o
				} else {
					regular = o
				}
			}
		}
		task := taskInfo("mixed", "cpus:0.5;mem:256")
		task.Resources[0].Revocable = true // cpus revocable, mem regular
		_, err := fw.client.Accept(context.Background(), call(fw, &slacklinev1.AcceptRequest{
			FrameworkId: fw.id, OfferIds: []string{regular.GetId(), revocable.GetId()}, Filters: refuse(0),
			Operations: []*slacklinev1.Operation{{Operation: &slacklinev1.Operation_Launch{Launch: &slacklinev1.LaunchOperation{TaskInfos: []*slacklinev1.TaskInfo{task}}}}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		run := agent.nextCommand().GetRunTask()
		reg, rev, _ := resources.FromProto(run.GetTask().GetResources())
		if reg.String() != "mem:256" || rev.String() != "cpus:0.5" {
			t.Fatalf("launched with regular %v and revocable %v, want mem:256 and cpus:0.5", reg, rev)
		}
		agents, _ := tc.operator.GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		_, held, _ := resources.FromProto(agents.Msg.GetAgents()[0].GetAllocatedRevocable())
		if held.CPUs() < 0.5 {
			t.Fatalf("allocated_revocable %v, want the task's cpus:0.5", held)
		}
	})
}

// TestEstimateHeldToTheAgentsTotal: an agent that reports more slack than
// it registered (a stolen certificate attracting revocable tasks past its
// max_resources cap) is offered at most its total.
func TestEstimateHeldToTheAgentsTotal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		capable := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "capable", Capabilities: revocableCapable})
		agent.sendEstimate("cpus:100000;mem:1048576")

		got, _ := offerResources(t, revocableOfferOf(capable.next(isRevocableOffer)))
		if got.String() != "cpus:2;mem:1024" {
			t.Fatalf("revocable offer = %v, want the agent's total cpus:2;mem:1024", got)
		}
		agents, _ := tc.operator.GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		if _, est, _ := resources.FromProto(agents.Msg.GetAgents()[0].GetRevocable()); est.String() != "cpus:2;mem:1024" {
			t.Fatalf("GetAgents revocable = %v, want cpus:2;mem:1024", est)
		}
	})
}
