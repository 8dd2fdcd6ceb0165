package auth

import (
	"fmt"
	"net/http"
	"os"

	"github.com/slackline/slackline/internal/server"
)

// Environment variables that give clients' --ca and --token-file their
// defaults.
const (
	EnvCA        = "SLACKLINE_CA"
	EnvTokenFile = "SLACKLINE_TOKEN_FILE"
)

// ClientCredentials are what a client trusts and presents. The zero value
// is a plain client (system roots for https, no credentials).
type ClientCredentials struct {
	// CAFile is the CA that signs the servers' certificates (ca.crt).
	CAFile string
	// TokenFile holds the bearer token the client authenticates with
	// (NAME.token); it is sent only over https.
	TokenFile string
	// CertFile and KeyFile are a client certificate (agents, or frameworks
	// and operators that prefer certificates to tokens).
	CertFile, KeyFile string
	// ServerName, when set, is the name verified in the server's
	// certificate instead of the URL's host (an agent's NodeService is
	// reached at its address but certified for its hostname).
	ServerName string
}

// FromEnv fills CAFile and TokenFile, where empty, from SLACKLINE_CA and
// SLACKLINE_TOKEN_FILE.
func (c ClientCredentials) FromEnv() ClientCredentials {
	if c.CAFile == "" {
		c.CAFile = os.Getenv(EnvCA)
	}
	if c.TokenFile == "" {
		c.TokenFile = os.Getenv(EnvTokenFile)
	}
	return c
}

// IsZero reports whether c configures nothing.
func (c ClientCredentials) IsZero() bool { return c == ClientCredentials{} }

// HTTPClient returns an HTTP client (HTTP/1.1, h2c for http://, HTTP/2 over
// TLS for https://) that trusts c.CAFile, presents c's certificate and adds
// c's token to every request.
func (c ClientCredentials) HTTPClient() (*http.Client, error) {
	tlsConfig, err := ClientTLS(c.CAFile, c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	tlsConfig.ServerName = c.ServerName
	client := server.NewTLSClient(tlsConfig)
	if c.TokenFile != "" {
		token, err := ReadToken(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		client.Transport = WithToken(client.Transport, token)
	}
	return client, nil
}
