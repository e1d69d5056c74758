package main_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

// TestTwoServerProcessesCompleteEveryJobOnce runs two runmesh-server
// processes on one database and one CA. Runners lease from either, and
// every one of 1,000 jobs is accepted exactly once.
func TestTwoServerProcessesCompleteEveryJobOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := controlplanetest.NewDatabase(t)
	stateDir := t.TempDir()
	keys, _, err := ca.Init(filepath.Join(stateDir, "ca"), "test")
	require.NoError(t, err)

	var runnerURLs []string
	for i := range 2 {
		cfg := filepath.Join(t.TempDir(), "server.yaml")
		urlFile := filepath.Join(t.TempDir(), "db-url")
		require.NoError(t, os.WriteFile(urlFile, []byte(dbURL), 0o600))
		require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(
			"version: 1\nstate_dir: %s\ndatabase: {url_file: %s}\nadmin: {listen: '127.0.0.1:0'}\nrunner: {listen: '127.0.0.1:0', names: ['127.0.0.1']}\n",
			stateDir, urlFile)), 0o600))
		notify := e2e.NewNotify(t)
		p := e2e.Start(t, []string{notify.Env()}, server(t), "serve", "--config", cfg)
		notify.WaitFor(t, "READY=1", 90*time.Second)
		var addr []string
		e2e.Eventually(t, 10*time.Second, fmt.Sprintf("replica %d logged its runner listener", i), func() bool {
			addr = regexp.MustCompile(`"msg":"runner listener up","component":"controlplane","addr":"([^"]+)"`).FindStringSubmatch(p.Stderr.String())
			return addr != nil
		})
		runnerURLs = append(runnerURLs, "https://"+addr[1])
	}

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	services := controlplanetest.NewServices(t, pool, keys)
	p, err := services.Tenancy.CreatePool(ctx, record.NewPool{Name: "shared"})
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(keys.Root)
	clients := make([]*http.Client, 6)
	for i := range clients {
		clients[i] = approvedClient(t, services, p.ID, roots, fmt.Sprintf("runner-%d", i))
	}

	const jobs = 1000
	_, err = pool.Exec(ctx, `INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds)
		SELECT $1, 'busybox', 1, 0, 0, 60 FROM generate_series(1, $2)`, p.ID, jobs)
	require.NoError(t, err)

	var accepted, stale atomic.Int64
	var wg sync.WaitGroup
	for i, c := range clients {
		base := runnerURLs[i%2]
		wg.Go(func() {
			big := runnerapi.Resources{Cores: 1000, MemoryMiB: 1 << 30, GPUs: 64}
			for {
				var lr runnerapi.LeaseResponse
				post(t, c, base+runnerapi.PathLeases, runnerapi.LeaseRequest{Kinds: []string{"default"}, Largest: big, Free: big, Max: 8, AgentInstance: agentInstance}, &lr)
				if len(lr.Leases) == 0 {
					return
				}
				for _, l := range lr.Leases {
					zero := 0
					switch post(t, c, base+runnerapi.PathLeaseResult(l.LeaseID), runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: &zero}, nil) {
					case http.StatusOK:
						accepted.Add(1)
					case http.StatusConflict:
						stale.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(jobs), accepted.Load())
	require.Zero(t, stale.Load())
	var succeeded, runs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs WHERE state = 'SUCCEEDED' AND attempt = 1),
		(SELECT count(*) FROM job_runs WHERE finished_at IS NOT NULL)`).Scan(&succeeded, &runs))
	require.Equal(t, jobs, succeeded)
	require.Equal(t, jobs, runs)
}

// agentInstance is the agent instance every runner here leases as.
const agentInstance = "00000000-0000-4000-8000-000000000001"

// approvedClient enrols an approved runner straight into the database,
// issues its certificate through the shared CA, and returns an mTLS client
// for it.
func approvedClient(t *testing.T, services *controlplanetest.Services, poolID uuid.UUID, roots *x509.CertPool, name string) *http.Client {
	t.Helper()
	ctx := context.Background()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	require.NoError(t, err)
	csr, _ := x509.ParseCertificateRequest(der)
	proof, _ := json.Marshal(runnerapi.RecoveryProof{AgentInstance: agentInstance, SurvivorsChecked: true, Isolated: true})
	id := services.ApprovedRunner(t, poolID, controlplanetest.Runner{
		Name: name, PublicKey: priv.Public().(ed25519.PublicKey), CSR: der, Cores: 64, MemoryMiB: 1 << 20, Recovery: proof,
	})
	chain, err := services.Authority.IssueRunner(ctx, csr, id.String(), time.Hour)
	require.NoError(t, err)
	cert := &tls.Certificate{PrivateKey: priv, Leaf: chain[0], Certificate: [][]byte{chain[0].Raw, chain[1].Raw}}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }}}}
}

func post(t *testing.T, c *http.Client, url string, in, out any) int {
	t.Helper()
	body, _ := json.Marshal(in)
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}
