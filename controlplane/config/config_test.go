package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/config"
)

const valid = `
version: 1
database:
  url: postgres:///runmesh?host=/run/postgresql
admin:
  listen: 127.0.0.1:8444
runner:
  names: [runmesh.example.com]
`

func TestValidConfigGetsDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(valid))
	require.NoError(t, err)
	require.Equal(t, "/var/lib/runmesh-server", c.StateDir)
	require.Equal(t, 30, c.Pools.DefaultLeaseSeconds)
	require.Equal(t, 24, c.Pools.DefaultQueueTimeoutHours)
	require.Equal(t, 90, c.Jobs.RetentionDays)
	require.Equal(t, 365, c.Audit.RetentionDays)
	require.Equal(t, "info", c.Log.Level)
	require.Equal(t, ":8443", c.Runner.Listen)
	require.Equal(t, 24*time.Hour, c.Runner.CertLifetime())
}

func TestMissingIsNotInvalid(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"empty file":      "",
		"no version":      "database: {url: x}\nadmin: {listen: '127.0.0.1:1'}\n",
		"no database":     "version: 1\n",
		"no runner names": "version: 1\ndatabase: {url: x}\nadmin: {listen: '127.0.0.1:1'}\n",
	} {
		_, err := config.Parse([]byte(doc))
		var missing *config.MissingError
		require.True(t, errors.As(err, &missing), "%s: got %v", name, err)
	}
}

func TestInvalidSettings(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ doc, want string }{
		"unknown field":       {valid + "databse:\n  url: x\n", `field databse not found`},
		"unknown nested":      {valid + "pools:\n  default_lease: 9\n", `field default_lease not found`},
		"future version":      {"version: 2\ndatabase: {url: x}\n", `version`},
		"wrong type":          {"version: one\n", `cannot unmarshal`},
		"both urls":           {"version: 1\ndatabase: {url: x, url_file: y}\nadmin: {listen: '127.0.0.1:1'}\n", `url or url_file`},
		"bad cert lifetime":   {valid + "  certificate_lifetime: 1s\n", `certificate_lifetime`},
		"advertise, no port":  {valid + "  advertise: runmesh.example.com\n", `runner.advertise`},
		"advertise elsewhere": {valid + "  advertise: 'other.example.com:8443'\n", `one of runner.names`},
		"negative retention":  {valid + "jobs:\n  retention_days: -1\n", `jobs.retention_days`},
		"audit kept for ever": {valid + "audit:\n  retention_days: 40000\n", `audit.retention_days`},
		"plain http exposed":  {"version: 1\ndatabase: {url: x}\nadmin: {listen: ':8444'}\n", `loopback`},
		"half of tls":         {"version: 1\ndatabase: {url: x}\nadmin: {listen: ':8444', tls_cert_file: c}\n", `go together`},
		"lease out of range":  {valid + "pools: {default_lease_seconds: 1}\n", `between 5 and 3600`},
		"unknown log level":   {valid + "log: {level: loud}\n", `log.level`},
		"listen without port": {"version: 1\ndatabase: {url: x}\nadmin: {listen: 'localhost'}\n", `admin.listen`},
		"storage over http":   {valid + "storage: {endpoint: 'http://s3.example.com', bucket: b, credentials_file: /etc/c}\n", `storage.endpoint`},
		"storage, no bucket":  {valid + "storage: {endpoint: 'https://s3.example.com', credentials_file: /etc/c}\n", `storage.bucket`},
		"storage, no creds":   {valid + "storage: {endpoint: 'https://s3.example.com', bucket: b}\n", `storage.credentials_file`},
	}
	for name, c := range cases {
		_, err := config.Parse([]byte(c.doc))
		var invalid *config.InvalidError
		require.True(t, errors.As(err, &invalid), "%s: got %v", name, err)
		require.Contains(t, err.Error(), c.want, name)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := config.Load(filepath.Join(dir, "absent.yaml"))
	require.ErrorContains(t, err, "absent.yaml: file not found")

	path := filepath.Join(dir, "server.yaml")
	require.NoError(t, os.WriteFile(path, []byte("version: 1\nbogus: true\n"), 0o600))
	_, err = config.Load(path)
	require.ErrorContains(t, err, "server.yaml: invalid")
}

func TestDatabaseURLFromFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db-url")
	require.NoError(t, os.WriteFile(path, []byte("postgres://runmesh:secret@db/runmesh\n"), 0o600))
	c, err := config.Parse([]byte("version: 1\ndatabase: {url_file: " + path + "}\nadmin: {listen: '127.0.0.1:1'}\nrunner: {names: [x]}\n"))
	require.NoError(t, err)
	u, err := c.DatabaseURL()
	require.NoError(t, err)
	require.Equal(t, "postgres://runmesh:secret@db/runmesh", u)
}
