package coordinator

import "github.com/prometheus/client_golang/prometheus"

// heartbeatCounter is slackline_coordinator_agent_heartbeats_total: the
// heartbeats accepted, by transport, so that an operator sees which agents
// still heartbeat with calls and a benchmark (scripts/bench/scale) divides
// the coordinator's CPU by the heartbeats it served.
type heartbeatCounter struct {
	call   prometheus.Counter // a Heartbeat call
	stream prometheus.Counter // a message on a HeartbeatStream
}

func newHeartbeatCounter(reg *prometheus.Registry) heartbeatCounter {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slackline_coordinator_agent_heartbeats_total",
		Help: "Agent heartbeats accepted, by transport (call: a Heartbeat call; stream: a message on a HeartbeatStream).",
	}, []string{"transport"})
	reg.MustRegister(v)
	return heartbeatCounter{call: v.WithLabelValues("call"), stream: v.WithLabelValues("stream")}
}
