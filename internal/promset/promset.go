// Package promset turns a set of Prometheus collectors into one, for
// packages that keep their metrics in a struct and hand the agent's
// registry a single Collector (agent/fetcher, agent/images).
package promset

import "github.com/prometheus/client_golang/prometheus"

// Set is a prometheus.Collector of its members.
type Set []prometheus.Collector

// Describe implements prometheus.Collector.
func (s Set) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (s Set) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s {
		c.Collect(ch)
	}
}
