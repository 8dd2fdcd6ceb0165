// Command slacklinectl is the operator's command-line client of a Slackline
// coordinator, in the style of kubectl:
//
//	slacklinectl get agents|frameworks|tasks|roles [-o table|json]
//	slacklinectl get containers --agent URL | --hostname HOSTNAME [-o table|json]
//	slacklinectl set weight ROLE WEIGHT
//	slacklinectl set quota ROLE RESOURCES   # "cpus:10;mem:20480"; "" removes the quota
//	slacklinectl logs TASK_ID [--stderr] [--framework ID] [--tail BYTES] [-f] [--raw] [--agent URL]
//	slacklinectl maintenance schedule get [-o table|json]
//	slacklinectl maintenance schedule set -f FILE   # JSON or YAML; - reads stdin
//	slacklinectl maintenance status [-o table|json]
//	slacklinectl maintenance down HOST...           # StartMaintenance (HOST: hostname or IP)
//	slacklinectl maintenance up HOST...             # StopMaintenance
//	slacklinectl credentials init DIR --hosts H1,H2 --agents A1,A2 --frameworks F1 --operators O1
//
// With a secured coordinator, --ca (env SLACKLINE_CA) names the CA that
// signs the coordinator's and agents' certificates and --token-file (env
// SLACKLINE_TOKEN_FILE) the operator's bearer token, sent only over https
// and only to the coordinator; with --crl (env SLACKLINE_CRL) a coordinator
// whose certificate the list revokes is refused before anything is sent.
// The command never calls an agent itself: logs, top, get containers and
// get features go through the coordinator's node proxy, which authorizes
// the caller and calls the agent with the coordinator's own certificate. "credentials init" writes a cluster's CA, certificates,
// tokens and authorization file (see docs/security.md).
//
// The coordinator is given by --coordinator or the environment variable
// SLACKLINE_COORDINATOR (default http://127.0.0.1:5050). "get containers"
// and "logs" talk to an agent's NodeService: the agent registers its URL
// with the coordinator, or --agent gives it directly. Errors are printed
// as "slacklinectl: <command>: <connect code>: <message>" and the exit status
// is 1.
//
// Everything printed that came from elsewhere (names, hostnames, messages,
// errors, a task's output) has its control characters escaped ("\x1b",
// "\u202e"; escape.go), so it cannot steer the terminal; logs keep newlines
// and tabs, and "logs --raw" prints a task's bytes unchanged.
package main
