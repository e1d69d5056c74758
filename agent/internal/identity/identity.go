// Package identity is the runner's identity on disk and in memory: its
// Ed25519 key (generated here, never leaving the host), the pinned root, the
// client certificate (swapped live when renewed), and what it knows about
// its enrolment.
//
// State directory layout (DESIGN.md):
//
//	key.pem     PKCS#8 Ed25519 private key, mode 0600
//	cert.pem    client certificate: leaf, then intermediate
//	root.pem    the pinned root
//	agent.json  server URL, runner id and name
package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/runmesh/runmesh/pki"
)

// Files in the state directory.
const (
	KeyFile   = "key.pem"
	CertFile  = "cert.pem"
	RootFile  = "root.pem"
	StateFile = "agent.json"
)

// DefaultStateDir is where the packaged agent keeps its state.
const DefaultStateDir = "/var/lib/runmesh-agent"

// ErrNoKey says the state directory holds no key yet.
var ErrNoKey = errors.New("no key in the state directory yet (`runmesh-agent enrol` creates it)")

// State is what the agent remembers about its enrolment.
type State struct {
	Server   string `json:"server"`
	RunnerID string `json:"runner_id"`
	Name     string `json:"name"`
}

// Dir is a state directory.
type Dir string

func (d Dir) path(name string) string { return filepath.Join(string(d), name) }

// Ensure creates the directory, private to its owner.
func (d Dir) Ensure() error {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}

// LoadKey reads the private key, refusing one that others can read.
func (d Dir) LoadKey() (ed25519.PrivateKey, error) {
	path := d.path(KeyFile)
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoKey
	}
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is mode %v: the key must be readable by its owner only (chmod 600)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := pki.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return priv, nil
}

// LoadOrCreateKey returns the key, generating it on first use.
func (d Dir) LoadOrCreateKey() (ed25519.PrivateKey, bool, error) {
	key, err := d.LoadKey()
	if !errors.Is(err, ErrNoKey) {
		return key, false, err
	}
	if err := d.Ensure(); err != nil {
		return nil, false, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, err
	}
	b, err := pki.EncodePrivateKey(priv)
	if err != nil {
		return nil, false, err
	}
	if err := pki.WriteFileAtomic(d.path(KeyFile), b, 0o600); err != nil {
		return nil, false, fmt.Errorf("write key: %w", err)
	}
	return priv, true, nil
}

// LoadState reads agent.json; os.ErrNotExist when the agent never enrolled.
func (d Dir) LoadState() (State, error) {
	var s State
	b, err := os.ReadFile(d.path(StateFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", d.path(StateFile), err)
	}
	return s, nil
}

// SaveState writes agent.json.
func (d Dir) SaveState(s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(d.path(StateFile), append(b, '\n'), 0o644)
}

// LoadRoot reads the pinned root.
func (d Dir) LoadRoot() (*x509.Certificate, error) {
	b, err := os.ReadFile(d.path(RootFile))
	if err != nil {
		return nil, err
	}
	certs, err := pki.ParseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.path(RootFile), err)
	}
	return certs[0], nil
}

// SaveRoot writes the pinned root.
func (d Dir) SaveRoot(root *x509.Certificate) error {
	return pki.WriteFileAtomic(d.path(RootFile), pki.EncodeCertificates(root), 0o644)
}

// SaveChain writes the client certificate chain.
func (d Dir) SaveChain(chain []*x509.Certificate) error {
	return pki.WriteFileAtomic(d.path(CertFile), pki.EncodeCertificates(chain...), 0o644)
}

// CertPath is cert.pem's path (for `step ca renew`).
func (d Dir) CertPath() string { return d.path(CertFile) }

// KeyPath is key.pem's path.
func (d Dir) KeyPath() string { return d.path(KeyFile) }

// LoadChain reads cert.pem.
func (d Dir) LoadChain() ([]*x509.Certificate, time.Time, error) {
	path := d.path(CertFile)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	chain, err := pki.ParseCertificates(b)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	return chain, fi.ModTime(), nil
}

// Identity is a loaded, enrolled runner: key, pinned root, and the current
// certificate, which may be replaced at any time.
type Identity struct {
	Dir   Dir
	Key   ed25519.PrivateKey
	Root  *x509.Certificate
	State State

	mu      sync.RWMutex // guards cert and certMod
	cert    *tls.Certificate
	certMod time.Time
}

// Load reads an enrolled identity.
func Load(d Dir) (*Identity, error) {
	key, err := d.LoadKey()
	if err != nil {
		return nil, err
	}
	st, err := d.LoadState()
	if err != nil {
		return nil, fmt.Errorf("not enrolled (%w)", err)
	}
	root, err := d.LoadRoot()
	if err != nil {
		return nil, fmt.Errorf("no pinned root: %w", err)
	}
	id := &Identity{Dir: d, Key: key, Root: root, State: st}
	if _, err := id.Reload(); err != nil {
		return nil, err
	}
	return id, nil
}

// Reload re-reads cert.pem when it changed on disk (for example, renewed by
// `step ca renew`), and reports whether it swapped certificates. A file
// whose certificate is not for our key or does not chain to the pinned root
// is refused and the current certificate kept.
func (id *Identity) Reload() (bool, error) {
	chain, mod, err := id.Dir.LoadChain()
	if err != nil {
		return false, fmt.Errorf("certificate: %w", err)
	}
	id.mu.RLock()
	same := id.cert != nil && mod.Equal(id.certMod)
	id.mu.RUnlock()
	if same {
		return false, nil
	}
	if err := id.check(chain); err != nil {
		return false, fmt.Errorf("%s: %w", id.Dir.CertPath(), err)
	}
	id.swap(chain, mod)
	return true, nil
}

// Replace installs a renewed chain: checked, written to disk, then used.
func (id *Identity) Replace(chain []*x509.Certificate) error {
	if err := id.check(chain); err != nil {
		return err
	}
	if err := id.Dir.SaveChain(chain); err != nil {
		return err
	}
	_, mod, err := id.Dir.LoadChain()
	if err != nil {
		return err
	}
	id.swap(chain, mod)
	return nil
}

func (id *Identity) check(chain []*x509.Certificate) error {
	return VerifyChain(chain, id.Key.Public().(ed25519.PublicKey), id.Root, id.State.RunnerID)
}

func (id *Identity) swap(chain []*x509.Certificate, mod time.Time) {
	c := &tls.Certificate{PrivateKey: id.Key, Leaf: chain[0]}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	id.mu.Lock()
	id.cert, id.certMod = c, mod
	id.mu.Unlock()
}

// Leaf is the current certificate.
func (id *Identity) Leaf() *x509.Certificate {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.cert.Leaf
}

// ClientCertificate is tls.Config.GetClientCertificate: every handshake
// uses whatever certificate is current.
func (id *Identity) ClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.cert, nil
}

// Roots is a pool holding the pinned root.
func (id *Identity) Roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(id.Root)
	return p
}

// VerifyChain checks that chain[0] is a client certificate for pub, naming
// runner id, that chains to root.
func VerifyChain(chain []*x509.Certificate, pub ed25519.PublicKey, root *x509.Certificate, runnerID string) error {
	if len(chain) == 0 {
		return errors.New("empty certificate chain")
	}
	leaf := chain[0]
	lp, ok := leaf.PublicKey.(ed25519.PublicKey)
	if !ok || !lp.Equal(pub) {
		return errors.New("the certificate is not for this runner's key")
	}
	if got, ok := pki.RunnerID(leaf); !ok || got != runnerID {
		return fmt.Errorf("the certificate names runner %q, not %q", got, runnerID)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the certificate does not chain to the pinned root: %w", err)
	}
	return nil
}
