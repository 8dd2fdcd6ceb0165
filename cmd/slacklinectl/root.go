package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

const (
	defaultCoordinator = "http://127.0.0.1:5050"
	// coordinatorEnv overrides the default of --coordinator.
	coordinatorEnv = "SLACKLINE_COORDINATOR"
)

// Output formats of -o.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// globals are the flags every command shares.
type globals struct {
	coordinator string
	output      string
	timeout     time.Duration
	out         io.Writer
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
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch g.output {
			case outputTable, outputJSON:
				return nil
			}
			return fmt.Errorf("unknown output format %q: want %s or %s", g.output, outputTable, outputJSON)
		},
	}
	root.SetOut(out)
	root.SetErr(out)
	coordinator := defaultCoordinator
	if env := os.Getenv(coordinatorEnv); env != "" {
		coordinator = env
	}
	flags := root.PersistentFlags()
	flags.StringVar(&g.coordinator, "coordinator", coordinator, "coordinator base URL (env "+coordinatorEnv+")")
	flags.StringVarP(&g.output, "output", "o", outputTable, "output format: table or json")
	flags.DurationVar(&g.timeout, "timeout", 30*time.Second, "timeout of each call to the coordinator or an agent")

	root.AddCommand(newGetCommand(g), newSetCommand(g), newLogsCommand(g), newMaintenanceCommand(g), newTopCommand(g))
	return root
}

// operator returns a client of the coordinator's OperatorService.
func (g *globals) operator() slacklinev1connect.OperatorServiceClient {
	return slacklinev1connect.NewOperatorServiceClient(&http.Client{Timeout: g.timeout}, g.coordinator)
}

// node returns a client of the NodeService of the agent at url; a bare
// "host:port" means http.
func (g *globals) node(url string) slacklinev1connect.NodeServiceClient {
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	return slacklinev1connect.NewNodeServiceClient(&http.Client{Timeout: g.timeout}, strings.TrimSuffix(url, "/"))
}

// print writes a response: msg as JSON with -o json, else the table.
func (g *globals) print(msg proto.Message, t table) error {
	if g.output == outputJSON {
		return g.printJSON(msg)
	}
	return t.write(g.out)
}

// printJSON writes msg as multi-line protojson.
func (g *globals) printJSON(msg proto.Message) error {
	data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	_, err = fmt.Fprintf(g.out, "%s\n", data)
	return err
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
			return fmt.Errorf("%s: takes no arguments, got %q", path, args)
		}
		return fmt.Errorf("%s: want %s, got %d argument(s)", path, usage, len(args))
	}
}
