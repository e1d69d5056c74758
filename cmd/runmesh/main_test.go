package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/graph"
)

func TestCLIAgainstTheRealAPI(t *testing.T) {
	t.Parallel()
	s := controlplanetest.NewServices(t, controlplanetest.NewPool(t), nil)
	made, err := s.Tenancy.CreateAdmin(context.Background(), tenancy.NewAdmin{Name: "ops", Role: record.RolePlatformAdmin})
	require.NoError(t, err)
	srv := httptest.NewServer(graph.NewHandler(s.GraphOptions()))
	t.Cleanup(srv.Close)

	envFile := filepath.Join(t.TempDir(), "dev.env")
	require.NoError(t, os.WriteFile(envFile, []byte("RUNMESH_ADMIN_URL="+srv.URL+"\nRUNMESH_ADMIN_TOKEN="+made.Token+"\n"), 0o600))
	noEnv := func(string) string { return "" }
	cli := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(append([]string{"--env-file", envFile}, args...), strings.NewReader(""), &out, &errOut, noEnv)
		return out.String(), err
	}

	out, err := cli("viewer")
	require.NoError(t, err)
	require.Contains(t, out, `"role": "PLATFORM_ADMIN"`)

	out, err = cli("create-organisation", "acme")
	require.NoError(t, err)
	require.Contains(t, out, `"name": "acme"`)

	_, err = cli("create-organisation", "acme")
	require.ErrorContains(t, err, "(CONFLICT)")

	out, err = cli("query", "--var", "n=1", `query($n: Int!) { auditLog(first: $n) { nodes { action outcome } } }`)
	require.NoError(t, err)
	require.Contains(t, out, `"outcome": "CONFLICT"`)

	// A job, by pool name, with a secret passed by name from the environment.
	_, err = cli("create-pool", "gpu")
	require.NoError(t, err)
	var out2, errOut bytes.Buffer
	env := func(k string) string {
		if k == "API_KEY" {
			return "s3cret"
		}
		return ""
	}
	require.NoError(t, run([]string{"--env-file", envFile, "submit-job", "--pool", "gpu", "--image", "busybox", "--env", "API_KEY", "--", "echo", "hi"},
		strings.NewReader(""), &out2, &errOut, env))
	require.Contains(t, out2.String(), `"state": "QUEUED"`)
	out, err = cli("jobs", "--state", "queued")
	require.NoError(t, err)
	require.Contains(t, out, `"image": "busybox"`)
	require.NotContains(t, out, "s3cret")

	// Without a token it says what is missing.
	err = run([]string{"viewer"}, nil, &bytes.Buffer{}, &bytes.Buffer{}, func(k string) string {
		if k == "RUNMESH_ADMIN_URL" {
			return srv.URL
		}
		return ""
	})
	require.ErrorContains(t, err, "no token")
}
