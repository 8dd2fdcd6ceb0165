package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/internal/logging"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "slackline-sim: %v\n", err)
		stop()
		os.Exit(1)
	}
}

type options struct {
	coordinator          string
	agents               int
	resources            string
	revocable            string
	hostnamePrefix       string
	attributes           string
	workDir              string
	logLevel             string
	logFormat            logging.Format
	agentsPerTransport   int
	restartAfterShutdown time.Duration
	statusInterval       time.Duration
	ca, cert, key        string
	listen, authz        string
	insecure             bool
}

func newCommand() *cobra.Command {
	var o options
	var config *string
	cmd := &cobra.Command{
		Use:           "slackline-sim",
		Short:         "Run simulated Slackline agents against a coordinator",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       cliconfig.Version("slackline-sim"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliconfig.ApplyPFlagsEnv(cmd.Flags()); err != nil {
				return err
			}
			if err := cliconfig.ApplyPFlagsFile(cmd.Flags(), *config); err != nil {
				return err
			}
			return run(cmd.Context(), o)
		},
	}
	cmd.SetVersionTemplate("{{.Version}}\n")
	f := cmd.Flags()
	config = cliconfig.AddPFlags(f)
	f.StringVar(&o.coordinator, "coordinator", sim.DefaultCoordinator, "coordinator base URL, or a comma-separated list of a coordinator group's URLs (agents follow the leader)")
	f.IntVar(&o.agents, "agents", 1, "number of simulated agents")
	f.StringVar(&o.resources, "resources", "cpus:8;mem:16384;disk:65536;ports:[31000-32000]", "each agent's total resources")
	f.StringVar(&o.revocable, "revocable", "", `revocable estimate each agent reports after registering (e.g. "cpus:2;mem:1024"); empty reports none`)
	f.StringVar(&o.hostnamePrefix, "hostname-prefix", sim.DefaultHostnamePrefix, "agent i registers as <prefix><i>, i from 0")
	f.StringVar(&o.attributes, "attributes", "", `attributes of every agent, "k=v,k2=v2"`)
	f.StringVar(&o.workDir, "work-dir", "", "directory where agent ids are kept so that a restarted sim re-registers with the same ids")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.Var(&o.logFormat, "log-format", logging.FormatUsage)
	f.IntVar(&o.agentsPerTransport, "agents-per-connection", sim.DefaultAgentsPerTransport, "agents sharing one HTTP/2 transport")
	f.DurationVar(&o.restartAfterShutdown, "restart-after-shutdown", 0, "bring an agent shut down by the coordinator back as a new agent after this long (0: it stays stopped)")
	f.DurationVar(&o.statusInterval, "status-interval", 10*time.Second, "how often to log the fleet's status when it changed (0: never)")
	f.StringVar(&o.ca, "ca", "", "CA certificate that signs the coordinator's (https:// coordinators)")
	f.StringVar(&o.cert, "cert", "", "agent certificate the whole fleet presents (one identity; the authorization file must let it register as <prefix>*)")
	f.StringVar(&o.key, "key", "", "key of --cert")
	f.StringVar(&o.listen, "listen", "", `address of the fleet's NodeService over the pretend containers (e.g. "127.0.0.1:5052"; empty: none), served with --cert and --key and reached by the coordinator's node proxy`)
	f.StringVar(&o.authz, "authz", "", "authorization file (authz.yaml) for NodeService callers, as the real agent's")
	insecure, _ := auth.InsecureFromEnv()
	f.BoolVar(&o.insecure, "insecure", insecure, "allow serving the NodeService (--listen) without TLS and --authz (env "+auth.EnvInsecure+"=1)")
	return cmd
}

func run(ctx context.Context, o options) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger, err := logging.New(os.Stderr, o.logFormat.String(), level)
	if err != nil {
		return err
	}
	total, err := resources.Parse(o.resources)
	if err != nil {
		return fmt.Errorf("--resources: %w", err)
	}
	revocable, err := resources.Parse(o.revocable)
	if err != nil {
		return fmt.Errorf("--revocable: %w", err)
	}
	attrs, err := sim.ParseAttributes(o.attributes)
	if err != nil {
		return fmt.Errorf("--attributes: %w", err)
	}
	if _, err := auth.InsecureFromEnv(); err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if o.ca != "" || o.cert != "" || o.key != "" {
		if tlsConfig, err = auth.ClientTLS(o.ca, o.cert, o.key); err != nil {
			return err
		}
	}
	var nodeTLS *tls.Config
	var authz *auth.Authorizer
	endpoint := ""
	if o.listen != "" {
		if err := auth.CheckListen("--listen", o.listen, o.cert != "", o.authz != "", o.insecure); err != nil {
			return err
		}
		endpoint = "http://" + o.listen
		if o.cert != "" {
			if nodeTLS, err = auth.ServerTLS(o.cert, o.key, o.ca); err != nil {
				return fmt.Errorf("--cert: %w", err)
			}
			endpoint = "https://" + o.listen
		}
		if o.authz != "" {
			if authz, err = auth.Load(o.authz); err != nil {
				return fmt.Errorf("--authz: %w", err)
			}
		}
	}
	fleet, err := sim.NewFleet(sim.Config{
		TLS:                  tlsConfig,
		Coordinator:          o.coordinator,
		Resources:            total,
		Revocable:            revocable,
		HostnamePrefix:       o.hostnamePrefix,
		Attributes:           attrs,
		Count:                o.agents,
		WorkDir:              o.workDir,
		Logger:               logger,
		AgentsPerTransport:   o.agentsPerTransport,
		RestartAfterShutdown: o.restartAfterShutdown,
		NodeEndpoint:         endpoint,
	})
	if err != nil {
		return err
	}
	logger.Info("starting simulated agents", "coordinator", o.coordinator, "agents", o.agents, "resources", total.String())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		reportStatus(ctx, logger, fleet, o.agents, o.statusInterval)
	}()
	served := make(chan error, 1)
	if o.listen != "" {
		go func() {
			served <- server.Serve(ctx, server.Config{Listen: o.listen, TLS: nodeTLS, Logger: logger}, fleet.NodeHandler(authz))
			cancel() // a NodeService that cannot listen stops the fleet
		}()
		logger.Info("serving the simulated agents' NodeService", "endpoint", endpoint)
	} else {
		served <- nil
	}
	err = fleet.Run(ctx)
	cancel()
	err = errors.Join(err, <-served)
	<-reported
	logger.Info("simulated agents stopped")
	return err
}

// reportStatus logs how many agents are registered and how many tasks they
// hold, every interval when that changed.
func reportStatus(ctx context.Context, logger *slog.Logger, fleet *sim.Fleet, total int, interval time.Duration) {
	if interval <= 0 {
		return
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	lastRegistered, lastTasks := -1, -1
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		tasks := 0
		for _, a := range fleet.Agents() {
			tasks += len(a.Tasks())
		}
		if registered := fleet.Registered(); registered != lastRegistered || tasks != lastTasks {
			logger.Info("fleet status", "registered", registered, "agents", total, "tasks", tasks)
			lastRegistered, lastTasks = registered, tasks
		}
	}
}
