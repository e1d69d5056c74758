package main_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// registryBin is distribution's registry, as Debian packages it
// (docker-registry; agent/sandbox installs it with podman).
const registryBin = "/usr/bin/docker-registry"

// startRegistry runs a real container registry on loopback, speaking plain
// HTTP, for the test's life. With a user it takes only that user's
// password (htpasswd, as a private registry would). It returns host:port.
func startRegistry(t *testing.T, user, password string) string {
	t.Helper()
	require.FileExists(t, registryBin, "apt-get install docker-registry (agent/sandbox/sandbox.sh up installs it)")
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	auth := ""
	if user != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+string(hash)+"\n"), 0o600))
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: runmesh-test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	}
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n%s",
		filepath.Join(dir, "data"), addr, auth)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600))
	var out e2e.Buffer
	cmd := exec.Command(registryBin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("registry %s:\n%s", addr, out.String())
		}
	})
	e2e.Eventually(t, 10*time.Second, "the registry at "+addr+" answers", func() bool {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized
	})
	return addr
}

// useRegistries lets the runmesh user's podman pull from the registries
// over plain HTTP, and restarts its service, which reads the list once.
func (s sandbox) useRegistries(addrs ...string) {
	s.t.Helper()
	var conf strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&conf, "[[registry]]\nlocation = %q\ninsecure = true\n\n", a)
	}
	// The sandbox's directory is bound at the same path inside it.
	path := filepath.Join(s.dir, "registries.conf")
	require.NoError(s.t, os.WriteFile(path, []byte(conf.String()), 0o644))
	s.must("user", "sh", "-c", `mkdir -p "$HOME/.config/containers" && cp "$1" "$HOME/.config/containers/registries.conf" &&
		systemctl --user stop podman.service`, "sh", path)
}
