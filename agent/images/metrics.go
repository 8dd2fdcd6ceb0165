package images

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/internal/promset"
)

// metrics are the store's, served on the agent's /metrics.
type metrics struct {
	pulls         *prometheus.CounterVec
	pullErrors    *prometheus.CounterVec
	pullSeconds   prometheus.Histogram
	cacheHits     prometheus.Counter
	shared        prometheus.Counter
	waiting       prometheus.Gauge
	layersPulled  prometheus.Counter
	layersRemoved prometheus.Counter
	imagesRemoved prometheus.Counter
	overBudget    prometheus.Counter
	errorsDropped prometheus.Counter
	storeBytes    prometheus.Gauge
	budget        prometheus.Gauge
	images        prometheus.Gauge
	layers        prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slackline_agent_image_pulls_total",
			Help: "Image pulls by result (success, failure); shared pulls count once."}, []string{"result"}),
		pullErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slackline_agent_image_pull_errors_total",
			Help: "Failed image pulls by kind: timeout, auth, not_found, digest, unreachable, registry, local, other."}, []string{"kind"}),
		pullSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "slackline_agent_image_pull_duration_seconds",
			Help: "Duration of successful image pulls (fetch, verify, unpack).", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_agent_image_cache_hits_total",
			Help: "Task launches whose image was already in the store."}),
		shared: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_agent_image_pulls_shared_total",
			Help: "Task launches that waited for a pull another launch started."}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slackline_agent_image_pulls_waiting",
			Help: "Pulls waiting for one of the --image-pulls slots."}),
		layersPulled: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_agent_image_layers_unpacked_total",
			Help: "Layers fetched, verified and unpacked into the store."}),
		layersRemoved: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_agent_image_layers_removed_total",
			Help: "Layers removed by garbage collection."}),
		imagesRemoved: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_agent_image_images_removed_total",
			Help: "Images removed by garbage collection."}),
		overBudget: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_agent_image_over_budget_total",
			Help: "Collections that left the store above its budget (live tasks' layers alone exceed it)."}),
		errorsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "slackline_agent_image_recent_errors_dropped_total",
			Help: "Pull failures dropped from the recent list GetImages shows (at most 16 kept)."}),
		storeBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slackline_agent_image_store_bytes",
			Help: "Unpacked size of the layers in the store."}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slackline_agent_image_budget_bytes",
			Help: "The store's disk budget (--image-disk-budget)."}),
		images: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slackline_agent_image_images",
			Help: "Images in the store."}),
		layers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slackline_agent_image_layers",
			Help: "Layers in the store."}),
	}
	for _, r := range []string{"success", "failure"} {
		m.pulls.WithLabelValues(r)
	}
	for _, k := range errorKinds {
		m.pullErrors.WithLabelValues(k)
	}
	return m
}

// all are every metric of the store, as one Collector.
func (m *metrics) all() promset.Set {
	return promset.Set{m.pulls, m.pullErrors, m.pullSeconds, m.cacheHits, m.shared, m.waiting,
		m.layersPulled, m.layersRemoved, m.imagesRemoved, m.overBudget, m.errorsDropped, m.storeBytes, m.budget, m.images, m.layers}
}

// Collector returns the store's metrics for the agent's /metrics.
func (s *Store) Collector() prometheus.Collector { return s.metrics.all() }
