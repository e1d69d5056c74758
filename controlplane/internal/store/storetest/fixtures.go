package storetest

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// ApprovedRunner enrols a runner into the pool with cores, memory and
// GPUs, and approves it, as an administrator would.
func ApprovedRunner(t testing.TB, s *store.Store, poolID uuid.UUID, cores float64, memMiB int64, gpus int) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	name := "r-" + uuid.NewString()[:8]
	tokenHash := sha256.Sum256([]byte(name))
	if _, err := s.CreateEnrolmentToken(ctx, store.AllOrganisations(), poolID, tokenHash[:], nil, time.Now().Add(time.Hour)); err != nil {
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
	if _, err := s.DecideRunner(ctx, store.AllOrganisations(), r.ID, nil, func(context.Context, store.Runner) (store.RunnerDecision, error) {
		return store.RunnerDecision{Status: store.RunnerApproved}, nil
	}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	return r.ID
}
