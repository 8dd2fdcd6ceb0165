package leader

import (
	"errors"
	"fmt"
	"net"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/internal/auth"
)

// What the daemons that run as a group on etcd (the coordinator and the
// job service) share of their flags' handling.

// AdvertiseURL returns advertise (--advertise-url: an http:// or https://
// URL, its trailing slash removed) or, when it is empty, the URL of listen
// with the scheme tls says. inGroup refuses a listen address without a
// specific host: the other members could not reach it.
func AdvertiseURL(advertise, listen string, tls, inGroup bool) (string, error) {
	if advertise != "" {
		if !strings.HasPrefix(advertise, "http://") && !strings.HasPrefix(advertise, "https://") {
			return "", fmt.Errorf("--advertise-url %q is not an http:// or https:// URL", advertise)
		}
		return strings.TrimSuffix(advertise, "/"), nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen: %w", err)
	}
	if inGroup && (host == "" || net.ParseIP(host).IsUnspecified()) {
		return "", errors.New("--advertise-url is required when --listen has no specific host")
	}
	if tls {
		return "https://" + listen, nil
	}
	return "http://" + listen, nil
}

// DialEtcd dials the comma-separated etcd endpoints (--etcd-endpoints),
// over TLS with the CA, client certificate and key files where any is
// given (--etcd-ca, --etcd-cert, --etcd-key).
func DialEtcd(endpoints, ca, cert, key string) (*clientv3.Client, error) {
	cfg := store.EtcdConfig{Endpoints: strings.Split(endpoints, ",")}
	if ca != "" || cert != "" || key != "" {
		var err error
		if cfg.TLS, err = auth.ClientTLS(ca, cert, key); err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
	}
	return store.DialEtcd(cfg)
}
