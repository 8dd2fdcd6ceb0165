// Command slackline-agent runs the Slackline node agent: it registers this
// host's resources with the coordinator, runs tasks in cgroups and serves
// the NodeService. It must run as root (or with a delegated cgroup tree).
//
// Its settings are agent.Options: each is a flag and a key of the YAML
// file --config names (flags on the command line override the file; see
// internal/cliconfig). --version prints the version it was built from.
//
// Its NodeService refuses to start without TLS (--cert, --key) and --authz,
// on loopback too (tasks are local users), unless --insecure (or
// SLACKLINE_INSECURE=1) is given.
//
// "slackline-agent supervise ..." is the per-task supervisor the agent
// starts itself; it is not meant to be run by hand.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/slackline/slackline/agent"
	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		os.Exit(containerizer.SuperviseMain(os.Args[2:]))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slackline-agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("slackline-agent", flag.ContinueOnError)
	var o agent.Options
	o.AddFlags(fs)
	if err := insecureFromEnv(fs); err != nil {
		return err
	}
	if done, err := cliconfig.Parse(fs, args); done || err != nil {
		return err
	}
	a, err := o.Build()
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx)
}

// insecureFromEnv makes SLACKLINE_INSECURE the default of --insecure.
func insecureFromEnv(fs *flag.FlagSet) error {
	insecure, err := auth.InsecureFromEnv()
	if err != nil {
		return err
	}
	if insecure {
		f := fs.Lookup("insecure")
		f.DefValue = "true"
		return f.Value.Set("true")
	}
	return nil
}
