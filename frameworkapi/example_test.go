package frameworkapi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// batch runs a fixed number of identical tasks and stops when they are all
// finished. It implements only the Handler methods it needs.
type batch struct {
	frameworkapi.BaseHandler
	need     resources.Resources
	pending  int // tasks not launched yet
	running  int // tasks launched and not finished
	launched int // ids handed out so far
	finished int // tasks that reached TASK_STATE_FINISHED
	stop     context.CancelFunc
}

// Offers launches as many pending tasks as fit and declines the rest.
func (b *batch) Offers(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
	needs := make([]frameworkapi.Need, b.pending)
	for i := range needs {
		needs[i] = frameworkapi.Need{Resources: b.need}
	}
	for _, plan := range frameworkapi.Pack(offers, needs, 0) {
		if len(plan.Tasks) == 0 {
			_ = c.Decline(ctx, []string{plan.Offer.GetId()}, nil) // nil: refuse for 5 s
			continue
		}
		var tasks []*slacklinev1.TaskInfo
		for _, placed := range plan.Tasks {
			b.launched++
			id := fmt.Sprintf("task-%d", b.launched)
			cmd := &slacklinev1.CommandInfo{Value: "echo hello from " + id, Shell: true}
			task := frameworkapi.NewTask(id, id, plan.Offer, placed.Resources, cmd)
			task.Labels = map[string]string{"sim.duration": "50ms"} // how long slackline-sim "runs" it
			tasks = append(tasks, task)
		}
		if err := c.Launch(ctx, []string{plan.Offer.GetId()}, tasks, frameworkapi.Filters(0)); err != nil {
			fmt.Println("launch:", err)
			continue
		}
		b.pending -= len(tasks)
		b.running += len(tasks)
	}
	if b.pending == 0 {
		_ = c.Suppress(ctx) // no more offers, please
	}
}

// Update counts finished tasks and re-queues failed ones. The SDK
// acknowledges the update after Update returns.
func (b *batch) Update(ctx context.Context, c *frameworkapi.Client, status *slacklinev1.TaskStatus) {
	if !frameworkapi.IsTerminal(status.GetState()) {
		return
	}
	b.running--
	if status.GetState() != slacklinev1.TaskState_TASK_STATE_FINISHED {
		b.pending++
		_ = c.Revive(ctx)
		return
	}
	b.finished++
	if b.pending == 0 && b.running == 0 {
		_ = c.Teardown(ctx) // done: kill nothing, release the framework id
		b.stop()
	}
}

// Example_batch is a complete framework: it runs three tasks of one CPU and
// 128 MiB each on whatever agents the coordinator offers, then tears itself
// down. The example starts its own coordinator and simulated agent; a real
// framework points Coordinator at its cluster (`make run` starts one on
// http://127.0.0.1:5050).
func Example_batch() {
	coordinatorURL, stopCluster := startLocalCluster()
	defer stopCluster()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, done := context.WithCancel(ctx)
	defer done()

	c, err := frameworkapi.New(frameworkapi.Config{
		Coordinator: coordinatorURL,
		Framework: &slacklinev1.FrameworkInfo{
			Name:                   "example-batch",
			Roles:                  []string{"*"},
			FailoverTimeoutSeconds: 60,
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	b := &batch{need: resources.MustParse("cpus:1;mem:128"), pending: 3, stop: done}
	switch err := c.Run(ctx, b); {
	case errors.Is(err, frameworkapi.ErrTornDown):
		fmt.Println("framework removed by the coordinator:", err)
	case err != nil:
		fmt.Println(err)
	}
	fmt.Println("finished tasks:", b.finished)
	// Output: finished tasks: 3
}

// ExampleHandlerFuncs shows a handler made of functions: it declines every
// offer, for a minute.
func ExampleHandlerFuncs() {
	h := frameworkapi.HandlerFuncs{
		SubscribedFunc: func(_ context.Context, _ *frameworkapi.Client, ev *slacklinev1.SubscribedEvent) {
			fmt.Println("subscribed as", ev.GetFrameworkId())
		},
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			for _, o := range offers {
				_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(60))
			}
		},
	}
	c, err := frameworkapi.New(frameworkapi.Config{Framework: &slacklinev1.FrameworkInfo{Name: "decliner"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = c.Run(ctx, h)
}

// ExamplePack places a queue of tasks, one of which needs two ports, on two
// offers.
func ExamplePack() {
	offers := []*slacklinev1.Offer{
		{Id: "o1", AgentId: "a1", Resources: resources.MustParse("cpus:2;mem:512;ports:[31000-31009]").Proto("*", resources.Regular)},
		{Id: "o2", AgentId: "a2", Resources: resources.MustParse("cpus:1;mem:512").Proto("*", resources.Regular)},
	}
	needs := []frameworkapi.Need{
		{Resources: resources.MustParse("cpus:1;mem:128"), Ports: 2},
		{Resources: resources.MustParse("cpus:1;mem:128")},
		{Resources: resources.MustParse("cpus:1;mem:128")},
		{Resources: resources.MustParse("cpus:1;mem:128")},
	}
	for _, plan := range frameworkapi.Pack(offers, needs, 0) {
		for _, placed := range plan.Tasks {
			fmt.Printf("%s: task %d with %s\n", plan.Offer.GetId(), placed.Need, placed.Resources)
		}
		fmt.Printf("%s: %s left\n", plan.Offer.GetId(), plan.Remaining)
	}
	// Output:
	// o1: task 0 with cpus:1;mem:128;ports:[31000-31001]
	// o1: task 1 with cpus:1;mem:128
	// o1: mem:256;ports:[31002-31009] left
	// o2: task 2 with cpus:1;mem:128
	// o2: mem:384 left
}
