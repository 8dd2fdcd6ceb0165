// Command slacklinectl is the operator's command-line client of a Slackline
// coordinator, in the style of kubectl:
//
//	slacklinectl get agents|frameworks|tasks|roles [-o table|json]
//	slacklinectl set weight ROLE WEIGHT
//	slacklinectl set quota ROLE RESOURCES   # "cpus:10;mem:20480"; "" removes the quota
//
// The coordinator is given by --coordinator or the environment variable
// SLACKLINE_COORDINATOR (default http://127.0.0.1:5050). Errors are printed
// as "slacklinectl: <command>: <connect code>: <message>" and the exit status
// is 1.
package main
