package auth

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slackline/slackline/internal/atomicfile"
)

// CRLValidity is how far ahead the CRLs that Generate and Revoke write put
// their NextUpdate: a year. Slackline does not enforce it (see CRL); other
// TLS stacks given crl.pem may, so re-sign it within a year by revoking
// again (a name already listed keeps its entry).
const CRLValidity = 365 * 24 * time.Hour

// revocationList returns a CRL signed by ca, in PEM: the entries of prev
// (nil: none) followed by one for each of certs that prev does not list,
// revoked at now, and whether prev listed each of certs. Its number follows
// prev's and its NextUpdate is now+CRLValidity.
func (ca *CA) revocationList(prev *x509.RevocationList, certs []*x509.Certificate, now time.Time) ([]byte, []bool, error) {
	var entries []x509.RevocationListEntry
	if prev != nil {
		entries = prev.RevokedCertificateEntries
	}
	entries, already := addRevocations(entries, certs, now)
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: crlNumber(prev), ThisUpdate: now, NextUpdate: now.Add(CRLValidity),
		RevokedCertificateEntries: entries,
	}, ca.Cert, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CRL: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), already, nil
}

// addRevocations returns entries followed by an entry for each of certs
// whose serial number is not listed yet (revoked at now), and whether each
// cert was listed already.
func addRevocations(entries []x509.RevocationListEntry, certs []*x509.Certificate, now time.Time) (
	[]x509.RevocationListEntry, []bool) {
	out := make([]x509.RevocationListEntry, 0, len(entries)+len(certs))
	listed := map[string]bool{}
	for _, e := range entries {
		// Only the fields CreateRevocationList writes; Raw would be ignored.
		out = append(out, x509.RevocationListEntry{SerialNumber: e.SerialNumber, RevocationTime: e.RevocationTime,
			ReasonCode: e.ReasonCode, ExtraExtensions: e.ExtraExtensions})
		listed[e.SerialNumber.String()] = true
	}
	already := make([]bool, len(certs))
	for i, cert := range certs {
		serial := cert.SerialNumber.String()
		if listed[serial] {
			already[i] = true
			continue
		}
		listed[serial] = true
		out = append(out, x509.RevocationListEntry{SerialNumber: cert.SerialNumber, RevocationTime: now})
	}
	return out, already
}

// crlNumber returns the number after prev's (1 for none).
func crlNumber(prev *x509.RevocationList) *big.Int {
	if prev == nil || prev.Number == nil {
		return big.NewInt(1)
	}
	return new(big.Int).Add(prev.Number, big.NewInt(1))
}

// RevokedCert is a certificate that Revoke listed.
type RevokedCert struct {
	// Name is the name given to Revoke.
	Name       string
	CommonName string
	Serial     *big.Int
}

// RevokeResult says what Revoke did.
type RevokeResult struct {
	// Revoked are the certificates newly listed, Already those listed
	// before (their entries are kept as they were).
	Revoked, Already []RevokedCert
	// Number and NextUpdate are the new CRL's.
	Number     *big.Int
	NextUpdate time.Time
}

// Revoke adds the certificates of names to dir's CRL (crl.pem, 0644: it is
// public), written by Generate: dir's CA signs it, its earlier entries are
// kept and its number grows. A name is an agent's (dir/agent-NAME.crt) or
// the path of a certificate file (ending in .crt, or with a '/') that dir's
// CA issued. Servers given the file with --client-crl refuse the
// certificates once they reload it (SIGHUP).
func Revoke(dir string, names []string, now time.Time) (RevokeResult, error) {
	var res RevokeResult
	ca, err := LoadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return res, fmt.Errorf("load the CA of %s: %w", dir, err)
	}
	certs := make([]*x509.Certificate, len(names))
	for i, name := range names {
		if certs[i], err = certificateOf(dir, name); err != nil {
			return res, err
		}
		if err := certs[i].CheckSignatureFrom(ca.Cert); err != nil {
			return res, fmt.Errorf("%s: not issued by the CA in %s: %w", name, dir, err)
		}
	}
	crlFile := filepath.Join(dir, CRLFile)
	prev, err := readCRL(crlFile, ca.Cert)
	if err != nil {
		return res, err
	}
	data, already, err := ca.revocationList(prev, certs, now)
	if err != nil {
		return res, err
	}
	for i, cert := range certs {
		rc := RevokedCert{Name: names[i], CommonName: cert.Subject.CommonName, Serial: cert.SerialNumber}
		if already[i] {
			res.Already = append(res.Already, rc)
		} else {
			res.Revoked = append(res.Revoked, rc)
		}
	}
	if err := atomicfile.WriteFile(crlFile, data, 0o644); err != nil {
		return res, err
	}
	res.Number, res.NextUpdate = crlNumber(prev), now.Add(CRLValidity)
	return res, nil
}

// certificateOf reads the certificate that name stands for in dir.
func certificateOf(dir, name string) (*x509.Certificate, error) {
	file := name
	if !strings.HasSuffix(name, ".crt") && !strings.ContainsRune(name, '/') {
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("%q is neither an agent's name nor a certificate file", name)
		}
		file = filepath.Join(dir, AgentCertFile(name))
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			if _, err := os.Stat(filepath.Join(dir, TokenFile(name))); err == nil {
				return nil, fmt.Errorf("%s has a token, not a certificate: revoke it by deleting its line in %s and sending SIGHUP", name, AuthzFile)
			}
			return nil, fmt.Errorf("unknown name %q: %s has no %s (name an agent, or a certificate file)", name, dir, AgentCertFile(name))
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return cert, nil
}

// readCRL reads the CRL that Generate or Revoke wrote (nil when the file
// does not exist); ca must have signed it.
func readCRL(file string, ca *x509.Certificate) (*x509.RevocationList, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CRL: %w", err)
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "X509 CRL" {
		return nil, fmt.Errorf("%s holds no PEM X509 CRL", file)
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, fmt.Errorf("%s holds more than one PEM block: it is not the one list that credentials revoke writes", file)
	}
	crl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := verifyCRL(crl, []*x509.Certificate{ca}); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return crl, nil
}
