package tenancy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
)

// ErrUnauthenticated: the bearer token is missing, malformed, unknown,
// expired or revoked. The five are one error on purpose.
var ErrUnauthenticated = errors.New("unauthenticated")

// Authenticate is the admin holding a live admin token.
func (s *Service) Authenticate(ctx context.Context, token string) (record.Admin, error) {
	digest, ok := tokens.Admin.Digest(token)
	if !ok {
		return record.Admin{}, ErrUnauthenticated
	}
	a, err := s.st.AdminByTokenHash(ctx, digest)
	if errors.Is(err, record.ErrNotFound) {
		return record.Admin{}, ErrUnauthenticated
	}
	if err != nil {
		return record.Admin{}, fmt.Errorf("authenticate admin: %w", err)
	}
	return a, nil
}

// NewAdmin is an admin to create, with its first token.
type NewAdmin struct {
	Name           string
	Role           record.Role
	OrganisationID *uuid.UUID
	CreatedBy      *uuid.UUID
	// TTL ends the token that long after its creation (nil: it lasts
	// until revoked).
	TTL *time.Duration
}

// CreatedAdmin is an admin just made, with its first token: the only time
// the token is seen, for only its digest is kept.
type CreatedAdmin struct {
	Token     string
	Admin     record.Admin
	ExpiresAt *time.Time // when the token ends (nil: never)
}

// CreateAdmin adds an admin and its first token. What breaks the rules of
// NewAdmin is a *record.InputError, and nothing is written.
func (s *Service) CreateAdmin(ctx context.Context, a NewAdmin) (CreatedAdmin, error) {
	if err := a.check(); err != nil {
		return CreatedAdmin{}, err
	}
	return audit.Do(ctx, s.st, func(tx *store.Tx) (CreatedAdmin, error) { return createAdmin(ctx, tx, a) })
}

// createAdmin adds an admin and its first token in tx.
func createAdmin(ctx context.Context, tx *store.Tx, a NewAdmin) (CreatedAdmin, error) {
	token, digest := tokens.Admin.New()
	var expires *time.Time
	if a.TTL != nil {
		t := time.Now().Add(*a.TTL).UTC().Truncate(time.Microsecond)
		expires = &t
	}
	admin, err := tx.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: a.Name, Role: a.Role, OrganisationID: a.OrganisationID, CreatedBy: a.CreatedBy,
		TokenHash: digest, ExpiresAt: expires,
	})
	if err != nil {
		return CreatedAdmin{}, err
	}
	return CreatedAdmin{Token: token, Admin: admin, ExpiresAt: expires}, nil
}

// ErrAdminsExist: the first admin is made once; further ones come from
// createAdminToken, which is audited.
var ErrAdminsExist = errors.New("admins exist already: create further tokens with createAdminToken")

// Bootstrap gives a fresh installation its first platform admin, audited,
// and returns its token. With an admin in place it is ErrAdminsExist.
func (s *Service) Bootstrap(ctx context.Context, name string) (token string, err error) {
	if err := (NewAdmin{Name: name, Role: record.RolePlatformAdmin}).check(); err != nil {
		return "", fmt.Errorf("bootstrap admin: %w", err)
	}
	err = s.st.WithTx(ctx, func(tx *store.Tx) error {
		// Serialised with any other bootstrap by the admins table lock.
		if err := tx.LockAdmins(ctx); err != nil {
			return err
		}
		n, err := tx.CountAdmins(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			return ErrAdminsExist
		}
		made, err := createAdmin(ctx, tx, NewAdmin{Name: name, Role: record.RolePlatformAdmin})
		if err != nil {
			return err
		}
		token = made.Token
		a, id := made.Admin, made.Admin.ID
		return tx.Audit(ctx, record.AuditEntry{ActorID: &id, ActorName: a.Name, ActorRole: a.Role, Action: "bootstrapAdmin", Outcome: "OK", Detail: []byte(`{}`)})
	})
	if err != nil {
		return "", fmt.Errorf("bootstrap admin: %w", err)
	}
	return token, nil
}
