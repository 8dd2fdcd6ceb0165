package fetcher

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/internal/promset"
)

// metrics are the fetcher's Prometheus metrics.
type metrics struct {
	fetches         *prometheus.CounterVec
	downloadedBytes prometheus.Counter
	cacheHits       prometheus.Counter
	cacheMisses     prometheus.Counter
	cacheEvictions  prometheus.Counter
	cacheRefusals   prometheus.Counter
	cacheBytes      prometheus.Gauge
	cacheEntries    prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slackline_fetcher_artifacts_total",
			Help: "Artifacts fetched into sandboxes, by result (ok, download_failed, checksum_mismatch, too_large, extract_failed).",
		}, []string{"result"}),
		downloadedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slackline_fetcher_downloaded_bytes_total", Help: "Bytes downloaded (cache hits download nothing).",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slackline_fetcher_cache_hits_total", Help: "Cached artifacts served from the cache.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slackline_fetcher_cache_misses_total", Help: "Cached artifacts not in the cache, downloaded.",
		}),
		cacheEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slackline_fetcher_cache_evictions_total", Help: "Cache entries evicted, least recently used first, to stay within the cache's bounds.",
		}),
		cacheRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slackline_fetcher_cache_refusals_total", Help: "Artifacts larger than the whole cache, used uncached.",
		}),
		cacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slackline_fetcher_cache_bytes", Help: "Bytes in the artifact cache.",
		}),
		cacheEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slackline_fetcher_cache_entries", Help: "Artifacts in the cache.",
		}),
	}
}

// collectors are every metric of the fetcher, as one Collector.
func (m *metrics) collectors() promset.Set {
	return promset.Set{m.fetches, m.downloadedBytes, m.cacheHits, m.cacheMisses, m.cacheEvictions,
		m.cacheRefusals, m.cacheBytes, m.cacheEntries}
}

// Collector returns the fetcher's metrics (slackline_fetcher_*) for the
// agent's registry.
func (f *Fetcher) Collector() prometheus.Collector { return f.metrics.collectors() }
