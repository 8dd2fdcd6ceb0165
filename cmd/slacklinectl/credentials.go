package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slackline/slackline/internal/auth"
)

// newCredentialsCommand is "credentials init DIR": everything a secured
// cluster needs, in one command; and "credentials revoke DIR NAME...".
func newCredentialsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "credentials", Short: "Create the cluster's certificates, tokens and authorization file"}
	var hosts, agents, frameworks, operators []string
	var validity time.Duration
	var agentMaxResources string
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a CA, certificates, tokens and authz.yaml into DIR",
		Long: `Write into DIR (created 0700):
  ca.crt, ca.key                 the cluster's CA
  coordinator.crt/.key           the coordinator's serving certificate for --hosts
  coordinator-client.crt/.key    the coordinator's client identity towards agents
                                 (--agent-client-cert/--agent-client-key): the live view
                                 reads agents' containers and usage with it, never with
                                 the operator's token
  agent-NAME.crt/.key            each agent's certificate (client and server), NAME its hostname
  NAME.token                     a bearer token for each framework and operator
  authz.yaml                     agents register as themselves, each with at most
                                 --agent-max-resources; each framework is its own
                                 principal in role NAME running tasks as nobody; operators
                                 may do everything
  crl.pem                        an empty certificate revocation list (see credentials revoke)
Keys and tokens are 0600. Run it again with more names to add their credentials:
the CA and existing files are kept (grant new principals in authz.yaml yourself).
Run on a directory written by an earlier version, it adds coordinator-client.crt/.key.`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := auth.Generate(args[0], auth.Spec{
				Hosts: hosts, Agents: agents, Frameworks: frameworks, Operators: operators, Validity: validity,
				AgentMaxResources: agentMaxResources,
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
	flags.StringVar(&agentMaxResources, "agent-max-resources", auth.DefaultAgentMaxResources,
		`resources one agent may register with (a resource not named: none), written to authz.yaml's register_agents rule; "`+auth.Unlimited+`" for no cap`)
	flags.DurationVar(&validity, "validity", 365*24*time.Hour, "validity of the certificates (the CA's is ten times as long)")
	cmd.AddCommand(initCmd, newRevokeCommand(g))
	return cmd
}

// newRevokeCommand is "credentials revoke DIR NAME...".
func newRevokeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke DIR NAME...",
		Short: "Revoke agents' (or other clients') certificates: add them to DIR/crl.pem",
		Long: `Add the certificates of the NAMEs to DIR/crl.pem, the certificate revocation list
signed by DIR/ca.key (written by credentials init). NAME is an agent's name (DIR/agent-NAME.crt)
or the path of a certificate file that DIR's CA issued. Earlier entries are kept and the list's
number grows; its next update is a year ahead (Slackline does not enforce it; revoke again within
a year to re-sign it for other TLS stacks).

The coordinator and the agents given the file with --client-crl refuse these certificates once
they re-read it: copy crl.pem where they read it and send them SIGHUP. Connections open with a
revoked certificate are closed then, and every new call with it is refused (unauthenticated).
To give a node a new certificate, remove DIR/agent-NAME.crt and .key and run credentials init
with --agents NAME again. Tokens are revoked in authz.yaml instead.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return fmt.Errorf("%s: want DIR NAME..., got %d argument(s)", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			res, err := auth.Revoke(dir, args[1:], time.Now())
			if err != nil {
				return fmt.Errorf("credentials revoke: %w", err)
			}
			for _, c := range res.Revoked {
				fmt.Fprintf(g.out, "revoked %s (CN %s, serial %X)\n", c.Name, c.CommonName, c.Serial)
			}
			for _, c := range res.Already {
				fmt.Fprintf(g.out, "already revoked %s (CN %s, serial %X)\n", c.Name, c.CommonName, c.Serial)
			}
			fmt.Fprintf(g.out, "wrote %s: CRL number %v, next update %s; send SIGHUP to the servers that read it\n",
				filepath.Join(dir, auth.CRLFile), res.Number, res.NextUpdate.UTC().Format(time.DateOnly))
			return nil
		},
	}
}
