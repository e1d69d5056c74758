// Package pki holds what both sides of runmesh need to agree on about
// identity: fingerprints, how a runner is named in its certificate, and
// reading and writing keys and certificates. It imports only the standard
// library, so the agent can use it without linking the CA (see pki/ca).
package pki

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// RootFingerprint is the hex SHA-256 of a certificate's DER: the string
// `step certificate fingerprint root.crt` prints.
func RootFingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// KeyFingerprint is the string `step crypto key fingerprint` prints for an
// Ed25519 public key: "SHA256:" and the standard, padded base64 of the
// SHA-256 of the raw 32-byte key.
func KeyFingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "SHA256:" + base64.StdEncoding.EncodeToString(sum[:])
}

// FingerprintHint is the part of a fingerprint lists show: its last 8
// characters. Approving still needs the whole string.
func FingerprintHint(fp string) string {
	if len(fp) <= 8 {
		return fp
	}
	return fp[len(fp)-8:]
}

const runnerURIPrefix = "urn:runmesh:runner:"

// RunnerURI names a runner in its certificate (a URI SAN). The subject's
// common name carries the same id, for people reading the certificate.
func RunnerURI(id string) *url.URL {
	u, _ := url.Parse(runnerURIPrefix + id)
	return u
}

// RunnerID is the runner a certificate was issued to, if it is a runner
// certificate.
func RunnerID(cert *x509.Certificate) (string, bool) {
	for _, u := range cert.URIs {
		if s := u.String(); strings.HasPrefix(s, runnerURIPrefix) {
			return strings.TrimPrefix(s, runnerURIPrefix), true
		}
	}
	return "", false
}

const replicaURIPrefix = "urn:runmesh:replica:"

// ReplicaURI names a server replica in the client certificate it presents
// to other replicas (a URI SAN): only a replica, which holds the CA, can
// have one issued.
func ReplicaURI(id string) *url.URL {
	u, _ := url.Parse(replicaURIPrefix + id)
	return u
}

// ReplicaID is the replica a certificate was issued to, if it is a
// replica certificate.
func ReplicaID(cert *x509.Certificate) (string, bool) {
	for _, u := range cert.URIs {
		if s := u.String(); strings.HasPrefix(s, replicaURIPrefix) {
			return strings.TrimPrefix(s, replicaURIPrefix), true
		}
	}
	return "", false
}

// EncodeCertificates writes certificates as PEM, in order.
func EncodeCertificates(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// ParseCertificates reads every CERTIFICATE block of a PEM document.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate found in PEM data")
	}
	return out, nil
}

// EncodePrivateKey writes a private key as PKCS#8 PEM, which both Go and
// the step CLI read.
func EncodePrivateKey(key any) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKey reads a PKCS#8 PEM private key.
func ParsePrivateKey(data []byte) (any, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PKCS#8 PRIVATE KEY block found")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	return key, nil
}

// EncodeCSR writes a certificate request as PEM.
func EncodeCSR(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// ParseCSR reads a PEM certificate request and checks its signature.
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("no CERTIFICATE REQUEST block found")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	return csr, nil
}

// WriteFileAtomic replaces path with data, mode perm, so a reader never sees
// half a file (the agent re-reads its certificate while step renews it).
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
