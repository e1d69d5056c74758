package ca_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
)

// A CA directory is loaded only whole and sound: each file there, its key
// readable by its owner only, a signing key, an intermediate the root
// signed. A directory without a CA is ErrNoCA, unless its keys are there
// without their certificate (an interrupted init).
func TestLoadRefusesAnUnsoundCA(t *testing.T) {
	t.Parallel()
	fresh := func() string {
		dir := t.TempDir()
		_, created, err := ca.Init(dir, "test")
		require.NoError(t, err)
		require.True(t, created)
		return dir
	}
	other := fresh()
	x25519, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(t, err)
	notSigning, err := pki.EncodePrivateKey(x25519)
	require.NoError(t, err)
	for _, c := range []struct {
		name  string
		spoil func(dir string)
		want  string // in the error
	}{
		{"no root certificate, its key there", func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, ca.RootCertFile))) },
			"holds keys but no root.crt: an interrupted `ca init`?"},
		{"a root certificate that is not one", func(dir string) { write(t, dir, ca.RootCertFile, "junk", 0o644) }, "root.crt: no certificate found"},
		{"no intermediate certificate", func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, ca.IntermediateCertFile))) },
			"intermediate.crt: no such file"},
		{"an intermediate that is not one", func(dir string) { write(t, dir, ca.IntermediateCertFile, "junk", 0o644) },
			"intermediate.crt: no certificate found"},
		{"no intermediate key", func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, ca.IntermediateKeyFile))) },
			"intermediate.key: no such file"},
		{"a key others can read", func(dir string) { require.NoError(t, os.Chmod(filepath.Join(dir, ca.IntermediateKeyFile), 0o640)) },
			"is mode -rw-r-----: a private key must be readable by its owner only (chmod 600)"},
		{"a key that is not one", func(dir string) { write(t, dir, ca.IntermediateKeyFile, "junk", 0o600) },
			"intermediate.key: no PKCS#8 PRIVATE KEY block found"},
		{"a key that cannot sign", func(dir string) { write(t, dir, ca.IntermediateKeyFile, string(notSigning), 0o600) },
			"intermediate.key: not a signing key"},
		{"another CA's intermediate", func(dir string) {
			b, err := os.ReadFile(filepath.Join(other, ca.IntermediateCertFile))
			require.NoError(t, err)
			write(t, dir, ca.IntermediateCertFile, string(b), 0o644)
		}, "the intermediate is not signed by the root"},
	} {
		dir := fresh()
		c.spoil(dir)
		_, err := ca.Load(dir)
		require.ErrorContains(t, err, c.want, c.name)
		_, _, err = ca.Init(dir, "test")
		require.ErrorContains(t, err, c.want, c.name+": Init does not overwrite it")
	}

	_, err = ca.Load(t.TempDir())
	require.ErrorIs(t, err, ca.ErrNoCA)
	unreadable := fresh()
	require.NoError(t, os.Chmod(filepath.Join(unreadable, ca.RootCertFile), 0))
	if _, err := os.ReadFile(filepath.Join(unreadable, ca.RootCertFile)); err != nil { // not as root
		_, err = ca.Load(unreadable)
		require.ErrorIs(t, err, os.ErrPermission)
	}
}

// Init loads a CA that is there, and makes none under a file.
func TestInitKeepsTheCAThere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	made, created, err := ca.Init(dir, "test")
	require.NoError(t, err)
	require.True(t, created)
	again, created, err := ca.Init(dir, "other")
	require.NoError(t, err)
	require.False(t, created)
	require.True(t, made.Root.Equal(again.Root))
	require.Equal(t, made.Fingerprint(), again.Fingerprint())

	blocked := filepath.Join(t.TempDir(), "file")
	write(t, filepath.Dir(blocked), "file", "", 0o600)
	_, _, err = ca.Init(filepath.Join(blocked, "ca"), "test")
	require.ErrorContains(t, err, "not a directory")
}

func write(t *testing.T, dir, name, body string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), mode))
	require.NoError(t, os.Chmod(filepath.Join(dir, name), mode))
}
