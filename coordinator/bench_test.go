package coordinator

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/protocol"
)

// BenchmarkOfferCycle measures the coordinator's own work around the
// allocator for one offer cycle of a small cluster, without a network: 100
// agents offered to 10 frameworks, every offer declined (no filter)
// through the Decline handler, then one allocation pass that offers them
// all again. An op is one whole cycle: 100 offers made, sent, declined.
func BenchmarkOfferCycle(b *testing.B) {
	const agents, frameworks = 100, 10
	d := newDomain(b)
	subs := map[string]*subscription{}
	for i := range frameworks {
		id, sub := d.connectFramework(&slacklinev1.FrameworkInfo{Name: fmt.Sprint("fw", i)})
		subs[id] = sub
	}
	for i := range agents {
		d.mustRegister(registerRequest("", fmt.Sprint("host-", i), "cpus:4;mem:4096"))
	}
	d.allocate()
	decline := func() int {
		n := 0
		for id, sub := range subs {
			var ids []string
			for _, ev := range events(sub) {
				for _, o := range ev.GetOffers().GetOffers() {
					ids = append(ids, o.GetId())
				}
			}
			if len(ids) == 0 {
				continue
			}
			n += len(ids)
			req := connect.NewRequest(&slacklinev1.DeclineRequest{FrameworkId: id, OfferIds: ids, Filters: &slacklinev1.Filters{RefuseSeconds: new(float64)}})
			req.Header().Set(protocol.StreamIDHeader, sub.id)
			if _, err := (schedulerService{d.c}).Decline(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
		return n
	}
	b.ReportAllocs()
	for b.Loop() {
		if n := decline(); n != agents {
			b.Fatalf("%d offers declined, want %d", n, agents)
		}
		d.allocate()
	}
}
