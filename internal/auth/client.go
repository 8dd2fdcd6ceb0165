package auth

import (
	"errors"
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
	// EnvCRL gives --crl its default: the certificate revocation list
	// that servers' certificates (agents') are checked against.
	EnvCRL = "SLACKLINE_CRL"
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
	// CRLFile is a certificate revocation list signed by CAFile (crl.pem):
	// a server whose certificate it lists is refused in the handshake
	// (ErrServerRevoked), before anything is sent.
	CRLFile string
}

// FromEnv fills CAFile, TokenFile and CRLFile, where empty, from
// SLACKLINE_CA, SLACKLINE_TOKEN_FILE and SLACKLINE_CRL.
func (c ClientCredentials) FromEnv() ClientCredentials {
	if c.CAFile == "" {
		c.CAFile = os.Getenv(EnvCA)
	}
	if c.TokenFile == "" {
		c.TokenFile = os.Getenv(EnvTokenFile)
	}
	if c.CRLFile == "" {
		c.CRLFile = os.Getenv(EnvCRL)
	}
	return c
}

// IsZero reports whether c configures nothing.
func (c ClientCredentials) IsZero() bool { return c == ClientCredentials{} }

// HTTPClient returns an HTTP client (HTTP/1.1, h2c for http://, HTTP/2 over
// TLS for https://) that trusts c.CAFile, refuses servers c.CRLFile
// revokes, presents c's certificate and adds c's token to every request
// (only over https: WithToken).
func (c ClientCredentials) HTTPClient() (*http.Client, error) {
	tlsConfig, err := ClientTLS(c.CAFile, c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	tlsConfig.ServerName = c.ServerName
	if c.CRLFile != "" {
		if c.CAFile == "" {
			return nil, errors.New("--crl needs --ca: the revocation list is checked against the CA that signs it")
		}
		crl, err := LoadCRL(c.CRLFile, c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--crl: %w", err)
		}
		crl.VerifyServer(tlsConfig)
	}
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
