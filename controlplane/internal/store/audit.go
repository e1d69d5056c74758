package store

import (
	"context"
	"time"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Audit appends one entry. Detail must be a JSON object.
func (s *Querier) Audit(ctx context.Context, e record.AuditEntry) error {
	if e.Detail == nil {
		e.Detail = []byte("{}")
	}
	_, err := s.q.InsertAudit(ctx, s.db, dbsqlc.InsertAuditParams{
		ActorID:        nullUUID(e.ActorID),
		ActorName:      e.ActorName,
		ActorRole:      string(e.ActorRole),
		OrganisationID: nullUUID(e.OrganisationID),
		Action:         e.Action,
		Outcome:        e.Outcome,
		Detail:         e.Detail,
	})
	return mapErr(err)
}

// AuditLog lists a page of entries, newest first: older than the entry
// numbered p.After.N when it is given.
func (s *Querier) AuditLog(ctx context.Context, f record.AuditFilter, p record.Page) ([]record.AuditEntry, error) {
	var before *int64
	if p.After != nil {
		before = &p.After.N
	}
	rows, err := s.q.ListAudit(ctx, s.db, dbsqlc.ListAuditParams{
		BeforeID: before, Action: f.Action, ActorID: nullUUID(f.ActorID), MaxRows: int32(p.Limit)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.AuditEntry, len(rows))
	for i, r := range rows {
		out[i] = record.AuditEntry{
			ID:             r.ID,
			At:             r.At,
			ActorID:        uuidPtr(r.ActorID),
			ActorName:      r.ActorName,
			ActorRole:      record.Role(r.ActorRole),
			OrganisationID: uuidPtr(r.OrganisationID),
			Action:         r.Action,
			Outcome:        r.Outcome,
			Detail:         r.Detail,
		}
	}
	return out, nil
}

// PruneAudit deletes at most max audit entries written longer ago than
// keep, oldest first, and returns how many it deleted.
func (s *Querier) PruneAudit(ctx context.Context, keep time.Duration, max int) (int, error) {
	n, err := s.q.PruneAudit(ctx, s.db, dbsqlc.PruneAuditParams{KeepSeconds: keep.Seconds(), MaxRows: int32(max)})
	return int(n), mapErr(err)
}
