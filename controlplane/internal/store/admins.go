package store

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

func adminFromRow(r dbsqlc.Admin) record.Admin {
	return record.Admin{
		ID:             r.ID,
		Name:           r.Name,
		Role:           record.Role(r.Role),
		OrganisationID: uuidPtr(r.OrganisationID),
		CreatedAt:      r.CreatedAt,
	}
}

// NewAdmin is what CreateAdminWithToken needs. TokenHash is the SHA-256
// digest of the secret; the secret itself never reaches the store.
type NewAdmin struct {
	Name           string
	Role           record.Role
	OrganisationID *uuid.UUID
	CreatedBy      *uuid.UUID
	TokenHash      []byte
	ExpiresAt      *time.Time
}

// CreateAdminWithToken adds an admin and its first token in one step; the
// admin's TokenID is that token's.
func (s *Querier) CreateAdminWithToken(ctx context.Context, a NewAdmin) (record.Admin, error) {
	var out record.Admin
	err := s.atomically(ctx, func(tx *Tx) error {
		row, err := tx.q.CreateAdmin(ctx, tx.db, dbsqlc.CreateAdminParams{
			Name:           a.Name,
			Role:           string(a.Role),
			OrganisationID: nullUUID(a.OrganisationID),
			CreatedBy:      nullUUID(a.CreatedBy),
		})
		if err != nil {
			return mapErr(err)
		}
		tok, err := tx.q.CreateAdminToken(ctx, tx.db, dbsqlc.CreateAdminTokenParams{
			AdminID: row.ID, TokenHash: a.TokenHash, ExpiresAt: a.ExpiresAt,
		})
		if err != nil {
			return mapErr(err)
		}
		out = adminFromRow(row)
		out.TokenID = tok.ID
		return nil
	})
	return out, err
}

// AdminByTokenHash is the admin holding a live token with this digest, or
// ErrNotFound for unknown, expired and revoked tokens alike.
func (s *Querier) AdminByTokenHash(ctx context.Context, hash []byte) (record.Admin, error) {
	row, err := s.q.AdminByTokenHash(ctx, s.db, dbsqlc.AdminByTokenHashParams{TokenHash: hash})
	if err != nil {
		return record.Admin{}, mapErr(err)
	}
	a := adminFromRow(row.Admin)
	a.TokenID = row.TokenID
	return a, nil
}

// CountAdmins is how many admins exist (dev uses it to bootstrap the first).
func (s *Querier) CountAdmins(ctx context.Context) (int64, error) {
	n, err := s.q.CountAdmins(ctx, s.db)
	return n, mapErr(err)
}

// LockAdmins takes the admins table's lock until the transaction ends, so
// that "create the first admin if there is none" runs one at a time.
func (s *Tx) LockAdmins(ctx context.Context) error {
	return mapErr(s.q.LockAdmins(ctx, s.db))
}
