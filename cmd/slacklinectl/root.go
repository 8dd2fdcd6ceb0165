package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/internal/leaderclient"
)

const (
	defaultCoordinator = "http://127.0.0.1:5050"
	// coordinatorEnv overrides the default of --coordinator.
	coordinatorEnv = "SLACKLINE_COORDINATOR"
)

// globals are the flags every command shares.
type globals struct {
	coordinator string
	context     string
	output      string
	timeout     time.Duration
	out         io.Writer
	// creds are --ca, --token-file and --crl (env SLACKLINE_CA,
	// SLACKLINE_TOKEN_FILE, SLACKLINE_CRL): the caller's own credentials,
	// sent only to the coordinator. Agents are reached through the
	// coordinator's node proxy (see node), never with them.
	creds auth.ClientCredentials
}

// newRootCommand builds the command tree; commands write their results to
// out and return their errors (nothing calls os.Exit), so tests can run it.
// Each command group lives in its own file and adds itself here.
func newRootCommand(out io.Writer) *cobra.Command {
	g := &globals{out: out}
	root := &cobra.Command{
		Use:           "slacklinectl",
		Short:         "Operate a Slackline cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       cliconfig.Version("slacklinectl"),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := parseOutput(g.output); err != nil {
				return err
			}
			return g.applyContext(cmd)
		},
	}
	root.SetOut(out)
	root.SetErr(out)
	// --coordinator, --ca, --token-file and --crl: a flag, else its
	// environment variable, else the context (applyContext), else the
	// default.
	flags := root.PersistentFlags()
	flags.StringVar(&g.coordinator, "coordinator", "", "coordinator base URL, or a comma-separated list of a coordinator group's URLs (env "+coordinatorEnv+", else the context's; default "+defaultCoordinator+")")
	flags.StringVar(&g.context, "context", "", "context of the contexts file to use (env "+contextEnv+"; default its current context; see slacklinectl config)")
	flags.StringVarP(&g.output, "output", "o", outputTable, outputHelp)
	flags.DurationVar(&g.timeout, "timeout", 30*time.Second, "timeout of each call (agents are reached through the coordinator)")
	flags.StringVar(&g.creds.CAFile, "ca", "", "CA certificate that signs the coordinator's certificate (env "+auth.EnvCA+", else the context's)")
	flags.StringVar(&g.creds.TokenFile, "token-file", "", "file holding this operator's bearer token, sent only to the coordinator and only over https (env "+auth.EnvTokenFile+", else the context's)")
	flags.StringVar(&g.creds.CRLFile, "crl", "", "certificate revocation list signed by --ca (crl.pem): a coordinator whose certificate it lists is refused before anything is sent; the coordinator checks agents' certificates against its own list (env "+auth.EnvCRL+")")

	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newGetCommand(g), newSetCommand(g), newLogsCommand(g), newMaintenanceCommand(g), newTopCommand(g),
		newCredentialsCommand(g), newJobsCommand(g), newVersionCommand(out), newConfigCommand(g),
		newProfilesCommand(g))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return root
}

// newVersionCommand prints the version slacklinectl was built from (as
// --version does).
func newVersionCommand(out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version slacklinectl was built from",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(out, cliconfig.Version("slacklinectl"))
			return err
		},
	}
}

// operator returns a client of the coordinator's OperatorService.
func (g *globals) operator() slacklinev1connect.OperatorServiceClient {
	client, base := g.coordinatorClient()
	return slacklinev1connect.NewOperatorServiceClient(client, base)
}

// coordinatorClient returns the HTTP client and base URL of the
// coordinator. A comma-separated --coordinator is a coordinator group:
// calls go to its leader, waiting up to --timeout for one during an
// election.
func (g *globals) coordinatorClient() (*http.Client, string) {
	client, base, err := leaderclient.New(g.coordinator, g.httpClient(), leaderclient.Options{Wait: g.timeout})
	if err != nil {
		return &http.Client{Transport: failingTransport{fmt.Errorf("--coordinator: %w", err)}}, g.coordinator
	}
	return client, base
}

// httpClient returns a client with g's credentials that verifies the
// server's certificate for the URL's host. Unreadable credentials fail
// every call with their error.
func (g *globals) httpClient() *http.Client {
	client, err := g.creds.HTTPClient()
	if err != nil {
		return &http.Client{Transport: failingTransport{err}}
	}
	client.Timeout = g.timeout
	transport := client.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	client.Transport = schemeHint{transport}
	return client
}

type failingTransport struct{ err error }

func (t failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, t.err }

// node returns a client of the NodeService of agent agentID through the
// coordinator's node proxy (POST /ui/node/{agent}/{service}/{method}): the
// coordinator authorizes the caller (view_agents; for ReadSandboxFile, the
// task's framework principal or access_sandboxes on it) and calls the
// agent with its own client certificate. The caller's token goes to the
// coordinator only, never to an agent, which may be rogue.
func (g *globals) node(agentID string) slacklinev1connect.NodeServiceClient {
	client, base := g.coordinatorClient()
	return slacklinev1connect.NewNodeServiceClient(client, strings.TrimSuffix(base, "/")+nodeProxyPath+url.PathEscape(agentID))
}

// nodeProxyPath is where the coordinator serves its node proxy
// (coordinator/ui), followed by the agent's id.
const nodeProxyPath = "/ui/node/"

// structured reports whether -o asks for the response itself (json, yaml,
// jsonpath) rather than a table or a message.
func (g *globals) structured() bool {
	return g.output != outputTable && g.output != outputWide
}

// exactArgs requires the arguments named in usage, e.g. "ROLE WEIGHT", or
// none when usage is empty.
func exactArgs(usage string) cobra.PositionalArgs {
	want := len(strings.Fields(usage))
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == want {
			return nil
		}
		path := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		if want == 0 {
			return usageErrorf("%s: takes no arguments, got %q", path, args)
		}
		return usageErrorf("%s: want %s, got %d argument(s)", path, usage, len(args))
	}
}
