package tenancy

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
)

// Admins lists a page of the admins inside scope (of one organisation,
// when org is given), oldest first.
func (s *Service) Admins(ctx context.Context, scope record.Scope, org *uuid.UUID, p record.Page) ([]record.Admin, error) {
	return s.st.Admins(ctx, scope, org, p)
}

// CountAdmins is how many admins Admins lists in all.
func (s *Service) CountAdmins(ctx context.Context, scope record.Scope, org *uuid.UUID) (int, error) {
	return s.st.CountAdminsIn(ctx, scope, org)
}

// TokensOfAdmins returns each admin's tokens, oldest first, for admins the
// caller has read through its scope (for dataloaders).
func (s *Service) TokensOfAdmins(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.AdminToken, error) {
	return s.st.TokensOfAdmins(ctx, ids)
}

// IssuedToken is a token just made for an admin: the only time the token
// is seen.
type IssuedToken struct {
	Token string
	Admin record.Admin
	Info  record.AdminToken
}

// IssueToken gives an admin one more token (a replacement for one that
// leaked, say), lasting ttl (nil: until revoked). An organisation member
// may issue tokens for itself only; an admin inside scope is for
// organisation and platform admins.
func (s *Service) IssueToken(ctx context.Context, me record.Admin, adminID uuid.UUID, ttl *time.Duration) (IssuedToken, error) {
	if ttl != nil && (*ttl < MinAdminTTL || *ttl > MaxAdminTTL) {
		return IssuedToken{}, record.Invalidf("ttlSeconds: between %d and %d", int(MinAdminTTL.Seconds()), int(MaxAdminTTL.Seconds()))
	}
	if !mayActFor(me, adminID) {
		return IssuedToken{}, record.ErrNotFound
	}
	token, digest := tokens.Admin.New()
	var expires *time.Time
	if ttl != nil {
		t := time.Now().Add(*ttl).UTC().Truncate(time.Microsecond)
		expires = &t
	}
	return audit.Do(ctx, s.st, func(tx *store.Tx) (IssuedToken, error) {
		a, info, err := tx.AddAdminToken(ctx, me.Scope(), adminID, digest, expires)
		if err == nil && a.Role.Rank() > me.Role.Rank() {
			return IssuedToken{}, record.ErrNotFound // above the caller: as if absent
		}
		return IssuedToken{Token: token, Admin: a, Info: info}, err
	})
}

// RevokeToken revokes an admin token: it stops authenticating at the next
// request on every replica, and every websocket it opened is closed. Who
// may: platform admins any token; organisation admins those of their
// organisation's admins; members their own. A token already revoked is
// record.ErrConflict.
func (s *Service) RevokeToken(ctx context.Context, me record.Admin, id uuid.UUID) (record.AdminToken, error) {
	return audit.Do(ctx, s.st, func(tx *store.Tx) (record.AdminToken, error) {
		t, owner, err := tx.LockAdminToken(ctx, me.Scope(), id)
		if err != nil {
			return record.AdminToken{}, err
		}
		if !mayActFor(me, owner.ID) || owner.Role.Rank() > me.Role.Rank() {
			return record.AdminToken{}, record.ErrNotFound
		}
		by := me.ID
		return tx.RevokeAdminToken(ctx, t.ID, &by)
	})
}

// mayActFor is whether me may manage the tokens of the admin id, as far as
// roles go (the scope does the rest): members only their own.
func mayActFor(me record.Admin, id uuid.UUID) bool {
	return me.Role.Rank() >= record.RoleOrgAdmin.Rank() || me.ID == id
}

// AdminsByID loads several admins at once (for dataloaders); ids outside
// scope are absent from the result.
func (s *Service) AdminsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Admin, error) {
	return s.st.AdminsByID(ctx, scope, ids)
}

// TokenWatch hears of admin tokens revoked on any replica.
type TokenWatch struct{ sub *store.Subscription }

// WatchTokens starts hearing of revoked admin tokens. Close it when done.
func (s *Service) WatchTokens() *TokenWatch {
	if s.listener == nil {
		return &TokenWatch{}
	}
	return &TokenWatch{sub: s.listener.Subscribe(store.ChannelAdminTokens)}
}

// Revoked delivers the id of each token revoked, or "" when revocations
// may have gone unheard (the listener reconnected): check again. Nil for
// a service without a listener, which never delivers.
func (w *TokenWatch) Revoked() <-chan string {
	if w.sub == nil {
		return nil
	}
	return w.sub.C
}

// Close stops the watch.
func (w *TokenWatch) Close() {
	if w.sub != nil {
		w.sub.Close()
	}
}
