package store

import (
	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/record"
)

// scopeOrg is a narrow scope's organisation as the queries take it (none
// for a wide or an empty scope).
func scopeOrg(s record.Scope) uuid.NullUUID {
	id, ok := s.Organisation()
	return uuid.NullUUID{UUID: id, Valid: ok}
}
