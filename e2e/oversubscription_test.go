package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/resources"
)

// watcher is an in-process framework that records revocable offers and
// rescinds and holds its offers until told otherwise.
type watcher struct {
	mu        sync.Mutex
	revocable map[string]*slacklinev1.Offer // outstanding revocable offers
	seen      int                           // revocable offers ever received
	rescinded []string
	decline   bool // decline every offer for an hour
	client    *frameworkapi.Client
}

func startWatcher(t *testing.T, addr, name string, capable bool) *watcher {
	t.Helper()
	info := &slacklinev1.FrameworkInfo{Name: name}
	if capable {
		info.Capabilities = []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES}
	}
	c, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + addr, Framework: info})
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{revocable: map[string]*slacklinev1.Offer{}, client: c}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Run(ctx, frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, o := range offers {
				_, rev, _ := frameworkapi.OfferResources(o)
				if rev {
					w.seen++
					w.revocable[o.GetId()] = o
				}
				if w.decline || !rev {
					delete(w.revocable, o.GetId())
					_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(3600))
				}
			}
		},
		RescindFunc: func(_ context.Context, _ *frameworkapi.Client, id string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if _, ok := w.revocable[id]; ok {
				w.rescinded = append(w.rescinded, id)
				delete(w.revocable, id)
			}
		},
	})
	return w
}

func (w *watcher) counts() (seen, outstanding, rescinded int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen, len(w.revocable), len(w.rescinded)
}

// TestOversubscription: an idle guaranteed task's slack is estimated and
// offered as revocable resources to a framework with the capability (never
// to one without); batch-framework --revocable runs CPU-bound tasks there;
// when the guaranteed task starts using its CPUs the estimate shrinks and
// the outstanding revocable offer is rescinded.
func TestOversubscription(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	agent := startAgent(t, addr, "oversub", "cpus:2;mem:2048", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "noop")
	waitAgentsActive(t, addr, 1)

	trigger := filepath.Join(taskVisibleDir(t), "go")
	// Idle until the trigger file appears, then busy on both CPUs.
	busy := fmt.Sprintf(`while [ ! -f %s ]; do sleep 0.1; done; (while :; do :; done) & while :; do :; done`, trigger)
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:1.5;mem:64", "--command", busy)

	capable := startWatcher(t, addr, "capable", true)
	plain := startWatcher(t, addr, "plain", false)
	eventually(t, 60*time.Second, func() string {
		if seen, _, _ := capable.counts(); seen == 0 {
			return "no revocable offer yet"
		}
		return ""
	})
	var est float64
	capable.mu.Lock()
	for _, o := range capable.revocable {
		r, _, _ := frameworkapi.OfferResources(o)
		est = r.CPUs()
	}
	capable.mu.Unlock()
	if est <= 0 || est > 2 {
		t.Fatalf("revocable offer of %v cpus, want some of the idle task's slack", est)
	}
	if seen, _, _ := plain.counts(); seen != 0 {
		t.Fatalf("a framework without the capability got %d revocable offers", seen)
	}

	// Hand the revocable resources to batch-framework --revocable.
	capable.mu.Lock()
	capable.decline = true
	for id := range capable.revocable {
		_ = capable.client.Decline(context.Background(), []string{id}, frameworkapi.Filters(3600))
		delete(capable.revocable, id)
	}
	capable.mu.Unlock()
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "best-effort", "--revocable", "--tasks", "2",
		"--task-resources", "cpus:0.2;mem:32", "--command", "while :; do :; done")
	eventually(t, 30*time.Second, func() string {
		tasks := taskStatuses(t, addr, "best-effort")
		running := 0
		for _, task := range tasks {
			_, rev, _ := resources.FromProto(task.GetResources())
			if task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING && rev.CPUs() > 0 {
				running++
			}
		}
		if running != 2 {
			return fmt.Sprintf("%d revocable tasks running", running)
		}
		return ""
	})
	for _, c := range agent.containers(t) {
		if c.GetTaskId() != "" && c.GetRevocable() && c.GetCgroupPath() == "" {
			t.Fatalf("revocable container %v has no cgroup", c)
		}
	}

	// Let the capable framework hold what is left, then load the
	// guaranteed task: the estimate shrinks, the offer is rescinded.
	capable.mu.Lock()
	capable.decline = false
	capable.mu.Unlock()
	if err := capable.client.Revive(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() string {
		if _, outstanding, _ := capable.counts(); outstanding == 0 {
			return "no outstanding revocable offer"
		}
		return ""
	})
	before := estimate(t, agent)
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() string {
		if _, _, rescinded := capable.counts(); rescinded == 0 {
			return "outstanding revocable offer not rescinded"
		}
		if after := estimate(t, agent); after >= before {
			return fmt.Sprintf("estimate %v cpus, was %v before the load", after, before)
		}
		return ""
	})
}

// estimate returns the agent's current revocable cpus estimate.
func estimate(t *testing.T, a *realAgent) float64 {
	resp, err := a.node().GetEstimate(context.Background(), connect.NewRequest(&slacklinev1.GetEstimateRequest{}))
	if err != nil {
		return -1
	}
	_, rev, _ := resources.FromProto(resp.Msg.GetRevocable())
	return rev.CPUs()
}

// TestGrowingEstimateNeverRescinds: with the agent's default estimator
// flags, an estimate that grows adds a revocable offer for the growth and
// never rescinds the one outstanding. An idle guaranteed task's slack is
// offered and held; a second idle guaranteed task starts, and once its
// samples show it idle the estimate grows: a second offer arrives, the
// first is still there, and nothing was rescinded.
func TestGrowingEstimateNeverRescinds(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	agent := startAgent(t, addr, "grow", "cpus:2;mem:2048", "--qos-controller", "noop")
	waitAgentsActive(t, addr, 1)
	holder := startWatcher(t, addr, "holder", true) // holds revocable offers, declines regular ones

	offered := func() (total float64, ids map[string]bool) {
		holder.mu.Lock()
		defer holder.mu.Unlock()
		ids = map[string]bool{}
		for id, o := range holder.revocable {
			r, _, _ := frameworkapi.OfferResources(o)
			total += r.CPUs()
			ids[id] = true
		}
		return total, ids
	}
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed-a", "--tasks", "1",
		"--task-resources", "cpus:1;mem:64", "--command", "sleep 3600")
	var first map[string]bool
	eventually(t, 30*time.Second, func() string {
		total, ids := offered()
		if total < 0.5 {
			return fmt.Sprintf("%.2f revocable cpus offered, want most of the idle task's 1", total)
		}
		first = ids
		return ""
	})
	before := estimate(t, agent)

	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed-b", "--tasks", "1",
		"--task-resources", "cpus:0.5;mem:64", "--command", "sleep 3600")
	eventually(t, 30*time.Second, func() string {
		total, ids := offered()
		if after := estimate(t, agent); after < before+0.3 {
			return fmt.Sprintf("estimate %.2f cpus, was %.2f with one idle task", after, before)
		}
		if len(ids) < 2 || total < before+0.3 {
			return fmt.Sprintf("%d revocable offers of %.2f cpus outstanding, want the growth offered beside the first", len(ids), total)
		}
		for id := range first {
			if !ids[id] {
				return "the first revocable offer " + id + " is gone"
			}
		}
		return ""
	})
	if total, _ := offered(); total > estimate(t, agent)+1e-9 {
		t.Errorf("%.2f revocable cpus offered, more than the estimate %.2f", total, estimate(t, agent))
	}
	if _, _, rescinded := holder.counts(); rescinded != 0 {
		t.Errorf("%d revocable offers rescinded while the estimate only grew", rescinded)
	}
}
