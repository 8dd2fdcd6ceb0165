// Command slacklinectl is the operator's command-line client of a Slackline
// coordinator, in the style of kubectl:
//
//	slacklinectl get agents|frameworks [NAME...] [-o table|wide|json|yaml|jsonpath=EXPR]
//	slacklinectl get tasks [--framework NAME] [--agent HOST] | roles
//	slacklinectl get containers|features [--agent HOST]   # default: the only agent
//	slacklinectl top [--agent HOST] [-w 1s]                # redraws in place on a terminal
//	slacklinectl set weight ROLE WEIGHT
//	slacklinectl set quota ROLE RESOURCES   # "cpus:10;mem:20480"; "" removes the quota
//	slacklinectl logs TASK [--stderr] [--framework NAME] [--tail BYTES] [-f] [--raw]
//	slacklinectl config set-context NAME --coordinator URL --ca FILE --token-file FILE [--use]
//	slacklinectl config use-context NAME | get-contexts | current-context
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
// The coordinator and credentials come from the flags, else the
// environment (SLACKLINE_COORDINATOR, SLACKLINE_CA, SLACKLINE_TOKEN_FILE,
// SLACKLINE_CRL), else the current context of the contexts file
// (SLACKLINE_CONFIG, default ~/.config/slackline/config.yaml; --context or
// SLACKLINE_CONTEXT picks another), else http://127.0.0.1:5050. Names are
// shown and accepted wherever the API has ids (hostnames for agents, names
// for frameworks and tasks; -o wide adds the ids), and rows are in natural
// order. Errors are printed as "slacklinectl: <command>: <connect code>:
// <message>"; the exit status is 2 for a wrong command line, 3 when
// something named is not found, 4 when the caller is denied, 5 when the
// coordinator or agent is unavailable, and 1 otherwise (exit.go).
//
// Everything printed that came from elsewhere (names, hostnames, messages,
// errors, a task's output) has its control characters escaped ("\x1b",
// "\u202e"; escape.go), so it cannot steer the terminal; logs keep newlines
// and tabs, and "logs --raw" prints a task's bytes unchanged.
package main
