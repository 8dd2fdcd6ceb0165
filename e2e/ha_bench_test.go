package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/etcdtest"
)

// BenchmarkHA measures a coordinator group on real etcd members and real
// binaries against one coordinator on bbolt, in one run: failover time
// (the leader SIGKILLed -> the first offer from the new leader) over
// SLACKLINE_BENCH_HA_TRIALS trials (default 10), registry write latency
// (store.Apply of one agent-sized record) and offers per second to a
// framework that declines everything at once. It runs its trials once
// whatever b.N and ends with one summary line.
//
//	go test -run '^$' -bench BenchmarkHA -benchtime 1x ./e2e
func BenchmarkHA(b *testing.B) {
	trials := 10
	if n, err := strconv.Atoi(os.Getenv("SLACKLINE_BENCH_HA_TRIALS")); err == nil && n > 0 {
		trials = n
	}
	etcd := etcdtest.Start(b, 3)
	for b.Loop() {
	}

	boltStore, err := store.Open(b.TempDir(), time.Second, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer boltStore.Close()
	boltWrite := writeLatency(b, boltStore)
	etcdWrite := writeLatency(b, fencedStore(b, etcd.Client(b)))

	single := freeAddr(b)
	start(b, "slackline-coordinator", coordinatorArgs(single, b.TempDir())...)
	boltOffers := offerRate(b, "http://"+single)
	g := startGroup(b, etcd, 3)
	g.waitLeader(30 * time.Second)
	etcdOffers := offerRate(b, g.list())

	failovers := failoverTimes(b, etcd, trials)
	p := func(ds []time.Duration, q float64) time.Duration {
		return ds[min(len(ds)-1, int(q*float64(len(ds))))].Round(time.Microsecond)
	}
	b.ReportMetric(float64(p(failovers, 0.5).Milliseconds()), "failover-p50-ms")
	b.ReportMetric(float64(p(failovers, 0.99).Milliseconds()), "failover-p99-ms")
	b.ReportMetric(etcdOffers, "offers/s-etcd")
	b.ReportMetric(boltOffers, "offers/s-bolt")
	fmt.Printf("ha: failover (leader killed -> first offer) p50 %v p99 %v over %d trials (lease TTL %v); registry write p50/p99 bbolt %v/%v, etcd (3 members) %v/%v; offers/s bbolt %.0f, etcd group %.0f\n",
		p(failovers, 0.5), p(failovers, 0.99), len(failovers), haLeaseTTL,
		p(boltWrite, 0.5), p(boltWrite, 0.99), p(etcdWrite, 0.5), p(etcdWrite, 0.99), boltOffers, etcdOffers)
}

// fencedStore returns an etcd store fenced on a leader key of its own, as
// a leader writes.
func fencedStore(b *testing.B, client *clientv3.Client) store.Store {
	ctx := context.Background()
	lease, err := client.Grant(ctx, 60)
	if err != nil {
		b.Fatal(err)
	}
	put, err := client.Put(ctx, "/bench/leader/me", "me", clientv3.WithLease(lease.ID))
	if err != nil {
		b.Fatal(err)
	}
	return store.NewEtcd(client, store.EtcdOptions{Prefix: "/bench/", Fence: store.Fence{Key: "/bench/leader/me", Revision: put.Header.Revision}})
}

// writeLatency returns the sorted latencies of 500 sequential writes of an
// agent-sized record.
func writeLatency(b *testing.B, s store.Store) []time.Duration {
	record, _ := proto.Marshal(&slacklinev1.AgentRecord{Info: &slacklinev1.AgentInfo{Hostname: "bench-host-0001.example.com", Id: "0123456789abcdef0123456789abcdef"}})
	out := make([]time.Duration, 0, 500)
	for i := range cap(out) {
		start := time.Now()
		if err := s.Apply(context.Background(), store.Put(store.BucketAgents, strconv.Itoa(i%50), record)); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// counter is a framework that declines every offer at once and notes when
// each arrived.
type counter struct {
	frameworkapi.BaseHandler
	mu     sync.Mutex
	offers []time.Time
}

func (c *counter) Offers(ctx context.Context, client *frameworkapi.Client, offers []*slacklinev1.Offer) {
	c.mu.Lock()
	for range offers {
		c.offers = append(c.offers, time.Now())
	}
	c.mu.Unlock()
	ids := make([]string, len(offers))
	for i, o := range offers {
		ids[i] = o.GetId()
	}
	_ = client.Decline(ctx, ids, &slacklinev1.Filters{RefuseSeconds: proto.Float64(0)})
}

// firstAfter returns when the first offer after t arrived.
func (c *counter) firstAfter(t time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, at := range c.offers {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

func runCounter(b testing.TB, coordinators string) *counter {
	c := &counter{}
	client, err := frameworkapi.New(frameworkapi.Config{
		Coordinator: coordinators, Framework: &slacklinev1.FrameworkInfo{Name: "bench", Roles: []string{"bench"}, FailoverTimeoutSeconds: 3600},
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Run(ctx, c)
	}()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}

// offerRate returns the offers per second 20 simulated agents' resources
// make to one framework that declines them at once, over 5 s.
func offerRate(b *testing.B, coordinators string) float64 {
	sim := start(b, "slackline-sim", "--coordinator", coordinators, "--agents", "20", "--resources", "cpus:2;mem:1024")
	defer sim.stop()
	c := runCounter(b, coordinators)
	eventually(b, 20*time.Second, func() string {
		if _, ok := c.firstAfter(time.Time{}); !ok {
			return "no offer yet"
		}
		return ""
	})
	time.Sleep(time.Second)
	from := time.Now()
	time.Sleep(5 * time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, at := range c.offers {
		if at.After(from) {
			n++
		}
	}
	return float64(n) / time.Since(from).Seconds()
}

// failoverTimes kills the leader of a group trials times, each time
// measuring until a framework following the group receives an offer, and
// restarts the killed member before the next trial.
func failoverTimes(b *testing.B, etcd *etcdtest.Cluster, trials int) []time.Duration {
	g := &group{t: b, etcd: etcd, prefix: "/bench-failover/"}
	for range 3 {
		g.add(etcd.Endpoints())
	}
	g.waitLeader(30 * time.Second)
	start(b, "slackline-sim", "--coordinator", g.list(), "--agents", "5", "--resources", "cpus:2;mem:1024")
	c := runCounter(b, g.list())
	var out []time.Duration
	for range trials {
		leader := g.waitLeader(30 * time.Second)
		eventually(b, 20*time.Second, func() string {
			if _, ok := c.firstAfter(time.Now().Add(-500 * time.Millisecond)); !ok {
				return "offers have not resumed"
			}
			return ""
		})
		killed := time.Now()
		leader.proc.kill()
		var first time.Time
		eventually(b, 30*time.Second, func() string {
			var ok bool
			if first, ok = c.firstAfter(killed); !ok {
				return "no offer since the leader was killed"
			}
			return ""
		})
		out = append(out, first.Sub(killed))
		g.restart(leader)
	}
	slices.Sort(out)
	return out
}
