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
// Against a secured coordinator (https://), --ca names the CA and --cert and
// --key one agent certificate that the whole fleet presents: one identity
// for N hostnames. The coordinator's authorization file must let that
// identity register as them, for example for a certificate agent-sim.crt
// (CN sim) and --hostname-prefix sim-:
//
//	register_agents:
//	  - principals: [agent:sim]
//	    hostnames: ["sim-*"]
//
// With --listen the fleet also serves the real agent's NodeService over its
// pretend containers (cgroup_mode "simulated"; stdout says no process ran),
// with --cert and --key and, as the real agent, --authz: the coordinator's
// node proxy reaches it, so slacklinectl top, logs, get containers and get
// features work against simulated agents. Each call is for the agent whose
// hostname the client asked for in TLS (the proxy sends it); a fleet of one
// answers every call.
//
// Every flag is also a key of the YAML file --config names (flags on the
// command line override the file; see internal/cliconfig); --version prints
// the version it was built from.
//
// It exits on SIGINT or SIGTERM, or when the coordinator has shut down every
// agent.
package main
