// Package ca is runmesh's certificate authority: a root and an intermediate
// kept as files under the server's state directory, and an embedded
// smallstep authority that signs with the intermediate, stores what it
// issues through an AuthDB the server provides, and serves step-ca's own
// endpoints so the step CLI works against it unchanged.
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/runmesh/runmesh/pki"
)

// Files of a CA directory. Private keys are mode 0600.
const (
	RootCertFile         = "root.crt"
	RootKeyFile          = "root.key"
	IntermediateCertFile = "intermediate.crt"
	IntermediateKeyFile  = "intermediate.key"
)

// Keys is a loaded CA: the root and the intermediate that signs.
type Keys struct {
	Root            *x509.Certificate
	Intermediate    *x509.Certificate
	IntermediateKey crypto.Signer
}

// Fingerprint is the root's fingerprint, which runners pin.
func (k *Keys) Fingerprint() string { return pki.RootFingerprint(k.Root) }

// ErrNoCA says the directory holds no CA yet.
var ErrNoCA = errors.New("no CA in this directory (run `runmesh-server ca init`)")

// Init creates a root and an intermediate in dir, unless one is there
// already, in which case it is loaded and created is false.
func Init(dir, name string) (keys *Keys, created bool, err error) {
	keys, err = Load(dir)
	if err == nil {
		return keys, false, nil
	}
	if !errors.Is(err, ErrNoCA) {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("CA directory: %w", err)
	}
	now := time.Now().Add(-time.Minute)
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	root, err := sign(&x509.Certificate{
		Subject:               pkix.Name{CommonName: name + " root CA"},
		NotBefore:             now,
		NotAfter:              now.Add(20 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
	}, nil, rootKey.Public(), rootKey)
	if err != nil {
		return nil, false, err
	}
	intKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	intermediate, err := sign(&x509.Certificate{
		Subject:               pkix.Name{CommonName: name + " intermediate CA"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}, root, intKey.Public(), rootKey)
	if err != nil {
		return nil, false, err
	}
	// Keys first: a crash between the writes leaves no certificate without
	// its key, and Load reports the half-made directory.
	for _, f := range []struct {
		name string
		key  any
	}{{RootKeyFile, rootKey}, {IntermediateKeyFile, intKey}} {
		b, err := pki.EncodePrivateKey(f.key)
		if err != nil {
			return nil, false, err
		}
		if err := pki.WriteFileAtomic(filepath.Join(dir, f.name), b, 0o600); err != nil {
			return nil, false, err
		}
	}
	if err := pki.WriteFileAtomic(filepath.Join(dir, IntermediateCertFile), pki.EncodeCertificates(intermediate), 0o644); err != nil {
		return nil, false, err
	}
	if err := pki.WriteFileAtomic(filepath.Join(dir, RootCertFile), pki.EncodeCertificates(root), 0o644); err != nil {
		return nil, false, err
	}
	return &Keys{Root: root, Intermediate: intermediate, IntermediateKey: intKey}, true, nil
}

// Load reads the CA in dir. The root key is not loaded: only the
// intermediate signs.
func Load(dir string) (*Keys, error) {
	rootPEM, err := os.ReadFile(filepath.Join(dir, RootCertFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, kerr := os.Stat(filepath.Join(dir, RootKeyFile)); kerr == nil {
			return nil, fmt.Errorf("CA directory %s holds keys but no %s: an interrupted `ca init`? move it aside and run it again", dir, RootCertFile)
		}
		return nil, ErrNoCA
	}
	if err != nil {
		return nil, err
	}
	roots, err := pki.ParseCertificates(rootPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RootCertFile, err)
	}
	intPEM, err := os.ReadFile(filepath.Join(dir, IntermediateCertFile))
	if err != nil {
		return nil, err
	}
	ints, err := pki.ParseCertificates(intPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", IntermediateCertFile, err)
	}
	keyPath := filepath.Join(dir, IntermediateKeyFile)
	if err := checkPrivate(keyPath); err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", IntermediateKeyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", IntermediateKeyFile)
	}
	if err := ints[0].CheckSignatureFrom(roots[0]); err != nil {
		return nil, fmt.Errorf("the intermediate is not signed by the root: %w", err)
	}
	return &Keys{Root: roots[0], Intermediate: ints[0], IntermediateKey: signer}, nil
}

// checkPrivate refuses a key file others can read: it would mean the key
// has been exposed, and carrying on would hide that.
func checkPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is mode %v: a private key must be readable by its owner only (chmod 600)", path, fi.Mode().Perm())
	}
	return nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
