package controlplane_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

// testBundle is a whole control plane in process, on loopback, with two
// organisations and a pool each.
type testBundle struct {
	pool      *pgxpool.Pool
	store     *store.Store
	srv       *controlplane.Server
	keys      *ca.Keys
	adminURL  string
	runnerURL string
	platform  string // admin tokens
	adminB    string
	orgA      record.Organisation
	poolA     record.Pool
	poolB     record.Pool
}

// setup starts a server on a fresh database; mods change its options.
func setup(t testing.TB, mods ...func(*controlplane.Options)) *testBundle {
	t.Helper()
	return setupOn(t, storetest.NewPool(t), mods...)
}

// setupOn is setup on a migrated database of the test's choosing.
func setupOn(t testing.TB, pool *pgxpool.Pool, mods ...func(*controlplane.Options)) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{pool: pool}
	b.store = store.New(b.pool)
	keys, _, err := ca.Init(t.TempDir(), "test")
	require.NoError(t, err)
	b.keys = keys
	o := controlplane.Options{
		Pool: b.pool, Store: b.store, AdminAddr: "127.0.0.1:0", RunnerAddr: "127.0.0.1:0",
		CA: keys, RunnerNames: []string{"127.0.0.1"}, Log: slog.New(unauditedFails{t}),
	}
	for _, m := range mods {
		m(&o)
	}
	b.srv, err = controlplane.New(o)
	require.NoError(t, err)
	require.NoError(t, b.srv.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.srv.Stop(ctx)
	})
	b.adminURL = "http://" + b.srv.AdminAddr().String()
	b.runnerURL = "https://" + b.srv.RunnerAddr().String()

	b.orgA, err = b.store.CreateOrganisation(ctx, "org-a")
	require.NoError(t, err)
	orgB, err := b.store.CreateOrganisation(ctx, "org-b")
	require.NoError(t, err)
	b.poolA, err = b.store.CreatePool(ctx, record.NewPool{OrganisationID: &b.orgA.ID, Name: "gpu"})
	require.NoError(t, err)
	b.poolB, err = b.store.CreatePool(ctx, record.NewPool{OrganisationID: &orgB.ID, Name: "gpu"})
	require.NoError(t, err)
	b.platform = b.newAdmin(t, record.RolePlatformAdmin, nil)
	b.adminB = b.newAdmin(t, record.RoleOrgAdmin, &orgB.ID)
	return b
}

// unauditedFails drops every log record, and fails the test on the one
// that says a mutation succeeded without its audit entry in its own
// transaction: every change made through the admin API is audited with it.
type unauditedFails struct{ t testing.TB }

func (h unauditedFails) Enabled(context.Context, slog.Level) bool { return true }
func (h unauditedFails) Handle(_ context.Context, r slog.Record) error {
	if r.Message == graph.UnauditedMutation {
		h.t.Errorf("%s", r.Message)
	}
	return nil
}
func (h unauditedFails) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h unauditedFails) WithGroup(string) slog.Handler      { return h }

func (b *testBundle) newAdmin(t testing.TB, role record.Role, org *uuid.UUID) string {
	token, digest := tokens.Admin.New()
	_, err := b.store.CreateAdminWithToken(context.Background(), store.NewAdmin{Name: string(role), Role: role, OrganisationID: org, TokenHash: digest})
	require.NoError(t, err)
	return token
}

// gql runs an admin operation and returns data and the first error code.
func (b *testBundle) gql(t testing.TB, token, query string, vars map[string]any) (map[string]any, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, b.adminURL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Data   map[string]any
		Errors []struct{ Extensions struct{ Code string } }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	if len(out.Errors) > 0 {
		return out.Data, out.Errors[0].Extensions.Code
	}
	return out.Data, ""
}

func (b *testBundle) enrolmentToken(t testing.TB, poolID uuid.UUID) string {
	t.Helper()
	data, code := b.gql(t, b.platform, `mutation($p: ID!) { createEnrolmentToken(poolId: $p) { token } }`, map[string]any{"p": poolID})
	require.Empty(t, code)
	return data["createEnrolmentToken"].(map[string]any)["token"].(string)
}

func (b *testBundle) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(b.keys.Root)
	return p
}

// client is an HTTPS client for the runner listener, presenting cert when
// it is not nil. Each client keeps its connections alive.
func (b *testBundle) client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: b.roots(), ServerName: "127.0.0.1"}
	if cert != nil {
		// Always present it: with Certificates, Go would quietly withhold
		// a certificate whose issuer the server does not list.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 90 * time.Second}
}

type reply struct {
	Status int
	Code   string
	Body   string
	Close  bool // the server said Connection: close
}

func (b *testBundle) call(t testing.TB, c *http.Client, method, path string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, b.runnerURL+path, bytes.NewReader(body))
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e runnerapi.Error
	_ = json.Unmarshal(raw, &e)
	return reply{Status: resp.StatusCode, Code: e.Error.Code, Body: string(raw), Close: resp.Close}
}

// runnerKey is a runner's key and a CSR signed by it.
type runnerKey struct {
	priv ed25519.PrivateKey
	csr  string
}

func newRunnerKey(t testing.TB) runnerKey {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, priv)
	require.NoError(t, err)
	return runnerKey{priv: priv, csr: string(pki.EncodeCSR(der))}
}

func (k runnerKey) pub() ed25519.PublicKey { return k.priv.Public().(ed25519.PublicKey) }

// twice is the JSON object body with member added at its end.
func twice(body []byte, member string) []byte {
	return append(append(bytes.TrimSuffix(bytes.TrimSpace(body), []byte("}")), ","+member...), '}')
}

func enrolBody(token, name string, pub []byte, csr string) []byte {
	b, _ := json.Marshal(runnerapi.EnrolRequest{Token: token, Name: name, PublicKey: pub, CSR: csr})
	return b
}

// enrol enrols a runner and returns its id.
func (b *testBundle) enrol(t testing.TB, k runnerKey, poolID uuid.UUID, name string) string {
	t.Helper()
	r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathEnrol, enrolBody(b.enrolmentToken(t, poolID), name, k.pub(), k.csr))
	require.Equal(t, http.StatusCreated, r.Status, r.Body)
	var resp runnerapi.EnrolResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	require.Equal(t, pki.KeyFingerprint(k.pub()), resp.Fingerprint)
	require.Equal(t, "PENDING", resp.Status)
	return resp.RunnerID
}

func (b *testBundle) approve(t testing.TB, id string, k runnerKey) {
	t.Helper()
	_, code := b.gql(t, b.platform, `mutation($id: ID!, $fp: String!) { approveRunner(id: $id, fingerprint: $fp) { status } }`,
		map[string]any{"id": id, "fp": pki.KeyFingerprint(k.pub())})
	require.Empty(t, code)
}

func waitBody(k runnerKey, id string, seconds int) []byte {
	now := time.Now()
	b, _ := json.Marshal(runnerapi.WaitRequest{Timestamp: now, Signature: ed25519.Sign(k.priv, runnerapi.WaitMessage(id, now)), WaitSeconds: seconds})
	return b
}

// certificate waits for the decision and returns the client certificate.
func (b *testBundle) certificate(t testing.TB, k runnerKey, id string) *tls.Certificate {
	t.Helper()
	r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathWait(id), waitBody(k, id, 5))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	var resp runnerapi.WaitResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	require.Equal(t, "APPROVED", resp.Status)
	return tlsCert(t, k, resp.CertificateChain)
}

func tlsCert(t testing.TB, k runnerKey, chainPEM string) *tls.Certificate {
	chain, err := pki.ParseCertificates([]byte(chainPEM))
	require.NoError(t, err)
	c := &tls.Certificate{PrivateKey: k.priv, Leaf: chain[0]}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}

// inFlight is how many requests the server is serving on listener, as
// /metrics says.
func (b *testBundle) inFlight(t testing.TB, listener string) int {
	t.Helper()
	resp, err := http.Get(b.adminURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^runmesh_http_requests_in_flight\{listener="` + listener + `"\} (\d+)$`).FindSubmatch(raw)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}

func (b *testBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// rows is what bad input must never change.
func (b *testBundle) rows(t testing.TB) [4]int {
	return [4]int{
		b.count(t, "SELECT count(*) FROM runners"),
		b.count(t, "SELECT count(*) FROM enrolment_tokens WHERE used_at IS NOT NULL"),
		b.count(t, "SELECT count(*) FROM certificates WHERE runner_id IS NOT NULL"),
		b.count(t, "SELECT count(*) FROM runners WHERE status <> 'PENDING'"),
	}
}

func TestEnrolApproveAndWhoAmI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := newRunnerKey(t)
	id := b.enrol(t, k, b.poolA.ID, "gpu-01")

	// Pending: the long-poll answers PENDING when its time is up.
	r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathWait(id), waitBody(k, id, 0))
	require.JSONEq(t, `{"status":"PENDING"}`, r.Body)

	b.approve(t, id, k)
	cert := b.certificate(t, k, id)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert.Leaf.ExtKeyUsage)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), cert.Leaf.NotAfter, time.Minute)
	got, ok := pki.RunnerID(cert.Leaf)
	require.True(t, ok)
	require.Equal(t, id, got)

	r = b.call(t, b.client(cert), http.MethodGet, runnerapi.PathWhoAmI, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	var who runnerapi.WhoAmIResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &who))
	require.Equal(t, id, who.RunnerID)
	require.Equal(t, b.poolA.ID.String(), who.PoolID)
	require.Equal(t, b.orgA.ID.String(), who.OrganisationID)
	require.Equal(t, cert.Leaf.SerialNumber.String(), who.CertificateSerial)

	// GraphQL shows the runner with its certificate and only a hint of its key.
	data, code := b.gql(t, b.platform, `query($id: ID!) { runner(id: $id) { status fingerprintHint certificate { serial } pool { name } } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, map[string]any{
		"status": "APPROVED", "fingerprintHint": pki.FingerprintHint(pki.KeyFingerprint(k.pub())),
		"certificate": map[string]any{"serial": cert.Leaf.SerialNumber.String()}, "pool": map[string]any{"name": "gpu"},
	}, data["runner"])
}

func TestAdminTokensAndRunnerCertificatesStayOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := newRunnerKey(t)
	id := b.enrol(t, k, b.poolA.ID, "gpu-01")
	b.approve(t, id, k)
	cert := b.certificate(t, k, id)

	// A bearer token means nothing on the runner listener.
	req, _ := http.NewRequest(http.MethodGet, b.runnerURL+runnerapi.PathWhoAmI, nil)
	req.Header.Set("Authorization", "Bearer "+b.platform)
	resp, err := b.client(nil).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A runner certificate means nothing on the admin API: without a bearer
	// token the answer is 401, certificate or not.
	adminTLS, err := b.srv.Authority().IssueServer(context.Background(), []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	srv, err := controlplane.New(controlplane.Options{
		Pool: b.pool, Store: b.store, AdminAddr: "127.0.0.1:0", RunnerAddr: "127.0.0.1:0", CA: b.keys,
		RunnerNames: []string{"127.0.0.1"}, AdminTLS: &tls.Config{Certificates: []tls.Certificate{*adminTLS}, ClientAuth: tls.RequestClientCert},
	})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	defer srv.Stop(context.Background())
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots(), Certificates: []tls.Certificate{*cert}}}}
	resp, err = c.Post("https://"+srv.AdminAddr().String()+"/graphql", "application/json", strings.NewReader(`{"query":"{ viewer { role } }"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestEnrolmentRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	k := newRunnerKey(t)
	used := b.enrolmentToken(t, b.poolA.ID)
	r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathEnrol, enrolBody(used, "first", k.pub(), k.csr))
	require.Equal(t, http.StatusCreated, r.Status, r.Body)

	expired, digest := tokens.Enrolment.New()
	_, err := b.store.CreateEnrolmentToken(ctx, record.AllOrganisations(), b.poolA.ID, digest, nil, time.Now().Add(-time.Second))
	require.NoError(t, err)
	unknown, _ := tokens.Enrolment.New()
	adminAsEnrol := b.platform

	revoked := b.enrolmentToken(t, b.poolA.ID)
	var revokedID string
	revokedDigest, _ := tokens.Enrolment.Digest(revoked)
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT id FROM enrolment_tokens WHERE token_hash = $1", revokedDigest).Scan(&revokedID))
	_, code := b.gql(t, b.platform, `mutation($id: ID!) { revokeEnrolmentToken(id: $id) { state } }`, map[string]any{"id": revokedID})
	require.Empty(t, code)

	fresh := b.enrolmentToken(t, b.poolA.ID)
	other := newRunnerKey(t)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecCSR, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, ecKey)
	namedDER, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"runmesh.example.com"}}, other.priv)
	tampered := []byte(k.csr)
	tampered[len(tampered)/2] ^= 1

	before := b.rows(t)
	cases := []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"reused token", enrolBody(used, "again", other.pub(), other.csr), 403, runnerapi.CodeTokenRefused},
		{"expired token", enrolBody(expired, "late", other.pub(), other.csr), 403, runnerapi.CodeTokenRefused},
		{"revoked token", enrolBody(revoked, "withdrawn", other.pub(), other.csr), 403, runnerapi.CodeTokenRefused},
		{"unknown token", enrolBody(unknown, "guess", other.pub(), other.csr), 403, runnerapi.CodeTokenRefused},
		{"admin token as enrolment token", enrolBody(adminAsEnrol, "confused", other.pub(), other.csr), 403, runnerapi.CodeTokenRefused},
		{"CSR not signed by the sent key", enrolBody(fresh, "mixed", other.pub(), k.csr), 400, runnerapi.CodeInvalidCSR},
		{"tampered CSR", enrolBody(fresh, "bent", k.pub(), string(tampered)), 400, runnerapi.CodeInvalidCSR},
		{"CSR asking for names", enrolBody(fresh, "greedy", other.pub(), string(pki.EncodeCSR(namedDER))), 400, runnerapi.CodeInvalidCSR},
		{"non-Ed25519 key", enrolBody(fresh, "ecdsa", elliptic.Marshal(elliptic.P256(), ecKey.X, ecKey.Y), string(pki.EncodeCSR(ecCSR))), 400, runnerapi.CodeInvalidKey},
		{"ECDSA CSR with a 32-byte key", enrolBody(fresh, "ecdsa", other.pub(), string(pki.EncodeCSR(ecCSR))), 400, runnerapi.CodeInvalidCSR},
		{"same key again", enrolBody(fresh, "twin", k.pub(), k.csr), 409, runnerapi.CodeConflict},
		{"bad name", enrolBody(fresh, "no spaces", other.pub(), other.csr), 400, runnerapi.CodeBadRequest},
		{"garbled JSON", []byte(`{"token": `), 400, runnerapi.CodeBadRequest},
		{"unknown field", []byte(`{"token":"x","name":"n","public_key":"","csr":"","pool":"mine"}`), 400, runnerapi.CodeBadRequest},
		{"two objects", append(enrolBody(fresh, "a", other.pub(), other.csr), '{', '}'), 400, runnerapi.CodeBadRequest},
		{"oversize body", []byte(`{"token":"` + strings.Repeat("a", runnerapi.MaxBodyBytes) + `"}`), 413, runnerapi.CodeTooLarge},
		// Go's decoder would let the last of two equal keys win: a bogus
		// token, then the real one, would enrol.
		{"token named twice", twice(enrolBody(unknown, "twice", other.pub(), other.csr), `"token":"`+fresh+`"`), 400, runnerapi.CodeBadRequest},
		{"token named twice in another case", twice(enrolBody(unknown, "twice", other.pub(), other.csr), `"Token":"`+fresh+`"`), 400, runnerapi.CodeBadRequest},
		{"token named twice, escaped", twice(enrolBody(unknown, "twice", other.pub(), other.csr), `"\u0074oken":"`+fresh+`"`), 400, runnerapi.CodeBadRequest},
	}
	bodies := map[string]string{}
	for _, c := range cases {
		r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathEnrol, c.body)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
		require.Equal(t, c.code, r.Code, c.name)
		bodies[c.name] = r.Body
	}
	require.Equal(t, before, b.rows(t))
	// No oracle: a used, an expired and an unknown token look the same.
	require.Equal(t, bodies["reused token"], bodies["expired token"])
	require.Equal(t, bodies["reused token"], bodies["unknown token"])
	// The conflict rolled back: the fresh token is still unused and works.
	third := newRunnerKey(t)
	r = b.call(t, b.client(nil), http.MethodPost, runnerapi.PathEnrol, enrolBody(fresh, "third", third.pub(), third.csr))
	require.Equal(t, http.StatusCreated, r.Status, r.Body)
}

func TestTokensAndRunnersStayInTheirOrganisation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tokensBefore := b.count(t, "SELECT count(*) FROM enrolment_tokens")
	_, code := b.gql(t, b.adminB, `mutation($p: ID!) { createEnrolmentToken(poolId: $p) { token } }`, map[string]any{"p": b.poolA.ID})
	require.Equal(t, "NOT_FOUND", code)
	require.Equal(t, tokensBefore, b.count(t, "SELECT count(*) FROM enrolment_tokens"))

	k := newRunnerKey(t)
	id := b.enrol(t, k, b.poolA.ID, "gpu-01")
	var poolID uuid.UUID
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT pool_id FROM runners WHERE id = $1", id).Scan(&poolID))
	require.Equal(t, b.poolA.ID, poolID, "the token decides the pool")

	data, code := b.gql(t, b.adminB, `query($id: ID!) { runners { nodes { id } } runner(id: $id) { id } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, map[string]any{"runners": map[string]any{"nodes": []any{}}, "runner": nil}, data)
	_, code = b.gql(t, b.adminB, `mutation($id: ID!, $fp: String!) { approveRunner(id: $id, fingerprint: $fp) { id } }`,
		map[string]any{"id": id, "fp": pki.KeyFingerprint(k.pub())})
	require.Equal(t, "NOT_FOUND", code)
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM runners WHERE status <> 'PENDING'"))
}

func TestWrongFingerprintIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := newRunnerKey(t)
	id := b.enrol(t, k, b.poolA.ID, "gpu-01")
	before := b.rows(t)
	fp := pki.KeyFingerprint(k.pub())
	for _, wrong := range []string{
		pki.KeyFingerprint(newRunnerKey(t).pub()),
		"SHA256:" + pki.FingerprintHint(fp),
		strings.ToLower(fp),
		fp + " ",
		"",
	} {
		_, code := b.gql(t, b.platform, `mutation($id: ID!, $fp: String!) { approveRunner(id: $id, fingerprint: $fp) { id } }`,
			map[string]any{"id": id, "fp": wrong})
		require.Equal(t, "BAD_INPUT", code, wrong)
	}
	require.Equal(t, before, b.rows(t))
	require.Equal(t, 5, b.count(t, "SELECT count(*) FROM audit_log WHERE action = 'approveRunner' AND outcome = 'BAD_INPUT'"))

	// A wait signed by another key learns nothing.
	r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathWait(id), waitBody(newRunnerKey(t), id, 0))
	require.Equal(t, http.StatusUnauthorized, r.Status)
	r2 := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathWait(uuid.NewString()), waitBody(k, id, 0))
	require.Equal(t, r.Body, r2.Body, "an unknown runner and a bad signature look the same")
}

func TestApprovalWakesTheLongPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := newRunnerKey(t)
	id := b.enrol(t, k, b.poolA.ID, "gpu-01")
	got := make(chan time.Time, 1)
	go func() {
		r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathWait(id), waitBody(k, id, 30))
		if r.Status == http.StatusOK && strings.Contains(r.Body, "APPROVED") {
			got <- time.Now()
		}
		close(got)
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return b.inFlight(t, "runner") == 1 }, "the poll waits")
	approved := time.Now()
	b.approve(t, id, k)
	at, ok := <-got
	require.True(t, ok, "the long-poll did not return the certificate")
	require.Less(t, at.Sub(approved), time.Second, "approval to certificate")
}

func TestRevocationStopsEveryCertificateOfTheRunner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := newRunnerKey(t)
	id := b.enrol(t, k, b.poolA.ID, "gpu-01")
	b.approve(t, id, k)
	first := b.certificate(t, k, id)

	// Renew: the answer closes the connection, and the new certificate is
	// recorded against the runner.
	r := b.call(t, b.client(first), http.MethodPost, "/renew", nil)
	require.Equal(t, http.StatusCreated, r.Status, r.Body)
	require.True(t, r.Close, "Connection: close")
	var renewed struct{ CertChain []string }
	require.NoError(t, json.Unmarshal([]byte(r.Body), &renewed))
	second := tlsCert(t, k, strings.Join(renewed.CertChain, ""))
	require.NotEqual(t, first.Leaf.SerialNumber, second.Leaf.SerialNumber)
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM certificates WHERE runner_id = $1", id))

	// Keep a connection open with the newer certificate.
	kept := b.client(second)
	require.Equal(t, http.StatusOK, b.call(t, kept, http.MethodGet, runnerapi.PathWhoAmI, nil).Status)

	_, code := b.gql(t, b.platform, `mutation($id: ID!) { revokeRunner(id: $id, reason: "stolen") { status } }`, map[string]any{"id": id})
	require.Empty(t, code)
	revoked := time.Now()

	// The open connection is refused at its next request...
	r = b.call(t, kept, http.MethodGet, runnerapi.PathWhoAmI, nil)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	// ...renewal over it is refused...
	r = b.call(t, kept, http.MethodPost, "/renew", nil)
	require.GreaterOrEqual(t, r.Status, 400)
	// ...and new handshakes fail, with either certificate.
	for _, c := range []*tls.Certificate{first, second} {
		_, err := b.client(c).Get(b.runnerURL + runnerapi.PathWhoAmI)
		require.Error(t, err)
	}
	require.Less(t, time.Since(revoked), time.Second)
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM certificate_revocations"), "every certificate of the runner is a revocation row")

	// The runner's long-poll says so too.
	r = b.call(t, b.client(nil), http.MethodPost, runnerapi.PathWait(id), waitBody(k, id, 0))
	require.Contains(t, r.Body, `"status":"REVOKED"`)
}

func TestForeignAndExpiredCertificatesFailTheHandshake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := newRunnerKey(t)
	id := b.enrol(t, k, b.poolA.ID, "gpu-01")
	b.approve(t, id, k)

	// Another CA's certificate for the same runner id and key.
	otherKeys, _, err := ca.Init(t.TempDir(), "other")
	require.NoError(t, err)
	foreign := signLeaf(t, otherKeys, k, id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	// Our CA's certificate, recorded, but expired.
	expired := signLeaf(t, b.keys, k, id, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	require.NoError(t, b.store.StoreCertificate(context.Background(), record.Certificate{
		Serial: expired.Leaf.SerialNumber.String(), RunnerID: ptr(uuid.MustParse(id)), DER: expired.Leaf.Raw,
		NotBefore: expired.Leaf.NotBefore, NotAfter: expired.Leaf.NotAfter,
	}))
	// Our CA's certificate, valid, but never issued by the server.
	unrecorded := signLeaf(t, b.keys, k, id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))

	for name, c := range map[string]*tls.Certificate{"foreign": foreign, "expired": expired, "unrecorded": unrecorded} {
		_, err := b.client(c).Get(b.runnerURL + runnerapi.PathWhoAmI)
		require.Error(t, err, name)
	}
}

// signLeaf makes a runner certificate with keys' intermediate, bypassing
// the server.
func signLeaf(t *testing.T, keys *ca.Keys, k runnerKey, id string, notBefore, notAfter time.Time) *tls.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 100))
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: id}, URIs: []*url.URL{pki.RunnerURI(id)},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, keys.Intermediate, k.pub(), keys.IntermediateKey)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &tls.Certificate{PrivateKey: k.priv, Leaf: leaf, Certificate: [][]byte{der, keys.Intermediate.Raw}}
}

func ptr[T any](v T) *T { return &v }
