package enrolment_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/enrolment/castore"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
)

// A decision refused changes nothing: approval with a fingerprint that is
// not the runner's leaves it PENDING with no certificate, and a rejected
// runner is neither revoked nor retired.
func TestRefusedDecisionsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.TxStore(t)
	keys, _, err := ca.Init(t.TempDir(), "test")
	require.NoError(t, err)
	auth, err := ca.NewAuthority(keys, castore.New(st))
	require.NoError(t, err)
	s := enrolment.New(enrolment.Options{Store: st, Authority: auth})
	org, err := st.CreateOrganisation(ctx, "org")
	require.NoError(t, err)
	pool, err := st.CreatePool(ctx, record.NewPool{OrganisationID: &org.ID, Name: "gpu"})
	require.NoError(t, err)
	token := sha256.Sum256([]byte("token"))
	_, err = st.CreateEnrolmentToken(ctx, record.AllOrganisations(), pool.ID, token[:], nil, time.Now().Add(time.Hour))
	require.NoError(t, err)
	key := sha256.Sum256([]byte("key"))
	r, err := st.Enrol(ctx, store.NewRunner{
		TokenDigest: token[:], Name: "gpu-01", PublicKey: key[:], Fingerprint: "SHA256:right", CSR: []byte{0},
		Capacity: store.ReportedCapacity{Capacity: []byte(`{}`), GPUs: []byte(`[]`)},
	})
	require.NoError(t, err)
	all := record.AllOrganisations()
	status := func() record.Runner {
		got, err := st.Runner(ctx, all, r.ID)
		require.NoError(t, err)
		return got
	}

	_, err = s.Approve(ctx, all, r.ID, "SHA256:wrong", nil)
	require.ErrorIs(t, err, enrolment.ErrFingerprintMismatch)
	require.Equal(t, record.RunnerPending, status().Status)
	certs, err := s.LatestCertificates(ctx, []uuid.UUID{r.ID})
	require.NoError(t, err)
	require.Empty(t, certs, "no certificate for a refused approval")

	_, err = s.Reject(ctx, all, r.ID, "not ours", nil)
	require.NoError(t, err)
	var wrong *enrolment.WrongStatusError
	_, err = s.Revoke(ctx, all, r.ID, "late", nil)
	require.ErrorAs(t, err, &wrong)
	_, err = s.Retire(ctx, all, r.ID, "late", nil)
	require.ErrorAs(t, err, &wrong)
	got := status()
	require.Equal(t, record.RunnerRejected, got.Status)
	require.Equal(t, "not ours", got.StatusReason)
	require.Nil(t, got.RetiredAt)
	require.False(t, got.Draining)
}

// An approval issues the runner's first certificate and fixes what it
// reported at enrolment as its inventory; a retirement revokes it and
// marks it retired; each decision needs a reason where it takes one.
func TestWhatComesWithADecision(t *testing.T) {
	t.Parallel()
	o := newOffice(t, 0)
	ctx := context.Background()
	all := record.AllOrganisations()
	id, a := o.enrolled(t, "gpu-01")
	for name, decide := range map[string]func() error{
		"reject": func() error { _, err := o.svc.Reject(ctx, all, id, "", nil); return err },
		"revoke": func() error { _, err := o.svc.Revoke(ctx, all, id, "", nil); return err },
		"retire": func() error { _, err := o.svc.Retire(ctx, all, id, "", nil); return err },
	} {
		var ie *record.InputError
		require.ErrorAs(t, decide(), &ie, name)
	}
	r, err := o.svc.Approve(ctx, all, id, pki.KeyFingerprint(a.req.PublicKey), nil)
	require.NoError(t, err)
	require.Equal(t, record.RunnerApproved, r.Status)
	require.Equal(t, &record.Inventory{MemoryMiB: 4096, GPUs: []record.InventoryGPU{}}, r.Inventory)
	certs, err := o.svc.LatestCertificates(ctx, []uuid.UUID{id})
	require.NoError(t, err)
	require.Contains(t, certs, id, "the first certificate")

	r, err = o.svc.Retire(ctx, all, id, "old", nil)
	require.NoError(t, err)
	require.Equal(t, record.RunnerRevoked, r.Status)
	require.Equal(t, "retired: old", r.StatusReason)
	require.NotNil(t, r.RetiredAt)
}
