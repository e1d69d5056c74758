package tenancy

import (
	"context"

	"github.com/runmesh/runmesh/controlplane/record"
)

// Audit appends one entry (its Detail a JSON object; nil: {}): for what
// is recorded apart from a change, such as a refused one (a change and its
// entry go together through package audit).
func (s *Service) Audit(ctx context.Context, e record.AuditEntry) error {
	return s.st.Audit(ctx, e)
}

// AuditLog lists a page of entries, newest first.
func (s *Service) AuditLog(ctx context.Context, f record.AuditFilter, p record.Page) ([]record.AuditEntry, error) {
	return s.st.AuditLog(ctx, f, p)
}
