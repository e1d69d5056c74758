package tenancy

import (
	"context"

	"github.com/runmesh/runmesh/controlplane/record"
)

// Audited runs change in one transaction with its audit entry e, written
// once change has succeeded: an audited change and its record commit or
// vanish together. Every call change makes with the context it receives
// joins the transaction, whichever domain package it goes through. A
// failed change is rolled back and e not written: record it with Audit.
func (s *Service) Audited(ctx context.Context, e record.AuditEntry, change func(ctx context.Context) error) error {
	return s.st.WithTx(ctx, func(ctx context.Context) error {
		if err := change(ctx); err != nil {
			return err
		}
		return s.st.Audit(ctx, e)
	})
}

// Audit appends one entry (its Detail a JSON object; nil: {}).
func (s *Service) Audit(ctx context.Context, e record.AuditEntry) error {
	return s.st.Audit(ctx, e)
}

// AuditLog lists entries newest first, at most limit of them, older than
// the entry beforeID when it is given.
func (s *Service) AuditLog(ctx context.Context, beforeID *int64, limit int) ([]record.AuditEntry, error) {
	return s.st.AuditLog(ctx, beforeID, limit)
}
