package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

// The lists operators page through, and the revocations they make from
// them. Each list is keyset-paged: a page starts after the sort key of the
// last item seen (record.Cursor), so page 1,000 costs what page 1 costs.

func adminTokenFromRow(r dbsqlc.AdminToken) record.AdminToken {
	return record.AdminToken{ID: r.ID, AdminID: r.AdminID, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		LastUsedAt: r.LastUsedAt, RevokedAt: r.RevokedAt, RevokedBy: uuidPtr(r.RevokedBy)}
}

// Admins lists a page of the admins inside scope (of one organisation,
// when org is given), oldest first.
func (s *Querier) Admins(ctx context.Context, scope record.Scope, org *uuid.UUID, p record.Page) ([]record.Admin, error) {
	arg := dbsqlc.ListAdminsParams{AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope), OrganisationID: nullUUID(org), MaxRows: int32(p.Limit)}
	if p.After != nil {
		arg.AfterAt, arg.AfterID = &p.After.At, uuid.NullUUID{UUID: p.After.ID, Valid: true}
	}
	rows, err := s.q.ListAdmins(ctx, s.db, arg)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.Admin, len(rows))
	for i, r := range rows {
		out[i] = adminFromRow(r)
	}
	return out, nil
}

// CountAdminsIn is how many admins Admins would list in all.
func (s *Querier) CountAdminsIn(ctx context.Context, scope record.Scope, org *uuid.UUID) (int, error) {
	n, err := s.q.CountAdminsInScope(ctx, s.db, dbsqlc.CountAdminsInScopeParams{AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope), OrganisationID: nullUUID(org)})
	return int(n), mapErr(err)
}

// Admin is one admin inside scope, or ErrNotFound.
func (s *Querier) Admin(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Admin, error) {
	row, err := s.q.GetAdmin(ctx, s.db, dbsqlc.GetAdminParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.Admin{}, mapErr(err)
	}
	return adminFromRow(row), nil
}

// TokensOfAdmins returns each admin's tokens, oldest first. The caller
// has read the admins through its scope.
func (s *Querier) TokensOfAdmins(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.AdminToken, error) {
	rows, err := s.q.TokensOfAdmins(ctx, s.db, ids)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID][]record.AdminToken, len(ids))
	for _, id := range ids {
		out[id] = []record.AdminToken{}
	}
	for _, r := range rows {
		out[r.AdminID] = append(out[r.AdminID], adminTokenFromRow(r))
	}
	return out, nil
}

// AddAdminToken gives an admin inside scope one more token.
func (s *Querier) AddAdminToken(ctx context.Context, scope record.Scope, adminID uuid.UUID, digest []byte, expires *time.Time) (record.Admin, record.AdminToken, error) {
	a, err := s.Admin(ctx, scope, adminID)
	if err != nil {
		return record.Admin{}, record.AdminToken{}, err
	}
	row, err := s.q.CreateAdminToken(ctx, s.db, dbsqlc.CreateAdminTokenParams{AdminID: adminID, TokenHash: digest, ExpiresAt: expires})
	if err != nil {
		return record.Admin{}, record.AdminToken{}, mapErr(err)
	}
	return a, adminTokenFromRow(row), nil
}

// LockAdminToken reads a token inside scope with its admin, locked until
// the transaction ends.
func (s *Tx) LockAdminToken(ctx context.Context, scope record.Scope, id uuid.UUID) (record.AdminToken, record.Admin, error) {
	row, err := s.q.GetAdminTokenForUpdate(ctx, s.db, dbsqlc.GetAdminTokenForUpdateParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.AdminToken{}, record.Admin{}, mapErr(err)
	}
	return adminTokenFromRow(row.AdminToken), adminFromRow(row.Admin), nil
}

// RevokeAdminToken revokes a token LockAdminToken locked; once committed,
// every replica hears it on ChannelAdminTokens.
func (s *Tx) RevokeAdminToken(ctx context.Context, id uuid.UUID, by *uuid.UUID) (record.AdminToken, error) {
	row, err := s.q.RevokeAdminToken(ctx, s.db, dbsqlc.RevokeAdminTokenParams{ID: id, RevokedBy: nullUUID(by)})
	if errors.Is(err, pgx.ErrNoRows) {
		return record.AdminToken{}, fmt.Errorf("%w: the token is revoked already", record.ErrConflict)
	}
	if err != nil {
		return record.AdminToken{}, mapErr(err)
	}
	s.notifyAfterCommit(ChannelAdminTokens, id.String())
	return adminTokenFromRow(row), nil
}

func enrolmentTokenFromRow(t dbsqlc.EnrolmentToken, org, runner uuid.NullUUID) record.EnrolmentToken {
	return record.EnrolmentToken{ID: t.ID, PoolID: t.PoolID, ExpiresAt: t.ExpiresAt, OrganisationID: uuidPtr(org),
		CreatedBy: uuidPtr(t.CreatedBy), CreatedAt: t.CreatedAt, UsedAt: t.UsedAt, RunnerID: uuidPtr(runner),
		RevokedAt: t.RevokedAt, RevokedBy: uuidPtr(t.RevokedBy)}
}

// EnrolmentTokens lists a page of the enrolment tokens inside scope that
// match f, newest first.
func (s *Querier) EnrolmentTokens(ctx context.Context, scope record.Scope, f record.EnrolmentTokenFilter, p record.Page) ([]record.EnrolmentToken, error) {
	arg := dbsqlc.ListEnrolmentTokensParams{AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope), PoolID: nullUUID(f.PoolID), MaxRows: int32(p.Limit)}
	if f.State != nil {
		st := string(*f.State)
		arg.State = &st
	}
	if p.After != nil {
		arg.BeforeAt, arg.BeforeID = &p.After.At, uuid.NullUUID{UUID: p.After.ID, Valid: true}
	}
	rows, err := s.q.ListEnrolmentTokens(ctx, s.db, arg)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.EnrolmentToken, len(rows))
	for i, r := range rows {
		out[i] = enrolmentTokenFromRow(r.EnrolmentToken, r.OrganisationID, r.RunnerID)
	}
	return out, nil
}

// LockEnrolmentToken reads an enrolment token inside scope, locked until
// the transaction ends: an enrolment racing its revocation waits.
func (s *Tx) LockEnrolmentToken(ctx context.Context, scope record.Scope, id uuid.UUID) (record.EnrolmentToken, error) {
	row, err := s.q.GetEnrolmentTokenForUpdate(ctx, s.db, dbsqlc.GetEnrolmentTokenForUpdateParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.EnrolmentToken{}, mapErr(err)
	}
	return enrolmentTokenFromRow(row.EnrolmentToken, row.OrganisationID, row.RunnerID), nil
}

// RevokeEnrolmentToken withdraws an unused token LockEnrolmentToken
// locked; a used or revoked one is ErrConflict.
func (s *Tx) RevokeEnrolmentToken(ctx context.Context, t record.EnrolmentToken, by *uuid.UUID) (record.EnrolmentToken, error) {
	row, err := s.q.RevokeEnrolmentToken(ctx, s.db, dbsqlc.RevokeEnrolmentTokenParams{ID: t.ID, RevokedBy: nullUUID(by)})
	if errors.Is(err, pgx.ErrNoRows) {
		return record.EnrolmentToken{}, fmt.Errorf("%w: the token is used or revoked already", record.ErrConflict)
	}
	if err != nil {
		return record.EnrolmentToken{}, mapErr(err)
	}
	return enrolmentTokenFromRow(row, nullUUID(t.OrganisationID), nullUUID(t.RunnerID)), nil
}

// HoldsOfRunners returns each runner's holds, newest first: those in
// force, or all of them with includeEnded. The caller has read the runners
// through its scope.
func (s *Querier) HoldsOfRunners(ctx context.Context, ids []uuid.UUID, includeEnded bool) (map[uuid.UUID][]record.Hold, error) {
	rows, err := s.q.HoldsOfRunners(ctx, s.db, dbsqlc.HoldsOfRunnersParams{RunnerIds: ids, IncludeEnded: includeEnded})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID][]record.Hold, len(ids))
	for _, id := range ids {
		out[id] = []record.Hold{}
	}
	for _, r := range rows {
		out[r.RunnerID] = append(out[r.RunnerID], holdFromRow(r))
	}
	return out, nil
}

// HoldsOfPools returns the holds in force on each pool's runners, newest
// first. The caller has read the pools through its scope.
func (s *Querier) HoldsOfPools(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.Hold, error) {
	rows, err := s.q.HoldsOfPools(ctx, s.db, ids)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID][]record.Hold, len(ids))
	for _, id := range ids {
		out[id] = []record.Hold{}
	}
	for _, r := range rows {
		out[r.PoolID] = append(out[r.PoolID], holdFromRow(r.GpuHold))
	}
	return out, nil
}

// runBefore is the keyset of a runs page.
func runBefore(p record.Page) (*time.Time, uuid.NullUUID, *int32) {
	if p.After == nil {
		return nil, uuid.NullUUID{}, nil
	}
	n := int32(p.After.N)
	return &p.After.At, uuid.NullUUID{UUID: p.After.ID, Valid: true}, &n
}

// RunsOfRunner lists a page of a runner's ended attempts, newest first.
// The caller has read the runner through its scope.
func (s *Querier) RunsOfRunner(ctx context.Context, runnerID uuid.UUID, p record.Page) ([]record.JobRun, error) {
	at, job, attempt := runBefore(p)
	rows, err := s.q.RunsOfRunner(ctx, s.db, dbsqlc.RunsOfRunnerParams{RunnerID: runnerID, BeforeAt: at, BeforeJob: job, BeforeAttempt: attempt, MaxRows: int32(p.Limit)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.JobRun, len(rows))
	for i, r := range rows {
		out[i] = jobRunFromRow(r)
	}
	return out, nil
}

// Runs lists a page of the ended attempts of the jobs inside scope that
// match f, newest first.
func (s *Querier) Runs(ctx context.Context, scope record.Scope, f record.RunFilter, p record.Page) ([]record.JobRun, error) {
	at, job, attempt := runBefore(p)
	rows, err := s.q.RunsInScope(ctx, s.db, dbsqlc.RunsInScopeParams{AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope),
		OrganisationID: nullUUID(f.OrganisationID), PoolID: nullUUID(f.PoolID),
		BeforeAt: at, BeforeJob: job, BeforeAttempt: attempt, MaxRows: int32(p.Limit)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.JobRun, len(rows))
	for i, r := range rows {
		out[i] = jobRunFromRow(r.JobRun)
	}
	return out, nil
}

// AdminsByID loads several admins at once (for dataloaders); ids outside
// scope are absent from the result.
func (s *Querier) AdminsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Admin, error) {
	rows, err := s.q.AdminsByID(ctx, s.db, dbsqlc.AdminsByIDParams{Ids: ids, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.Admin, len(rows))
	for _, r := range rows {
		out[r.ID] = adminFromRow(r)
	}
	return out, nil
}

// JobsByID loads several jobs at once (for dataloaders); ids outside scope
// are absent from the result.
func (s *Querier) JobsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Job, error) {
	rows, err := s.q.JobsByID(ctx, s.db, dbsqlc.JobsByIDParams{Ids: ids, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.Job, len(rows))
	for _, r := range rows {
		out[r.ID] = jobFromRow(r)
	}
	return out, nil
}
