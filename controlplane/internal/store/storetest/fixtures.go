package storetest

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// ApprovedRunner enrols a runner into the pool with cores, memory and
// GPUs, and approves it, as an administrator would.
func ApprovedRunner(t testing.TB, s *store.Store, poolID uuid.UUID, cores float64, memMiB int64, gpus int) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	name := "r-" + uuid.NewString()[:8]
	tokenHash := sha256.Sum256([]byte(name))
	if _, err := s.CreateEnrolmentToken(ctx, record.AllOrganisations(), poolID, tokenHash[:], nil, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("enrolment token: %v", err)
	}
	key := sha256.Sum256([]byte("key" + name))
	r, err := s.Enrol(ctx, store.NewRunner{
		TokenDigest: tokenHash[:], Name: name, PublicKey: key[:], Fingerprint: "SHA256:x", CSR: []byte{0},
		Capacity: store.ReportedCapacity{Capacity: []byte(`{}`), GPUs: []byte(`[]`), Cores: cores, MemoryMiB: memMiB, GPUCount: gpus, GPUsHealthy: gpus},
	})
	if err != nil {
		t.Fatalf("enrol: %v", err)
	}
	Approve(t, s, r.ID)
	return r.ID
}

// Approve approves a runner as an administrator's approval would, whatever
// its status and without a certificate.
func Approve(t testing.TB, s *store.Store, id uuid.UUID) {
	t.Helper()
	err := s.WithTx(context.Background(), func(tx *store.Tx) error {
		ctx := context.Background()
		if _, err := tx.LockRunner(ctx, record.AllOrganisations(), id); err != nil {
			return err
		}
		return tx.SetRunnerStatus(ctx, id, store.RunnerDecision{Status: record.RunnerApproved}, nil)
	})
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
}
