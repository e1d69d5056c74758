package tenancy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

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
	// ExpiresAt ends the token (nil: it lasts until revoked).
	ExpiresAt *time.Time
}

// CreateAdmin adds an admin and its first token, and returns the token:
// the only time it is seen, for only its digest is kept.
func (s *Service) CreateAdmin(ctx context.Context, a NewAdmin) (token string, admin record.Admin, err error) {
	token, digest := tokens.Admin.New()
	admin, err = s.st.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: a.Name, Role: a.Role, OrganisationID: a.OrganisationID, CreatedBy: a.CreatedBy,
		TokenHash: digest, ExpiresAt: a.ExpiresAt,
	})
	if err != nil {
		return "", record.Admin{}, err
	}
	return token, admin, nil
}

// ErrAdminsExist: the first admin is made once; further ones come from
// createAdminToken, which is audited.
var ErrAdminsExist = errors.New("admins exist already: create further tokens with createAdminToken")

// Bootstrap gives a fresh installation its first platform admin, audited,
// and returns its token. With an admin in place it is ErrAdminsExist.
func (s *Service) Bootstrap(ctx context.Context, name string) (token string, err error) {
	err = s.st.WithTx(ctx, func(ctx context.Context) error {
		// Serialised with any other bootstrap by the admins table lock.
		if err := s.st.LockAdmins(ctx); err != nil {
			return err
		}
		n, err := s.st.CountAdmins(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			return ErrAdminsExist
		}
		var a record.Admin
		token, a, err = s.CreateAdmin(ctx, NewAdmin{Name: name, Role: record.RolePlatformAdmin})
		if err != nil {
			return err
		}
		id := a.ID
		return s.st.Audit(ctx, record.AuditEntry{ActorID: &id, ActorName: a.Name, ActorRole: a.Role, Action: "bootstrapAdmin", Outcome: "OK", Detail: []byte(`{}`)})
	})
	if err != nil {
		return "", fmt.Errorf("bootstrap admin: %w", err)
	}
	return token, nil
}
