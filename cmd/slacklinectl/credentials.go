package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slackline/slackline/internal/auth"
)

// newCredentialsCommand is "credentials init DIR": everything a secured
// cluster needs, in one command.
func newCredentialsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "credentials", Short: "Create the cluster's certificates, tokens and authorization file"}
	var hosts, agents, frameworks, operators []string
	var validity time.Duration
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a CA, certificates, tokens and authz.yaml into DIR",
		Long: `Write into DIR (created 0700):
  ca.crt, ca.key                 the cluster's CA
  coordinator.crt/.key           the coordinator's serving certificate for --hosts
  agent-NAME.crt/.key            each agent's certificate (client and server), NAME its hostname
  NAME.token                     a bearer token for each framework and operator
  authz.yaml                     agents register as themselves; each framework is its own
                                 principal in role NAME running tasks as nobody; operators
                                 may do everything
Keys and tokens are 0600. Run it again with more names to add their credentials:
the CA and existing files are kept (grant new principals in authz.yaml yourself).`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := auth.Generate(args[0], auth.Spec{
				Hosts: hosts, Agents: agents, Frameworks: frameworks, Operators: operators, Validity: validity,
			})
			if err != nil {
				return fmt.Errorf("credentials init: %w", err)
			}
			if len(res.Written) > 0 {
				fmt.Fprintf(g.out, "wrote %s in %s\n", strings.Join(res.Written, " "), args[0])
			}
			if len(res.Kept) > 0 {
				fmt.Fprintf(g.out, "kept %s (already there)\n", strings.Join(res.Kept, " "))
			}
			return nil
		},
	}
	flags := initCmd.Flags()
	flags.StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1"}, "DNS names and IP addresses the coordinator is reached at")
	flags.StringSliceVar(&agents, "agents", nil, "agents' hostnames (one certificate each)")
	flags.StringSliceVar(&frameworks, "frameworks", nil, "frameworks' principals (one token each; role NAME)")
	flags.StringSliceVar(&operators, "operators", nil, "operators' principals (one token each; allowed everything)")
	flags.DurationVar(&validity, "validity", 365*24*time.Hour, "validity of the certificates (the CA's is ten times as long)")
	cmd.AddCommand(initCmd)
	return cmd
}
