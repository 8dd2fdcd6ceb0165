package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// AgentOrganization in a client certificate's subject Organization marks an
// agent's certificate.
const AgentOrganization = "slackline:agents"

// AgentPrefix starts the name of every agent principal: "agent:<CN>".
// Token principals and other certificates may not use it.
const AgentPrefix = "agent:"

// CoordinatorOrganization in a client certificate's subject Organization
// marks the coordinator's own client identity: what it presents to agents
// when the live view reads their NodeService (see Rule.Coordinator).
const CoordinatorOrganization = "slackline:coordinators"

// CoordinatorPrefix starts the name of the coordinator's principal:
// "coordinator:<CN>". Token principals and other certificates may not use
// it.
const CoordinatorPrefix = "coordinator:"

// Authentication methods, in Principal.Method.
const (
	MethodToken       = "token"
	MethodCertificate = "certificate"
)

// Principal is an authenticated caller.
type Principal struct {
	// Name is the principal's name: a token's principal from the
	// authorization file, a client certificate's CN, or AgentPrefix+CN for
	// an agent's certificate.
	Name string
	// Method is how the caller authenticated: MethodToken or MethodCertificate.
	Method string
	// cert is the verified client certificate (nil for tokens).
	cert *x509.Certificate
}

// IsAgent reports whether p is an agent (authenticated by an agent
// certificate).
func (p *Principal) IsAgent() bool {
	return p != nil && p.cert != nil && strings.HasPrefix(p.Name, AgentPrefix)
}

// IsCoordinator reports whether p is the coordinator's client identity (a
// certificate of CoordinatorOrganization). It may call only the procedures
// whose Rule.Coordinator is set.
func (p *Principal) IsCoordinator() bool {
	return p != nil && p.cert != nil && strings.HasPrefix(p.Name, CoordinatorPrefix)
}

// Certifies reports whether p is an agent whose certificate names hostname
// (a DNS name, wildcards included, or an IP address), per x509's rules.
func (p *Principal) Certifies(hostname string) bool {
	return p.IsAgent() && hostname != "" && p.cert.VerifyHostname(hostname) == nil
}

// String returns the principal's name, or "anonymous" for nil.
func (p *Principal) String() string {
	if p == nil {
		return "anonymous"
	}
	return p.Name
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller that Middleware authenticated, or nil
// (no credentials, or no authorization configured).
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// Sentinel authentication errors; Middleware answers them with
// connect.CodeUnauthenticated.
var (
	// ErrNoCredentials: the request has neither a bearer token nor a
	// verified client certificate.
	ErrNoCredentials = errors.New("no credentials: present a bearer token (--token-file) or a client certificate signed by the cluster's CA")
	// ErrUnknownToken: the bearer token is not one the authorization file
	// knows (mistyped, or revoked).
	ErrUnknownToken = errors.New("unknown or revoked token")
)

// HashToken returns the hex SHA-256 of a token, as the authorization file
// stores it. Tokens are 256-bit random values (NewToken), so a plain hash
// suffices: there is nothing to guess.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// tokenEntry is a principal's stored token hash.
type tokenEntry struct {
	principal string
	hash      [sha256.Size]byte
}

// authenticate finds the principal of a request: its bearer token if it has
// one, else its verified client certificate unless crl revokes it. It
// returns ErrNoCredentials when it has neither. The certificate is checked
// on every request, not once per connection, so that a reloaded CRL applies
// to connections already open.
func authenticate(r *http.Request, tokens []tokenEntry, crl *CRL) (*Principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return nil, errors.New(`malformed Authorization header: want "Bearer <token>"`)
		}
		return principalOfToken(strings.TrimSpace(token), tokens)
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		if err := crl.Check(r.TLS.PeerCertificates[0]); err != nil {
			return nil, err
		}
		return principalOfCertificate(r.TLS.PeerCertificates[0])
	}
	return nil, ErrNoCredentials
}

// principalOfToken compares the token's hash with every stored hash in
// constant time, without stopping at a match.
func principalOfToken(token string, tokens []tokenEntry) (*Principal, error) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range tokens {
		if subtle.ConstantTimeCompare(sum[:], tokens[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, ErrUnknownToken
	}
	return &Principal{Name: tokens[found].principal, Method: MethodToken}, nil
}

// principalOfCertificate names the holder of a verified client certificate.
func principalOfCertificate(cert *x509.Certificate) (*Principal, error) {
	cn := cert.Subject.CommonName
	if cn == "" {
		return nil, errors.New("client certificate has no common name")
	}
	agent := slices.Contains(cert.Subject.Organization, AgentOrganization)
	coordinator := slices.Contains(cert.Subject.Organization, CoordinatorOrganization)
	switch {
	case agent && coordinator:
		return nil, fmt.Errorf("client certificate %q names both organizations %s and %s: an identity is an agent or the coordinator, not both",
			cn, AgentOrganization, CoordinatorOrganization)
	case agent:
		return &Principal{Name: AgentPrefix + cn, Method: MethodCertificate, cert: cert}, nil
	case coordinator:
		return &Principal{Name: CoordinatorPrefix + cn, Method: MethodCertificate, cert: cert}, nil
	case strings.HasPrefix(cn, AgentPrefix):
		return nil, fmt.Errorf("client certificate CN %q: only agent certificates (organization %s) are agent principals", cn, AgentOrganization)
	case strings.HasPrefix(cn, CoordinatorPrefix):
		return nil, fmt.Errorf("client certificate CN %q: only the coordinator's certificate (organization %s) is a coordinator principal", cn, CoordinatorOrganization)
	}
	return &Principal{Name: cn, Method: MethodCertificate, cert: cert}, nil
}
