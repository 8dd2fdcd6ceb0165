// Command slackline-sim runs N simulated Slackline agents against a
// coordinator. The agents speak the real AgentService protocol but run no
// processes: a task runs until killed, or for the Go duration in its label
// sim.duration (ending FAILED when sim.exit_code is non-zero), and a task
// labelled sim.fail_launch fails at once. Use it for scale tests and to
// develop frameworks without root.
//
// Usage:
//
//	slackline-sim --coordinator http://127.0.0.1:5050 --agents 100 \
//		--resources "cpus:8;mem:16384;disk:65536;ports:[31000-32000]"
//
// It exits on SIGINT or SIGTERM, or when the coordinator has shut down every
// agent.
package main
