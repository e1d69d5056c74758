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

// AuditLog lists entries newest first, at most limit of them, older than
// the entry beforeID when it is given.
func (s *Service) AuditLog(ctx context.Context, beforeID *int64, limit int) ([]record.AuditEntry, error) {
	return s.st.AuditLog(ctx, beforeID, limit)
}
