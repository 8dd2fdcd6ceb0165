package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/slackline/slackline/coordinator/leader"
	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/jobs/service"
)

// groupFlags are the flags of a job service that runs as one replica of a
// highly available group on etcd (service.Member).
type groupFlags struct {
	endpoints string
	ca        string
	cert      string
	key       string
	prefix    string
	advertise string
	leaseTTL  time.Duration
	maxTxnOps int
}

func registerGroupFlags(fs *flag.FlagSet) *groupFlags {
	g := &groupFlags{}
	fs.StringVar(&g.endpoints, "etcd-endpoints", "", "comma-separated etcd client URLs: keep the jobs in etcd and run as one of a group of replicas that elect a leader (default: alone, the jobs in --work-dir/jobs.db)")
	fs.StringVar(&g.ca, "etcd-ca", "", "CA file to verify etcd's server certificates")
	fs.StringVar(&g.cert, "etcd-cert", "", "client certificate file for etcd (with --etcd-key)")
	fs.StringVar(&g.key, "etcd-key", "", "client key file for etcd")
	fs.StringVar(&g.prefix, "etcd-prefix", service.DefaultEtcdPrefix, "etcd key prefix of this job service group (jobs and election); not the coordinators' prefix")
	fs.StringVar(&g.advertise, "advertise-url", "", "URL clients reach this replica at, named by the other replicas as the leader (default: http(s)://<--listen>)")
	fs.DurationVar(&g.leaseTTL, "lease-ttl", leader.DefaultTTL, "leader lease TTL (whole seconds): how long the group waits for a leader that stopped answering")
	fs.IntVar(&g.maxTxnOps, "etcd-max-txn-ops", store.DefaultMaxTxnOps, "most writes in one etcd transaction: etcd's --max-txn-ops")
	return g
}

// advertiseURL returns --advertise-url, or the URL of --listen.
func (g *groupFlags) advertiseURL(listen string, tls bool) (string, error) {
	return leader.AdvertiseURL(g.advertise, listen, tls, true)
}

// member dials etcd and returns the group's replica; closeEtcd closes the
// client once the member stopped.
func (g *groupFlags) member(cfg service.Config, listen string, tls bool) (m *service.Member, closeEtcd func(), err error) {
	advertise, err := g.advertiseURL(listen, tls)
	if err != nil {
		return nil, nil, err
	}
	if g.prefix == "" || !strings.HasSuffix(g.prefix, "/") {
		return nil, nil, fmt.Errorf("--etcd-prefix %q: want a prefix ending in /", g.prefix)
	}
	if g.prefix == store.DefaultEtcdPrefix {
		return nil, nil, fmt.Errorf("--etcd-prefix %q is the coordinators' default prefix: give the job service its own", g.prefix)
	}
	client, err := leader.DialEtcd(g.endpoints, g.ca, g.cert, g.key)
	if err != nil {
		return nil, nil, err
	}
	m, err = service.NewMember(service.MemberConfig{
		Service: cfg, Client: client, Prefix: g.prefix, AdvertiseURL: advertise, LeaseTTL: g.leaseTTL, MaxTxnOps: g.maxTxnOps,
	})
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	cfg.Logger.Info("job service group replica", "etcd", g.endpoints, "prefix", g.prefix, "advertise_url", advertise, "lease_ttl", g.leaseTTL)
	return m, func() { _ = client.Close() }, nil
}
