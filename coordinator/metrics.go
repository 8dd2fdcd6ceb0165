package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/coordinator/core"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// metrics are the coordinator's Prometheus metrics.
type metrics struct {
	allocationSeconds *prometheus.HistogramVec
	offersSent        prometheus.Counter
	offersDeclined    prometheus.Counter
	offersAccepted    prometheus.Counter
	offersRescinded   prometheus.Counter

	inverseOffersSent     prometheus.Counter
	inverseOffersAccepted prometheus.Counter
	inverseOffersDeclined prometheus.Counter

	revocableRescinded prometheus.Counter

	// rpc counts and times every RPC the coordinator serves.
	rpc *server.RPCMetrics
}

func newMetrics(c *Coordinator, reg *prometheus.Registry) *metrics {
	m := &metrics{
		allocationSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slackline_coordinator_allocation_pass_duration_seconds",
			Help:    "Duration of allocation passes, by kind (full: all agents; event: the agents that changed).",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}, []string{"kind"}),
		offersSent:      prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_offers_sent_total", Help: "Offers sent to frameworks."}),
		offersDeclined:  prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_offers_declined_total", Help: "Offers declined by frameworks."}),
		offersAccepted:  prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_offers_accepted_total", Help: "Offers named in Accept calls."}),
		offersRescinded: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_offers_rescinded_total", Help: "Offers rescinded by the coordinator."}),
	}
	m.inverseOffersSent = prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_inverse_offers_sent_total", Help: "Inverse offers sent to frameworks."})
	m.inverseOffersAccepted = prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_inverse_offers_accepted_total", Help: "Inverse offers accepted by frameworks."})
	m.inverseOffersDeclined = prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_inverse_offers_declined_total", Help: "Inverse offers declined by frameworks."})
	m.revocableRescinded = prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_coordinator_revocable_offers_rescinded_total",
		Help: "Revocable offers rescinded because their agent's estimate shrank below what revocable tasks and offers hold."})
	reg.MustRegister(m.revocableRescinded)
	reg.MustRegister(m.allocationSeconds, m.offersSent, m.offersDeclined, m.offersAccepted, m.offersRescinded,
		m.inverseOffersSent, m.inverseOffersAccepted, m.inverseOffersDeclined, stateCollector{c})
	m.rpc = server.NewRPCMetrics(reg)
	return m
}

var (
	agentsDesc     = prometheus.NewDesc("slackline_coordinator_agents", "Agents by state.", []string{"state"}, nil)
	frameworksDesc = prometheus.NewDesc("slackline_coordinator_frameworks", "Frameworks by state.", []string{"state"}, nil)
	tasksDesc      = prometheus.NewDesc("slackline_coordinator_tasks", "Live tasks by state.", []string{"state"}, nil)
	offersDesc     = prometheus.NewDesc("slackline_coordinator_outstanding_offers", "Offers not yet answered.", nil, nil)
	inverseDesc    = prometheus.NewDesc("slackline_coordinator_outstanding_inverse_offers", "Inverse offers not yet answered.", nil, nil)
	revocableDesc  = prometheus.NewDesc("slackline_coordinator_revocable_resources",
		"Revocable resources over all agents: estimate (what agents report), allocated (held by tasks and offers), offered (outstanding offers).",
		[]string{"resource", "kind"}, nil)
	machinesDesc = prometheus.NewDesc("slackline_coordinator_machines", "Machines by maintenance mode: draining and down count scheduled machines, up the agents (not gone) on no scheduled machine.", []string{"mode"}, nil)
)

// stateCollector reports gauges computed from the coordinator's state at
// scrape time, so the hot paths keep no counters for them.
type stateCollector struct{ c *Coordinator }

func (s stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- agentsDesc
	ch <- frameworksDesc
	ch <- tasksDesc
	ch <- offersDesc
	ch <- inverseDesc
	ch <- machinesDesc
	ch <- revocableDesc
}

func (s stateCollector) Collect(ch chan<- prometheus.Metric) {
	c := s.c
	c.mu.Lock()
	agents := map[slacklinev1.AgentState]int{}
	modes := map[slacklinev1.MachineMode]int{}
	var estimate, allocated, offered resources.Resources
	for _, a := range c.agents {
		agents[a.State]++
		if !a.Maint.Scheduled() && a.State != slacklinev1.AgentState_AGENT_STATE_GONE {
			modes[slacklinev1.MachineMode_MACHINE_MODE_UP]++
		}
		_, held := c.core.Allocator().AgentRevocable(a.ID)
		estimate, allocated = estimate.Add(c.core.AgentRevocable(a.ID)), allocated.Add(held)
	}
	for _, m := range c.core.Maintenance().Machines() {
		modes[c.core.Maintenance().Mode(m)]++
	}
	frameworks := map[slacklinev1.FrameworkState]int{}
	tasks := map[slacklinev1.TaskState]int{}
	for _, fw := range c.frameworks {
		frameworks[fw.state]++
		for t := range c.core.FrameworkTasks(fw.id()) {
			tasks[t.State]++
		}
	}
	c.core.EachOffer(func(o *core.Offer) {
		if o.Revocable {
			offered = offered.Add(o.Resources)
		}
	})
	offers, inverse := c.core.Offers()
	c.mu.Unlock()
	for _, mode := range []slacklinev1.MachineMode{slacklinev1.MachineMode_MACHINE_MODE_UP, slacklinev1.MachineMode_MACHINE_MODE_DRAINING, slacklinev1.MachineMode_MACHINE_MODE_DOWN} {
		ch <- prometheus.MustNewConstMetric(machinesDesc, prometheus.GaugeValue, float64(modes[mode]), enumLabel(mode.String(), "MACHINE_MODE_"))
	}
	ch <- prometheus.MustNewConstMetric(inverseDesc, prometheus.GaugeValue, float64(inverse))
	for _, st := range []slacklinev1.AgentState{slacklinev1.AgentState_AGENT_STATE_ACTIVE, slacklinev1.AgentState_AGENT_STATE_RECOVERING,
		slacklinev1.AgentState_AGENT_STATE_UNREACHABLE, slacklinev1.AgentState_AGENT_STATE_GONE} {
		ch <- prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(agents[st]), enumLabel(st.String(), "AGENT_STATE_"))
	}
	for _, st := range []slacklinev1.FrameworkState{slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED,
		slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED, slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED} {
		ch <- prometheus.MustNewConstMetric(frameworksDesc, prometheus.GaugeValue, float64(frameworks[st]), enumLabel(st.String(), "FRAMEWORK_STATE_"))
	}
	// The states a task starts in are exported at 0 too, so that the
	// dashboard's "Tasks by state" has data before the first task.
	for _, st := range []slacklinev1.TaskState{slacklinev1.TaskState_TASK_STATE_STAGING, slacklinev1.TaskState_TASK_STATE_RUNNING} {
		if _, ok := tasks[st]; !ok {
			tasks[st] = 0
		}
	}
	for st, n := range tasks {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(n), enumLabel(st.String(), "TASK_STATE_"))
	}
	ch <- prometheus.MustNewConstMetric(offersDesc, prometheus.GaugeValue, float64(offers))
	for _, kv := range []struct {
		kind string
		r    resources.Resources
	}{{"estimate", estimate}, {"allocated", allocated}, {"offered", offered}} {
		ch <- prometheus.MustNewConstMetric(revocableDesc, prometheus.GaugeValue, kv.r.CPUs(), resources.NameCPUs, kv.kind)
		ch <- prometheus.MustNewConstMetric(revocableDesc, prometheus.GaugeValue, kv.r.Mem()*(1<<20), "mem_bytes", kv.kind)
		ch <- prometheus.MustNewConstMetric(revocableDesc, prometheus.GaugeValue, kv.r.Bandwidth()*1e6, "bandwidth_bits_per_second", kv.kind)
	}
}

// enumLabel turns "TASK_STATE_RUNNING" into "running".
func enumLabel(name, prefix string) string {
	b := []byte(name)
	if len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix {
		b = b[len(prefix):]
	}
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}
