package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// ServerTLS returns the TLS configuration of a server presenting certFile
// and keyFile. With clientCAFile, client certificates signed by that CA are
// requested and verified (optional: a client may authenticate with a token
// instead); Middleware names their holders.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both a certificate and a key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// ClientTLS returns the TLS configuration of a client that trusts caFile
// (the system's roots when empty) and, with certFile and keyFile, presents
// that client certificate.
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("a client certificate needs both --cert and --key")
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA %s holds no PEM certificate", file)
	}
	return pool, nil
}

// ReadToken reads a token file (surrounding white space is dropped).
func ReadToken(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("token file %s must hold one token", file)
	}
	return token, nil
}

// WithToken returns a RoundTripper that sends token as a bearer token on
// every request through next. It refuses to send it in clear text (an
// http:// URL) so that a token cannot leak to the network by mistake.
func WithToken(next http.RoundTripper, token string) http.RoundTripper {
	return bearer{next: next, header: "Bearer " + token}
}

type bearer struct {
	next   http.RoundTripper
	header string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" {
		return nil, fmt.Errorf("refusing to send a bearer token to %s over clear text: use an https:// URL", r.URL.Host)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}

// EnvInsecure is the environment's --insecure: "1" (or another true value
// of strconv.ParseBool) lets every Slackline server start without TLS and
// authorization, for tests and scripts; --insecure=false still overrides it.
const EnvInsecure = "SLACKLINE_INSECURE"

// InsecureFromEnv returns the default of a server's --insecure flag:
// whether SLACKLINE_INSECURE is set true. A value that is not a boolean is
// an error naming the variable.
func InsecureFromEnv() (bool, error) {
	v := os.Getenv(EnvInsecure)
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 (or true) to run without TLS and authorization, 0 or unset otherwise", EnvInsecure, v)
	}
	return on, nil
}

// CheckListen refuses a listener that lacks TLS or authorization, unless
// insecure says the operator accepts it (--insecure or SLACKLINE_INSECURE=1).
// Loopback addresses are no exception: tasks run as local users, reach
// loopback listeners like any other process on the node, and without
// authorization would read other tasks' output through the agent and act
// as their frameworks through the coordinator.
func CheckListen(flag, addr string, tlsOn, authzOn, insecure bool) error {
	if (tlsOn && authzOn) || insecure {
		return nil
	}
	var missing []string
	if !tlsOn {
		missing = append(missing, "TLS (--tls-cert/--tls-key, or --cert/--key)")
	}
	if !authzOn {
		missing = append(missing, "authorization (--authz)")
	}
	who := "anyone who reaches it could control the cluster"
	if isLoopback(addr) {
		who = "on loopback too, every local user (tasks included) could control the cluster, read other tasks' output and act as their frameworks"
	}
	return fmt.Errorf("refusing to listen on %s (%s) without %s: %s; "+
		"create credentials with `slacklinectl credentials init DIR` and pass them (docs/security.md), "+
		"or pass --insecure (or set %s=1) to accept the risk",
		addr, flag, strings.Join(missing, " and "), who, EnvInsecure)
}
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServingFiles names what secures a daemon's listener: its serving
// certificate and key (--tls-cert, --tls-key), the CA of its callers'
// client certificates (--client-ca), the authorization file (--authz) and
// the revocation list (--client-crl). Empty fields are off.
type ServingFiles struct {
	Cert, Key, ClientCA, Authz, ClientCRL string
}

// LoadServing loads files for a daemon that serves Connect: the TLS
// configuration (nil without --tls-cert and --tls-key) and the authorizer
// (nil without --authz), with the revocation list watched by both. The
// authorization file's warnings go to logger. Whether the listener may run
// with what is off is CheckListen's decision.
func LoadServing(files ServingFiles, logger *slog.Logger) (*tls.Config, *Authorizer, error) {
	var tlsConfig *tls.Config
	var err error
	if files.Cert != "" || files.Key != "" {
		if tlsConfig, err = ServerTLS(files.Cert, files.Key, files.ClientCA); err != nil {
			return nil, nil, err
		}
	} else if files.ClientCA != "" {
		return nil, nil, errors.New("--client-ca needs TLS: set --tls-cert and --tls-key")
	}
	var authz *Authorizer
	if files.Authz != "" {
		if authz, err = Load(files.Authz); err != nil {
			return nil, nil, err
		}
		for _, w := range authz.Warnings() {
			logger.Warn(w)
		}
	}
	if files.ClientCRL != "" {
		if err := authz.LoadCRL(files.ClientCRL, files.ClientCA, tlsConfig); err != nil {
			return nil, nil, fmt.Errorf("--client-crl: %w", err)
		}
	}
	return tlsConfig, authz, nil
}
