package network

import "github.com/prometheus/client_golang/prometheus"

var (
	paceDesc = prometheus.NewDesc("slackline_network_revocable_pace_bytes_per_second",
		"What all revocable egress is paced to on each managed interface (0: unpaced): the revocable bandwidth estimate, or the QoS limit when lower.", nil, nil)
	limitDesc = prometheus.NewDesc("slackline_network_qos_limit_bytes_per_second",
		"The network QoS controller's limit on revocable egress (0: none).", nil, nil)
	linkDesc = prometheus.NewDesc("slackline_network_link_throughput_bytes_per_second",
		"The managed interfaces' throughput over their last sampling interval (100 ms), by direction.", []string{"direction"}, nil)
)

// Collector returns the subsystem's metrics for the agent's /metrics.
func (n *Network) Collector() prometheus.Collector { return collector{n} }

type collector struct{ n *Network }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- paceDesc
	ch <- limitDesc
	ch <- linkDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	const bytesPerMbit = 1e6 / 8
	ch <- prometheus.MustNewConstMetric(paceDesc, prometheus.GaugeValue, c.n.Pace()*bytesPerMbit)
	ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, c.n.QoSLimit()*bytesPerMbit)
	link := c.n.Link()
	ch <- prometheus.MustNewConstMetric(linkDesc, prometheus.GaugeValue, link.Tx*bytesPerMbit, "transmit")
	ch <- prometheus.MustNewConstMetric(linkDesc, prometheus.GaugeValue, link.Rx*bytesPerMbit, "receive")
}
