package main

import (
	"context"
	"flag"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/coordinator/leader"
	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
)

// groupFlags are the flags of a coordinator that runs as a member of a
// highly available group on etcd (coordinator/leader).
type groupFlags struct {
	endpoints string
	ca        string
	cert      string
	key       string
	prefix    string
	advertise string
	leaseTTL  time.Duration
}

func registerGroupFlags(fs *flag.FlagSet) *groupFlags {
	g := &groupFlags{}
	fs.StringVar(&g.endpoints, "etcd-endpoints", "", "comma-separated etcd client URLs: keep the registry in etcd and run as one of a group of coordinators that elect a leader (default: alone, the registry in --work-dir/registry.db)")
	fs.StringVar(&g.ca, "etcd-ca", "", "CA file to verify etcd's server certificates")
	fs.StringVar(&g.cert, "etcd-cert", "", "client certificate file for etcd (with --etcd-key)")
	fs.StringVar(&g.key, "etcd-key", "", "client key file for etcd")
	fs.StringVar(&g.prefix, "etcd-prefix", store.DefaultEtcdPrefix, "etcd key prefix of this coordinator group (registry and election)")
	fs.StringVar(&g.advertise, "advertise-url", "", "URL clients reach this coordinator at, reported as leader_url (default: http(s)://<--listen>)")
	fs.DurationVar(&g.leaseTTL, "lease-ttl", leader.DefaultTTL, "leader lease TTL (whole seconds): how long the group waits for a leader that stopped answering")
	return g
}

// advertiseURL returns --advertise-url, or the URL of --listen.
func (g *groupFlags) advertiseURL(listen string, tls bool) (string, error) {
	return leader.AdvertiseURL(g.advertise, listen, tls, g.endpoints != "")
}

// serve runs the coordinator until ctx ends: alone on its registry log in its work
// dir, or with --etcd-endpoints as a member of a group.
func (g *groupFlags) serve(ctx context.Context, cfg coordinator.Config, authz *auth.Authorizer, srv server.Config) error {
	var err error
	if cfg.AdvertiseURL, err = g.advertiseURL(srv.Listen, srv.TLS != nil || srv.TLSCertFile != ""); err != nil {
		return err
	}
	var handler http.Handler
	var run func(context.Context) error
	// The server's own limit hits are served with the coordinator's
	// metrics (alone) or the member's (in a group).
	metrics := prometheus.NewRegistry()
	server.RegisterProcess(metrics, "slackline-coordinator")
	srv.LimitHits = server.NewLimitHits(metrics, cfg.Logger)
	if g.endpoints == "" {
		cfg.Metrics = metrics
		c, err := coordinator.New(cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		handler, run = c.Handler(), c.Run
	} else {
		client, err := leader.DialEtcd(g.endpoints, g.ca, g.cert, g.key)
		if err != nil {
			return err
		}
		defer client.Close()
		member, err := leader.NewMember(leader.Config{
			Coordinator: cfg, Authz: authz, Client: client, Prefix: g.prefix, Metrics: metrics,
			AdvertiseURL: cfg.AdvertiseURL, LeaseTTL: g.leaseTTL,
		})
		if err != nil {
			return err
		}
		cfg.Logger.Info("coordinator group member", "etcd", g.endpoints, "prefix", g.prefix, "advertise_url", cfg.AdvertiseURL, "lease_ttl", g.leaseTTL)
		handler, run = member.Handler(), member.Run
	}
	group, ctx := errgroup.WithContext(ctx)
	group.Go(func() error { return run(ctx) })
	group.Go(func() error { return server.Serve(ctx, srv, handler) })
	return group.Wait()
}
