// Package controlplanetest gives tests outside the control plane (the admin
// API's, the server commands') a real, migrated PostgreSQL and the domain
// services over it, wired as the server wires them. The store stays
// internal: what a test needs written straight into the database, it asks
// of this package by name (ApprovedRunner).
//
// Run the tests with `make test`, which starts a throwaway PostgreSQL and
// exports TEST_DATABASE_URL.
package controlplanetest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/enrolment/castore"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/pgcluster"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
)

// NewDatabase creates a database of the test's own, migrated to the latest
// schema, dropped when the test ends, and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return storetest.NewDatabase(t)
}

// NewEmptyDatabase is NewDatabase without the migrations.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return storetest.NewEmptyDatabase(t)
}

// NewPool is a pool on a database of the test's own, opened as the server
// opens its own.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return storetest.NewPool(t)
}

// Services are the domain services over one database, with a listener of
// their own for the subscriptions' wake-ups.
type Services struct {
	Tenancy   *tenancy.Service
	Queue     *queue.Service
	Fleet     *fleet.Service
	Enrolment *enrolment.Service
	// Authority is the CA Enrolment issues with, over the same database.
	Authority *ca.Authority

	st *store.Store
}

// NewServices wires the services over pool, with the CA of keys (nil: a
// fresh one of the test's own).
func NewServices(t testing.TB, pool *pgxpool.Pool, keys *ca.Keys) *Services {
	t.Helper()
	if keys == nil {
		var err error
		if keys, _, err = ca.Init(t.TempDir(), "test"); err != nil {
			t.Fatalf("test CA: %v", err)
		}
	}
	st := store.New(pool)
	auth, err := ca.NewAuthority(keys, castore.New(st))
	if err != nil {
		t.Fatalf("test CA: %v", err)
	}
	// The subscriptions' wake-ups, as the server's listener gives them.
	l := store.NewListener(pool, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Listening before the services are used: a test that counts the
	// statements its requests cost would count the listener's own LISTENs
	// otherwise, and a subscription could miss a wake-up.
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the services' listener did not start listening")
	}
	return &Services{
		Tenancy:   tenancy.New(st, l),
		Queue:     queue.NewService(st, l),
		Fleet:     fleet.NewService(st, l),
		Enrolment: enrolment.New(enrolment.Options{Store: st, Listener: l, Authority: auth}),
		Authority: auth,
		st:        st,
	}
}

// GraphOptions are the admin API's options over these services.
func (s *Services) GraphOptions() graph.Options {
	return graph.Options{
		Tenancy: s.Tenancy, Queue: s.Queue, Fleet: s.Fleet, Enrolment: s.Enrolment,
		CAFingerprint: s.Authority.Keys().Fingerprint(),
	}
}

// Runner is a runner to put straight into the database, approved.
type Runner struct {
	Name      string
	PublicKey []byte
	CSR       []byte // DER, signed by the runner's key
	Cores     float64
	MemoryMiB int64
	// Recovery is the agent's recovery proof as JSON (nil: none yet, so
	// the runner takes no work).
	Recovery []byte
}

// PendingRunner enrols a runner named name into the pool with a fresh
// Ed25519 key and a CSR signed by it, as the runner API would, and leaves
// it PENDING: an administrator can approve it with the fingerprint it
// returns, and the CA signs its CSR. It returns the runner's id.
func (s *Services) PendingRunner(t testing.TB, poolID uuid.UUID, name string) (id uuid.UUID, fingerprint string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	if err != nil {
		t.Fatal(err)
	}
	fingerprint = pki.KeyFingerprint(pub)
	return s.enrol(t, poolID, Runner{Name: name, PublicKey: pub, CSR: csr, Cores: 4, MemoryMiB: 1024}, fingerprint), fingerprint
}

// ApprovedRunner enrols r into the pool and approves it, as a runner and an
// administrator would, without the runner API: no certificate is issued
// (Authority issues one for the CSR). It returns the runner's id.
func (s *Services) ApprovedRunner(t testing.TB, poolID uuid.UUID, r Runner) uuid.UUID {
	t.Helper()
	id := s.enrol(t, poolID, r, "SHA256:x")
	storetest.Approve(t, s.st, id)
	if r.Recovery != nil {
		if err := s.st.RecordRecovery(context.Background(), id, r.Recovery); err != nil {
			t.Fatalf("recovery proof: %v", err)
		}
	}
	return id
}

// enrol puts r into the pool, PENDING, with a single-use token of its own.
func (s *Services) enrol(t testing.TB, poolID uuid.UUID, r Runner, fingerprint string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	digest := sha256.Sum256([]byte(r.Name))
	if _, err := s.st.CreateEnrolmentToken(ctx, record.AllOrganisations(), poolID, digest[:], nil, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("enrolment token: %v", err)
	}
	enrolled, err := s.st.Enrol(ctx, store.NewRunner{
		TokenDigest: digest[:], Name: r.Name, PublicKey: r.PublicKey, Fingerprint: fingerprint, CSR: r.CSR,
		Capacity: store.ReportedCapacity{Capacity: []byte(`{}`), GPUs: []byte(`[]`), Cores: r.Cores, MemoryMiB: r.MemoryMiB},
	})
	if err != nil {
		t.Fatalf("enrol: %v", err)
	}
	return enrolled.ID
}

// AdminToken makes a platform admin named name, straight in the
// database, and returns its token.
func (s *Services) AdminToken(t testing.TB, name string) string {
	t.Helper()
	token, digest := tokens.Admin.New()
	if _, err := s.st.CreateAdminWithToken(context.Background(), store.NewAdmin{
		Name: name, Role: record.RolePlatformAdmin, TokenHash: digest,
	}); err != nil {
		t.Fatalf("admin token: %v", err)
	}
	return token
}

// ExpiredAdminToken makes a platform admin whose only token ended an hour
// ago, straight in the database (tenancy gives no token a past end), and
// returns the token.
func (s *Services) ExpiredAdminToken(t testing.TB, name string) string {
	t.Helper()
	token, digest := tokens.Admin.New()
	ended := time.Now().Add(-time.Hour)
	if _, err := s.st.CreateAdminWithToken(context.Background(), store.NewAdmin{
		Name: name, Role: record.RolePlatformAdmin, TokenHash: digest, ExpiresAt: &ended,
	}); err != nil {
		t.Fatalf("expired admin token: %v", err)
	}
	return token
}

// OwnPostgres is a PostgreSQL server of the test's own, with an empty
// database "runmesh", for tests that stop and start it (Halt, Crash,
// Restart); the shared one of NewPool must stay up.
func OwnPostgres(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "runmesh-own-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the server may run as another user
		t.Fatal(err)
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(dir, "data"), LogFile: filepath.Join(dir, "postgres.log")})
	if err != nil {
		t.Fatalf("own PostgreSQL: %v", err)
	}
	t.Cleanup(func() { c.Stop() })
	if err := c.CreateDatabase(ctx, "runmesh"); err != nil {
		t.Fatalf("own PostgreSQL: %v", err)
	}
	return c
}
