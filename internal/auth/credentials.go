package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// File names that Generate writes; scripts and docs rely on them.
const (
	CACertFile          = "ca.crt"
	CAKeyFile           = "ca.key"
	CoordinatorCertFile = "coordinator.crt"
	CoordinatorKeyFile  = "coordinator.key"
	// CoordinatorClientCertFile and CoordinatorClientKeyFile are the
	// coordinator's client identity towards agents (organization
	// CoordinatorOrganization, client-auth usage only), distinct from its
	// serving certificate, which may come from another CA.
	CoordinatorClientCertFile = "coordinator-client.crt"
	CoordinatorClientKeyFile  = "coordinator-client.key"
	AuthzFile                 = "authz.yaml"
	// CRLFile is the certificate revocation list (--client-crl) that
	// Generate writes empty and Revoke extends.
	CRLFile = "crl.pem"
)

// AgentCertFile and AgentKeyFile name an agent's certificate and key.
func AgentCertFile(name string) string { return "agent-" + name + ".crt" }

// AgentKeyFile names an agent's key.
func AgentKeyFile(name string) string { return "agent-" + name + ".key" }

// TokenFile names a framework's or operator's token.
func TokenFile(name string) string { return name + ".token" }

// NewToken returns a new random token: 256 bits, base64url, prefixed so
// that it is recognisable in a leak scan.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "slackline_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// CA issues the cluster's certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA creates a self-signed CA valid from notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name, Organization: []string{"slackline"}},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA written by Generate.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s or %s is not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// CertPEM returns the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA key in PEM (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// CertSpec describes a certificate to issue.
type CertSpec struct {
	CommonName   string
	Organization []string
	// Hosts are the DNS names and IP addresses the certificate is valid for.
	Hosts []string
	// Server and Client select the extended key usages.
	Server, Client      bool
	NotBefore, NotAfter time.Time
}

// Issue creates a key and a certificate for spec signed by ca, both in PEM.
func (ca *CA) Issue(spec CertSpec) (certPEM, keyPEMBytes []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		NotBefore: spec.NotBefore, NotAfter: spec.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	for _, h := range spec.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate for %s: %w", spec.CommonName, err)
	}
	k, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), k, nil
}

func keyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// Spec is what Generate writes credentials for.
type Spec struct {
	// Hosts are the coordinator's DNS names and IP addresses.
	Hosts []string
	// Agents, Frameworks and Operators are names: agents' hostnames,
	// frameworks' principals (and roles), operators' principals.
	Agents, Frameworks, Operators []string
	// Validity of the issued certificates (default one year; the CA gets ten
	// times as long).
	Validity time.Duration
	// AgentMaxResources is the register_agents max_resources authz.yaml
	// gets: a resources text, or Unlimited (default
	// DefaultAgentMaxResources).
	AgentMaxResources string
	// Now is the start of validity (default time.Now()).
	Now time.Time
}

// DefaultAgentMaxResources is the resource cap Generate writes for agents
// when Spec.AgentMaxResources is empty: a large machine (256 cpus, 2 TiB of
// memory, 64 TiB of disk, 100 Gbit/s, any port), so that one stolen agent
// certificate cannot claim a cluster's worth of resources. Tighten it to the
// cluster's largest node in authz.yaml.
const DefaultAgentMaxResources = "cpus:256;mem:2097152;disk:67108864;bandwidth:100000;ports:[1-65535]"

// nameRE is what agent, framework and operator names may be: they become
// file names, principals and roles.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Result lists what Generate did, by file name.
type Result struct {
	Written, Kept []string
}

// Generate writes credentials into dir (created 0700 if missing): ca.crt and
// ca.key, coordinator.crt/.key for spec.Hosts, coordinator-client.crt/.key
// (the coordinator's client identity towards agents, "coordinator:<first
// host>"), agent-NAME.crt/.key (client
// and server certificates: the agent also serves its NodeService with it),
// NAME.token for each framework and operator, authz.yaml, and crl.pem (an
// empty certificate revocation list, see Revoke). Keys and tokens are 0600. An existing CA is reused, so that running it again with
// more names adds their credentials; existing files are kept, authz.yaml
// included (Result.Kept lists them: grant new principals there yourself).
// Run on a directory of an earlier version, it adds what that lacked
// (coordinator-client.crt and .key) and keeps the rest.
func Generate(dir string, spec Spec) (Result, error) {
	var res Result
	if spec.Validity <= 0 {
		spec.Validity = 365 * 24 * time.Hour
	}
	if spec.Now.IsZero() {
		spec.Now = time.Now()
	}
	if len(spec.Hosts) == 0 {
		return res, errors.New("--hosts: name at least one host the coordinator is reached at")
	}
	seen := map[string]string{}
	for _, group := range []struct {
		flag  string
		names []string
	}{{"--agents", spec.Agents}, {"--frameworks", spec.Frameworks}, {"--operators", spec.Operators}} {
		for _, n := range group.names {
			if !nameRE.MatchString(n) {
				return res, fmt.Errorf("%s: %q is not a valid name (letters, digits, '.', '_', '-', up to 63)", group.flag, n)
			}
			if group.flag == "--agents" {
				continue
			}
			if other, dup := seen[n]; dup {
				return res, fmt.Errorf("%s: %q is also named by %s", group.flag, n, other)
			}
			seen[n] = group.flag
		}
	}
	if spec.AgentMaxResources == "" {
		spec.AgentMaxResources = DefaultAgentMaxResources
	}
	if _, err := parseMaxResources(&yaml.Node{Kind: yaml.ScalarNode, Value: spec.AgentMaxResources}); err != nil {
		return res, fmt.Errorf("--agent-max-resources: %w", err)
	}
	for _, h := range spec.Hosts {
		if h == "" || strings.ContainsAny(h, " /") {
			return res, fmt.Errorf("--hosts: %q is not a host name or IP address", h)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	// write creates a file unless it exists.
	write := func(name string, data []byte, mode fs.FileMode) error {
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) {
			res.Kept = append(res.Kept, name)
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		res.Written = append(res.Written, name)
		return nil
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}

	notAfter := spec.Now.Add(spec.Validity)
	var ca *CA
	var err error
	if exists(CACertFile) && exists(CAKeyFile) {
		if ca, err = LoadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)); err != nil {
			return res, fmt.Errorf("reuse the CA in %s: %w", dir, err)
		}
		res.Kept = append(res.Kept, CACertFile, CAKeyFile)
	} else {
		if ca, err = NewCA("slackline CA", spec.Now.Add(-time.Hour), spec.Now.Add(10*spec.Validity)); err != nil {
			return res, err
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return res, err
		}
		if err := write(CAKeyFile, key, 0o600); err != nil {
			return res, err
		}
		if err := write(CACertFile, ca.CertPEM(), 0o644); err != nil {
			return res, err
		}
	}
	// issue writes a certificate and its key unless the certificate exists.
	issue := func(certName, keyName string, cs CertSpec) error {
		if exists(certName) {
			res.Kept = append(res.Kept, certName)
			return nil
		}
		cs.NotBefore, cs.NotAfter = spec.Now.Add(-time.Hour), notAfter
		certPEM, key, err := ca.Issue(cs)
		if err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(dir, keyName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := write(keyName, key, 0o600); err != nil {
			return err
		}
		return write(certName, certPEM, 0o644)
	}
	if err := issue(CoordinatorCertFile, CoordinatorKeyFile,
		CertSpec{CommonName: spec.Hosts[0], Hosts: spec.Hosts, Server: true}); err != nil {
		return res, err
	}
	if err := issue(CoordinatorClientCertFile, CoordinatorClientKeyFile, CertSpec{
		CommonName: spec.Hosts[0], Organization: []string{CoordinatorOrganization}, Client: true,
	}); err != nil {
		return res, err
	}
	for _, name := range spec.Agents {
		if err := issue(AgentCertFile(name), AgentKeyFile(name), CertSpec{
			CommonName: name, Organization: []string{AgentOrganization}, Hosts: []string{name}, Server: true, Client: true,
		}); err != nil {
			return res, err
		}
	}
	hashes := map[string]string{}
	for _, name := range append(append([]string(nil), spec.Frameworks...), spec.Operators...) {
		if exists(TokenFile(name)) {
			token, err := ReadToken(filepath.Join(dir, TokenFile(name)))
			if err != nil {
				return res, err
			}
			hashes[name] = HashToken(token)
			res.Kept = append(res.Kept, TokenFile(name))
			continue
		}
		token, err := NewToken()
		if err != nil {
			return res, err
		}
		if err := write(TokenFile(name), []byte(token+"\n"), 0o600); err != nil {
			return res, err
		}
		hashes[name] = HashToken(token)
	}
	if err := write(AuthzFile, []byte(AuthzYAML(spec.Frameworks, spec.Operators, hashes, spec.AgentMaxResources)), 0o644); err != nil {
		return res, err
	}
	if !exists(CRLFile) {
		crl, _, err := ca.revocationList(nil, nil, spec.Now)
		if err != nil {
			return res, err
		}
		if err := write(CRLFile, crl, 0o644); err != nil {
			return res, err
		}
	} else {
		res.Kept = append(res.Kept, CRLFile)
	}
	return res, nil
}

// AuthzYAML returns the authorization file Generate writes: agents register
// as themselves with at most agentMaxResources (a resources text, or
// Unlimited); each framework is its own principal, registers in the role
// of its name, runs tasks as nobody and submits jobs in that role;
// operators may do everything.
// hashes are the principals' token hashes.
func AuthzYAML(frameworks, operators []string, hashes map[string]string, agentMaxResources string) string {
	var b strings.Builder
	b.WriteString(`# Slackline authorization file (written by slacklinectl credentials init).
# Default deny: an action not granted here is refused with permission_denied.
# The coordinator and the agents re-read it on SIGHUP. Actions, objects and
# keywords are described in docs/security.md.
version: 1

# Principals authenticated by a bearer token: the SHA-256 of NAME.token.
# Delete a principal's line (and send SIGHUP) to revoke its token. Client
# certificates signed by the CA need no entry: their CN is the principal.
principals:
`)
	for _, name := range append(append([]string(nil), frameworks...), operators...) {
		fmt.Fprintf(&b, "  %s: {token_sha256: %s}\n", name, hashes[name])
	}
	if len(frameworks)+len(operators) == 0 {
		b.WriteString("  {}\n")
	}
	b.WriteString(`
acls:
  # Agents register only as a hostname their certificate names, with at
  # most max_resources (a resource not named is capped at zero; unlimited
  # for no cap). One hostname has one agent: a new one retires the old.
  register_agents:
    - principals: agents
      hostnames: self
`)
	fmt.Fprintf(&b, "      %s: %q\n", MaxResourcesKey, agentMaxResources)
	ops := quoteList(operators)
	for _, action := range Actions() {
		if action == RegisterAgents {
			continue
		}
		var rules []string
		for _, fw := range frameworks {
			switch action {
			case RegisterFrameworks:
				rules = append(rules, fmt.Sprintf("    - principals: [%s]\n      roles: [%s]\n", fw, fw))
			case RunTasks:
				rules = append(rules, fmt.Sprintf("    - principals: [%s]\n      users: [nobody]\n", fw))
			case SubmitJobs:
				rules = append(rules, fmt.Sprintf("    - principals: [%s]\n      roles: [%s]\n", fw, fw))
			}
		}
		if len(operators) > 0 {
			r := fmt.Sprintf("    - principals: [%s]\n", ops)
			if key := ObjectKey(action); key != "" {
				r += fmt.Sprintf("      %s: any\n", key)
			}
			rules = append(rules, r)
		}
		if len(rules) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s:\n%s", action, strings.Join(rules, ""))
	}
	return b.String()
}

func quoteList(names []string) string { return strings.Join(names, ", ") }
