// Package deploy holds Slackline's operator artifacts and the Go that keeps
// them honest:
//
//	deploy/kubernetes/   kustomization: namespace, service accounts, the
//	                     coordinator (StatefulSet, Services, a Secret from
//	                     `slacklinectl credentials init`) and the agent
//	                     DaemonSet
//	deploy/kubernetes-ha/ overlay: three coordinators on etcd electing a
//	                     leader, spread over nodes, a disruption budget
//	deploy/prometheus/   recording and alerting rules (promtool checks them,
//	                     tests/ holds promtool unit tests)
//	deploy/grafana/      the dashboard (cluster, node and container rows)
//	deploy/healthcheck/  the probe command the manifests run
//
// The files are embedded (Files). AgentPrivileges is the single list of what
// the agent's DaemonSet grants and why; the package's tests decode every
// manifest strictly with the Kubernetes API types and compare the DaemonSet
// with that list and with the agent's eBPF feature probes. DashboardQueries,
// RuleQueries and MetricNames parse every PromQL expression with the
// Prometheus parser; the end-to-end tests (e2e/) check the names against a
// running coordinator's and agent's /metrics.
//
// Nothing here runs in the binaries: it is read by tests and documentation.
package deploy
