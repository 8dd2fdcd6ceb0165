package auth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// ErrRevoked: the client certificate is listed in the certificate
// revocation list (--client-crl). Middleware answers it with
// connect.CodeUnauthenticated.
var ErrRevoked = errors.New("client certificate revoked")

// ErrServerRevoked: a server's certificate (an agent's serving
// certificate, seen by the coordinator's live view or by slacklinectl) is
// listed in the certificate revocation list; the connection is refused
// before anything is sent.
var ErrServerRevoked = errors.New("server certificate revoked")

// CRL is a certificate revocation list that refuses the client
// certificates it lists, reloadable. Create it with LoadCRL (or
// Authorizer.LoadCRL, which also makes the Authorizer consult it). Its
// methods are safe for concurrent use.
//
// A certificate is revoked when the CRL of its issuer lists its serial
// number; each CRL in the file must be signed by one of the client CAs.
// NextUpdate is not enforced: the list is the operator's own, it only grows,
// and a cluster left alone for a year must not lock its agents out.
type CRL struct {
	file string
	cas  []*x509.Certificate
	list atomic.Pointer[revocations]
	// generation counts successful loads (1 after LoadCRL).
	generation atomic.Uint64
	// conns are the connections whose client certificate verified (Watch).
	conns connRegistry
}

// revocations is the content of a loaded CRL file.
type revocations struct {
	revoked map[revokedKey]struct{}
}

// revokedKey names a certificate: its issuer's raw subject and its serial.
type revokedKey struct{ issuer, serial string }

func keyOf(cert *x509.Certificate) revokedKey {
	return revokedKey{issuer: string(cert.RawIssuer), serial: string(cert.SerialNumber.Bytes())}
}

// LoadCRL reads the CRL file and checks that each list in it is signed by a
// CA of caFile (the client CA).
func LoadCRL(file, caFile string) (*CRL, error) {
	cas, err := readCertificates(caFile)
	if err != nil {
		return nil, err
	}
	c := &CRL{file: file, cas: cas}
	list, err := c.read()
	if err != nil {
		return nil, err
	}
	c.list.Store(list)
	c.generation.Store(1)
	return c, nil
}

// Reload reads the CRL file again and applies it to the requests that
// follow; then it closes the connections (recorded by Watch) whose client
// certificate it revokes, ending their streams, and returns how many. On
// error the current list stays and nothing is closed.
func (c *CRL) Reload() (closed int, err error) {
	list, err := c.read()
	if err != nil {
		return 0, err
	}
	c.list.Store(list)
	c.generation.Add(1)
	return c.conns.closeRevoked(list), nil
}

// Generation counts the lists loaded (LoadCRL, then each successful
// Reload), so that a client holding connections to servers can drop them
// when it changes: a connection is checked against the list only in its
// handshake (VerifyServer). A nil CRL's generation is 0.
func (c *CRL) Generation() uint64 {
	if c == nil {
		return 0
	}
	return c.generation.Load()
}

// Len returns the number of certificates the CRL revokes.
func (c *CRL) Len() int { return len(c.list.Load().revoked) }

// File returns the CRL's file name.
func (c *CRL) File() string { return c.file }

func (c *CRL) read() (*revocations, error) {
	data, err := os.ReadFile(c.file)
	if err != nil {
		return nil, fmt.Errorf("read CRL: %w", err)
	}
	list, err := parseCRLs(data, c.cas)
	if err != nil {
		return nil, fmt.Errorf("CRL %s: %w", c.file, err)
	}
	return list, nil
}

// Check returns nil, or an error wrapping ErrRevoked that names the
// certificate, when the CRL lists cert. A nil CRL revokes nothing.
func (c *CRL) Check(cert *x509.Certificate) error {
	if c == nil || !c.list.Load().revokes(cert) {
		return nil
	}
	return fmt.Errorf("%w: serial %X (CN %q) is in the cluster's certificate revocation list; ask its operator for a new certificate",
		ErrRevoked, cert.SerialNumber, cert.Subject.CommonName)
}

// VerifyServer makes clients using cfg refuse, in the TLS handshake, a
// server whose leaf certificate c revokes (ErrServerRevoked): the
// coordinator's live view and slacklinectl check agents' serving
// certificates this way, so that a revoked agent receives no call. It
// keeps cfg.VerifyConnection, if any, running first. A nil CRL leaves cfg
// as it is.
func (c *CRL) VerifyServer(cfg *tls.Config) {
	if c == nil {
		return
	}
	prev := cfg.VerifyConnection
	cfg.VerifyConnection = func(state tls.ConnectionState) error {
		if prev != nil {
			if err := prev(state); err != nil {
				return err
			}
		}
		if len(state.PeerCertificates) == 0 {
			return nil
		}
		if cert := state.PeerCertificates[0]; c.list.Load().revokes(cert) {
			return fmt.Errorf("%w: serial %X (CN %q) is in the certificate revocation list %s",
				ErrServerRevoked, cert.SerialNumber, cert.Subject.CommonName, c.file)
		}
		return nil
	}
}

func (r *revocations) revokes(cert *x509.Certificate) bool {
	_, ok := r.revoked[keyOf(cert)]
	return ok
}

// parseCRLs reads every "X509 CRL" PEM block of data; each must be signed
// by one of cas. There must be at least one.
func parseCRLs(data []byte, cas []*x509.Certificate) (*revocations, error) {
	list := &revocations{revoked: map[revokedKey]struct{}{}}
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "X509 CRL" {
			return nil, fmt.Errorf("holds a PEM %q block: want only X509 CRL", block.Type)
		}
		crl, err := x509.ParseRevocationList(block.Bytes)
		if err != nil {
			return nil, err
		}
		if err := verifyCRL(crl, cas); err != nil {
			return nil, err
		}
		for _, entry := range crl.RevokedCertificateEntries {
			list.revoked[revokedKey{issuer: string(crl.RawIssuer), serial: string(entry.SerialNumber.Bytes())}] = struct{}{}
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("holds no PEM X509 CRL")
	}
	return list, nil
}

// verifyCRL checks that one of cas issued and signed crl. Every CA of the
// issuer's name is tried: during a CA rotation two may share it.
func verifyCRL(crl *x509.RevocationList, cas []*x509.Certificate) error {
	var sigErr error
	for _, ca := range cas {
		if !bytes.Equal(ca.RawSubject, crl.RawIssuer) {
			continue
		}
		err := crl.CheckSignatureFrom(ca)
		if err == nil {
			return nil
		}
		sigErr = err
	}
	if sigErr != nil {
		return fmt.Errorf("CRL number %v of %q is not signed by the client CA: %w", crl.Number, crl.Issuer, sigErr)
	}
	return fmt.Errorf("CRL number %v is issued by %q, not by the client CA", crl.Number, crl.Issuer)
}

// readCertificates reads every certificate of a PEM file.
func readCertificates(file string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA %s: %w", file, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("CA %s holds no PEM certificate", file)
	}
	return certs, nil
}

// Watch makes servers using cfg record each TCP connection whose client
// certificate verified, so that Reload can close the connections of the
// certificates it revokes: their open streams (an agent's Connect, a
// framework's Subscribe) end at once, and their holders must connect again,
// to be refused. Connections are held weakly and forgotten when the server
// drops them.
//
// It sets cfg.GetConfigForClient, which hands each handshake a copy of cfg
// as it is now; cfg.NextProtos, when empty, becomes HTTP/2 and HTTP/1.1 (what
// net/http would add to the original), since net/http does not see the
// copy.
func (c *CRL) Watch(cfg *tls.Config) {
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	base := cfg.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		conn, ok := hello.Conn.(*net.TCPConn)
		if !ok {
			// Not closable from here; its requests are still refused.
			return nil, nil
		}
		perConn := base.Clone()
		perConn.VerifyConnection = func(state tls.ConnectionState) error {
			if len(state.VerifiedChains) > 0 && len(state.PeerCertificates) > 0 {
				c.conns.add(conn, keyOf(state.PeerCertificates[0]))
			}
			return nil
		}
		return perConn, nil
	}
}

// connRegistry holds connections weakly, by the certificate that
// authenticated them.
type connRegistry struct {
	mu    sync.Mutex
	next  uint64
	conns map[uint64]trackedConn
}

type trackedConn struct {
	key  revokedKey
	conn weak.Pointer[net.TCPConn]
}

func (r *connRegistry) add(conn *net.TCPConn, key revokedKey) {
	r.mu.Lock()
	id := r.next
	r.next++
	if r.conns == nil {
		r.conns = map[uint64]trackedConn{}
	}
	r.conns[id] = trackedConn{key: key, conn: weak.Make(conn)}
	r.mu.Unlock()
	runtime.AddCleanup(conn, r.forget, id)
}

func (r *connRegistry) forget(id uint64) {
	r.mu.Lock()
	delete(r.conns, id)
	r.mu.Unlock()
}

// closeRevoked closes the connections whose certificate list revokes and
// returns how many were still open.
func (r *connRegistry) closeRevoked(list *revocations) int {
	var doomed []*net.TCPConn
	r.mu.Lock()
	for id, t := range r.conns {
		if _, revoked := list.revoked[t.key]; !revoked {
			continue
		}
		delete(r.conns, id)
		if conn := t.conn.Value(); conn != nil {
			doomed = append(doomed, conn)
		}
	}
	r.mu.Unlock()
	closed := 0
	for _, conn := range doomed {
		if conn.Close() == nil {
			closed++
		}
	}
	return closed
}

// CRL returns the revocation list LoadCRL gave a (nil without one), so
// that clients of the same servers' peers check it too (CRL.VerifyServer).
func (a *Authorizer) CRL() *CRL {
	if a == nil {
		return nil
	}
	return a.crl
}

// LoadCRL makes a refuse the client certificates that crlFile revokes
// (connect.CodeUnauthenticated, naming the revocation), checked on every
// request; ReloadOnHangup reloads it with the authorization file. crlFile
// must be signed by the client CA (clientCAFile), and tlsConfig, the
// server's, must verify client certificates: LoadCRL watches it (CRL.Watch)
// so that a reload closes the connections of newly revoked certificates.
// Call it before serving.
func (a *Authorizer) LoadCRL(crlFile, clientCAFile string, tlsConfig *tls.Config) error {
	switch {
	case a == nil:
		return errors.New("a certificate revocation list needs authorization (--authz): without it a client certificate grants nothing to take back")
	case tlsConfig == nil || tlsConfig.ClientCAs == nil || clientCAFile == "":
		return errors.New("a certificate revocation list needs TLS that verifies client certificates with a client CA")
	}
	crl, err := LoadCRL(crlFile, clientCAFile)
	if err != nil {
		return err
	}
	crl.Watch(tlsConfig)
	a.crl = crl
	return nil
}
