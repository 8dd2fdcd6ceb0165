// Command slackline-jobs runs the job service (docs/jobs.md): users submit
// batch jobs (YAML or JSON specs) to its JobService with `slacklinectl jobs`,
// and it runs them on the cluster as a framework of the coordinator's,
// through the public API like any framework: queues per role by priority,
// indexed completions, retries with backoff, revocable policies, deadlines
// and cron schedules.
//
// It keeps its jobs and its framework id in --work-dir/jobs.db (bbolt), so
// that a restart, a SIGKILL included, loses nothing and fails over to the
// same framework within --failover-timeout.
//
// Highly available (docs/jobs.md): with --etcd-endpoints the jobs live in
// etcd under --etcd-prefix and the process is one replica of a group that
// elects a leader under a lease (--lease-ttl); the leader runs the
// service, writing only while its lease holds (fenced transactions), and
// the others answer Unavailable naming the leader's --advertise-url.
//
// Secured like the coordinator (docs/security.md): --tls-cert and --tls-key
// serve TLS, --client-ca verifies client certificates, --client-crl refuses
// the revoked ones, --authz names the authorization file (tokens and ACLs:
// submit_jobs, view_jobs, cancel_jobs; re-read on SIGHUP). It refuses to
// serve without TLS and --authz unless --insecure (or SLACKLINE_INSECURE=1).
// --ca and --token-file are its own credentials towards the coordinator.
//
// Every flag is also a key of the YAML file --config names; --version
// prints the version it was built from.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cliconfig"
	"github.com/slackline/slackline/internal/logging"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/jobs"
	"github.com/slackline/slackline/jobs/service"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slackline-jobs:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("slackline-jobs", flag.ContinueOnError)
	coordinator := fs.String("coordinator", cmp.Or(os.Getenv("SLACKLINE_COORDINATOR"), frameworkapi.DefaultCoordinator), "coordinator URL, or a comma-separated list of a coordinator group's URLs (env SLACKLINE_COORDINATOR)")
	listen := fs.String("listen", "127.0.0.1:5060", "address to serve the JobService on")
	workDir := fs.String("work-dir", "/var/lib/slackline/jobs", "directory of the job store (jobs.db)")
	ca := fs.String("ca", os.Getenv(auth.EnvCA), "CA certificate that signs the coordinator's (env "+auth.EnvCA+")")
	tokenFile := fs.String("token-file", os.Getenv(auth.EnvTokenFile), "file holding the service's bearer token towards the coordinator (env "+auth.EnvTokenFile+")")
	tlsCert := fs.String("tls-cert", "", "TLS certificate file (enables TLS with --tls-key)")
	tlsKey := fs.String("tls-key", "", "TLS key file")
	clientCA := fs.String("client-ca", "", "CA whose client certificates authenticate callers, e.g. ca.crt")
	authzFile := fs.String("authz", "", "authorization file (authz.yaml): token principals and ACLs, default deny; re-read on SIGHUP")
	clientCRL := fs.String("client-crl", "", "certificate revocation list signed by --client-ca; re-read on SIGHUP")
	name := fs.String("name", "jobs", "framework name")
	roles := fs.String("roles", "*", "comma-separated roles the service subscribes in: a job's role must be one of them")
	user := fs.String("user", "", "FrameworkInfo.user: the Unix user of tasks whose job names none (empty: the agents' default)")
	failover := fs.Duration("failover-timeout", 7*24*time.Hour, "how long the coordinator keeps the service's tasks while it is away")
	maxJobs := fs.Int("max-jobs", jobs.DefaultMaxJobs, "most jobs kept, finished ones included (a submission beyond is refused)")
	insecureDefault, err := auth.InsecureFromEnv()
	if err != nil {
		return err
	}
	insecure := fs.Bool("insecure", insecureDefault, "allow serving without TLS and --authz (env "+auth.EnvInsecure+"=1): anyone reaching --listen could submit and cancel jobs")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var logFormat logging.Format
	fs.Var(&logFormat, "log-format", logging.FormatUsage)
	group := registerGroupFlags(fs)
	if done, err := cliconfig.Parse(fs, args); done || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger, err := logging.New(os.Stderr, logFormat.String(), level)
	if err != nil {
		return err
	}
	var roleList []string
	for _, r := range strings.Split(*roles, ",") {
		if r = strings.TrimSpace(r); r != "" {
			roleList = append(roleList, r)
		}
	}
	if len(roleList) == 0 {
		return errors.New("--roles names no role")
	}
	tlsConfig, authz, err := auth.LoadServing(auth.ServingFiles{Cert: *tlsCert, Key: *tlsKey, ClientCA: *clientCA,
		Authz: *authzFile, ClientCRL: *clientCRL}, logger)
	if err != nil {
		return err
	}
	if err := auth.CheckListen("--listen", *listen, tlsConfig != nil, authz != nil, *insecure); err != nil {
		return err
	}
	info := &slacklinev1.FrameworkInfo{
		Name:                   *name,
		Roles:                  roleList,
		User:                   *user,
		FailoverTimeoutSeconds: failover.Seconds(),
		Capabilities:           []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES},
	}
	if host, err := os.Hostname(); err == nil {
		info.Hostname = host
	}
	cfg := service.Config{
		Framework: info,
		Client:    frameworkapi.Config{Coordinator: *coordinator, CAFile: *ca, TokenFile: *tokenFile},
		Authz:     authz,
		MaxJobs:   *maxJobs,
		Logger:    logger,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go authz.ReloadOnHangup(ctx, logger)
	srv := server.Config{Listen: *listen, TLS: tlsConfig, Logger: logger}
	if authz != nil {
		srv.Anonymous = &server.AnonymousLimits{}
	}
	var handler http.Handler
	var runService func(context.Context) error
	if group.endpoints == "" {
		if err := os.MkdirAll(*workDir, 0o700); err != nil {
			return fmt.Errorf("--work-dir: %w", err)
		}
		store, err := service.OpenStore(filepath.Join(*workDir, "jobs.db"))
		if err != nil {
			return err
		}
		defer store.Close()
		cfg.Store = store
		svc, err := service.New(cfg)
		if err != nil {
			return err
		}
		handler, runService = svc.Handler(), svc.Run
	} else {
		member, closeEtcd, err := group.member(cfg, *listen, tlsConfig != nil)
		if err != nil {
			return err
		}
		defer closeEtcd()
		handler, runService = member.Handler(), member.Run
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return server.Serve(ctx, srv, handler) })
	g.Go(func() error { return runService(ctx) })
	logger.Info("job service started", "listen", *listen, "coordinator", *coordinator, "roles", roleList, "etcd", group.endpoints)
	return g.Wait()
}
