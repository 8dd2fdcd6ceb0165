// Command slackline-coordinator runs the Slackline coordinator: the
// SchedulerService for frameworks, the AgentService for agents and the
// OperatorService for operators, with a hierarchical DRF allocator and a
// registry persisted under --work-dir.
//
// Highly available (see docs/ha.md): with --etcd-endpoints the
// registry lives in etcd and the process is one member of a group of
// coordinators that elect a leader under a lease (--lease-ttl); the others
// answer GetState with the leader's --advertise-url and every other call
// Unavailable, naming the leader.
//
// Secured (see docs/security.md): --tls-cert and --tls-key serve TLS,
// --client-ca verifies agents' (and other callers') client certificates,
// --client-crl refuses the revoked ones, --authz names the authorization
// file (token principals and ACLs, default deny; both files re-read on
// SIGHUP). --agent-client-cert and --agent-client-key are the coordinator's
// own client identity towards agents (coordinator-client.crt): the live
// view's node proxy calls agents with it, never with the operator's token.
// The coordinator refuses to start without TLS and --authz, on loopback
// too, unless --insecure (or SLACKLINE_INSECURE=1) is given.
//
// Every flag is also a key of the YAML file --config names (flags on the
// command line override the file; see internal/cliconfig). --version
// prints the version it was built from.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/internal/logging"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slackline-coordinator:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("slackline-coordinator", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:5050", "address to serve on")
	workDir := fs.String("work-dir", "/var/lib/slackline/coordinator", "directory of the registry (registry.db; a registry.log of an earlier version is imported once and kept as registry.log.imported)")
	tlsCert := fs.String("tls-cert", "", "TLS certificate file (enables TLS with --tls-key), e.g. coordinator.crt")
	tlsKey := fs.String("tls-key", "", "TLS key file, e.g. coordinator.key")
	clientCA := fs.String("client-ca", "", "CA whose client certificates authenticate agents (and frameworks or operators that use certificates), e.g. ca.crt")
	authzFile := fs.String("authz", "", "authorization file (authz.yaml): token principals and ACLs, default deny; re-read on SIGHUP")
	clientCRL := fs.String("client-crl", "", "certificate revocation list signed by --client-ca (crl.pem, see slacklinectl credentials revoke): its client certificates are refused; re-read on SIGHUP, closing their connections")
	agentClientCert := fs.String("agent-client-cert", "", "the coordinator's client certificate towards agents (coordinator-client.crt, signed by --client-ca): the live view reads agents' NodeService with it")
	agentClientKey := fs.String("agent-client-key", "", "its key (coordinator-client.key)")
	insecureDefault, err := auth.InsecureFromEnv()
	if err != nil {
		return err
	}
	insecure := fs.Bool("insecure", insecureDefault, "allow listening without TLS and --authz, on loopback too (env "+auth.EnvInsecure+"=1): every local user, tasks included, could then control the cluster")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var logFormat logging.Format
	fs.Var(&logFormat, "log-format", logging.FormatUsage)
	var cfg coordinator.Config
	fs.DurationVar(&cfg.AgentHeartbeatInterval, "agent-heartbeat-interval", 5*time.Second, "interval agents heartbeat at while they fit --max-agent-heartbeat-rate")
	fs.IntVar(&cfg.MaxAgentHeartbeatRate, "max-agent-heartbeat-rate", 1000, "heartbeat budget: beyond this many agents per second of --agent-heartbeat-interval, agents are told to heartbeat every agents/rate seconds (negative: no budget)")
	fs.DurationVar(&cfg.AgentTimeout, "agent-timeout", 30*time.Second, "an agent silent this long becomes unreachable (at --agent-heartbeat-interval; a longer interval stretches it in proportion)")
	fs.DurationVar(&cfg.AgentReregisterTimeout, "agent-reregister-timeout", 2*time.Minute, "after a restart, agents not re-registered by then become unreachable")
	fs.DurationVar(&cfg.FrameworkHeartbeatInterval, "framework-heartbeat-interval", 15*time.Second, "interval of heartbeat events to frameworks")
	fs.DurationVar(&cfg.AllocationInterval, "allocation-interval", time.Second, "period of full allocation passes")
	fs.DurationVar(&cfg.AllocationBatch, "allocation-batch", time.Millisecond, "least time between two event-triggered allocation passes: an event after a quiet spell is allocated at once, events within this of the last pass wait for the next, batched")
	fs.DurationVar(&cfg.OfferTimeout, "offer-timeout", 10*time.Minute, "rescind offers outstanding this long (negative: never)")
	limitFlags(fs, &cfg.Limits)
	var anonymous server.AnonymousLimits
	anonymousFlags(fs, &anonymous)
	idleTimeout := fs.Duration("idle-timeout", server.DefaultIdleTimeout, "close connections with nothing in progress after this long (negative: never)")
	readTimeout := fs.Duration("read-timeout", server.DefaultReadTimeout, "time a client has to send a request's headers and body (negative: none); streams outlive it")
	fs.BoolVar(&cfg.AutoDownAfterAccept, "auto-down-after-accept", false, "take a DRAINING machine DOWN by itself once its window started and every framework with tasks on it accepted its inverse offers (never below a framework's min_available_tasks)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve the Go runtime's profiles (CPU, heap, goroutines, execution traces) at /debug/pprof/ on --listen; callers need debug_processes")
	minAlloc := fs.String("min-allocatable", "cpus:0.01;mem:32", "offer an agent's free resources only if some scalar reaches this")
	group := registerGroupFlags(fs)
	if done, err := cliconfig.Parse(fs, args); done || err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger, err := logging.New(os.Stderr, logFormat.String(), level)
	if err != nil {
		return err
	}
	if cfg.MinAllocatable, err = resources.Parse(*minAlloc); err != nil {
		return fmt.Errorf("--min-allocatable: %w", err)
	}
	cfg.WorkDir = *workDir
	cfg.Logger = logger
	tlsConfig, authz, err := auth.LoadServing(auth.ServingFiles{Cert: *tlsCert, Key: *tlsKey, ClientCA: *clientCA,
		Authz: *authzFile, ClientCRL: *clientCRL}, logger)
	if err != nil {
		return err
	}
	cfg.Authz = authz
	switch {
	case *clientCA != "":
		// The live view's proxy verifies agents with the same CA and
		// presents the coordinator's own certificate.
		if cfg.AgentTLS, err = auth.ClientTLS(*clientCA, *agentClientCert, *agentClientKey); err != nil {
			return fmt.Errorf("--agent-client-cert: %w", err)
		}
	case *agentClientCert != "" || *agentClientKey != "":
		return errors.New("--agent-client-cert needs --client-ca, the CA that signs agents' certificates")
	}
	if err := auth.CheckListen("--listen", *listen, tlsConfig != nil, cfg.Authz != nil, *insecure); err != nil {
		return err
	}
	if cfg.Authz != nil && tlsConfig == nil {
		logger.Warn("authorization without TLS: tokens are refused over clear text by Slackline's clients, and agents cannot present certificates")
	}
	if cfg.Authz != nil && cfg.AgentTLS != nil && len(cfg.AgentTLS.Certificates) == 0 {
		logger.Warn("no client identity for agents: the live view's node view cannot read agents; " +
			"pass --agent-client-cert and --agent-client-key (coordinator-client.crt, which `slacklinectl credentials init` adds to an existing credentials directory)")
	}
	if *insecure && (cfg.Authz == nil || tlsConfig == nil) {
		logger.Warn("running insecure: without TLS and --authz every local user and whoever reaches --listen can control the cluster", "listen", *listen)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go cfg.Authz.ReloadOnHangup(ctx, logger)
	srv := server.Config{Listen: *listen, TLS: tlsConfig, Logger: logger, IdleTimeout: *idleTimeout, ReadTimeout: *readTimeout}
	if cfg.Authz != nil {
		// Requests are authenticated: peers without credentials are
		// bounded (without --authz nobody has any, and nothing tells them
		// apart).
		srv.Anonymous = &anonymous
	}
	return group.serve(ctx, cfg, cfg.Authz, srv)
}
