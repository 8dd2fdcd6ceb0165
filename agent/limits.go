package agent

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slackline/slackline/agent/containerizer"
)

// The agent's bounds counted in slackline_agent_limit_hits_total{limit}.
const (
	// limitQuietSyncs: a guaranteed container's quiet fsync p99 not learned
	// because the disk I/O controller kept qos's maxQuietSyncs already
	// (qos.QuietSyncsOverLimit).
	limitQuietSyncs = "qos_quiet_syncs"
	// limitOpenFiles: a polled cgroup control file read afresh because
	// cgroups.MaxOpenFiles files were kept open already
	// (containerizer.Containerizer.PolledFileOverflows).
	limitOpenFiles = "open_files"
)

// agentLimits lists the limits of slackline_agent_limit_hits_total, each
// exported at 0 from the start.
var agentLimits = []string{limitQuietSyncs, limitOpenFiles}

// limitHits counts the agent's bounds reached in
// slackline_agent_limit_hits_total{limit} and logs the first hit of each
// once. Its sources are counters that only grow (observe takes their
// totals) but may be replaced by fresh ones at 0 (reset: a profile's new
// QoS controllers). Safe for concurrent use.
type limitHits struct {
	log  *slog.Logger
	hits *prometheus.CounterVec

	mu     sync.Mutex
	seen   map[string]uint64 // limit -> the source's total at the latest observe
	logged map[string]bool
}

func newLimitHits(log *slog.Logger) *limitHits {
	h := &limitHits{
		log: log,
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slackline_agent_limit_hits_total",
			Help: "Times a bound of the agent was reached, by limit: qos_quiet_syncs (a guaranteed container's quiet fsync p99 not learned), open_files (a polled cgroup file read without being kept open).",
		}, []string{"limit"}),
		seen: map[string]uint64{}, logged: map[string]bool{},
	}
	for _, limit := range agentLimits {
		h.hits.WithLabelValues(limit)
	}
	return h
}

// observe counts what limit's source counted since the latest observe
// (total is its running total) and logs limit's first hit once.
func (h *limitHits) observe(limit string, total uint64, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.seen[limit]
	if total <= prev {
		return
	}
	h.seen[limit] = total
	h.hits.WithLabelValues(limit).Add(float64(total - prev))
	if !h.logged[limit] {
		h.logged[limit] = true
		h.log.Warn(msg+" (logged once; slackline_agent_limit_hits_total counts every time)", "limit", limit)
	}
}

// reset tells h that limit's source was replaced by a fresh one, counting
// from 0.
func (h *limitHits) reset(limit string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.seen, limit)
}

// The containerizer Options.Build makes reports its polled files' overflows.
var _ polledFileOverflows = (*containerizer.Containerizer)(nil)
