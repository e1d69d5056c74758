package graph

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/99designs/gqlgen/graphql"

	"github.com/runmesh/runmesh/controlplane/store"
)

// auditMutations runs every root mutation field in a transaction and
// records it in the audit log: on success in the same transaction as the
// change (an audited change and its record commit or vanish together), on
// failure after the rollback, with the error code as the outcome.
//
// Mutation arguments are recorded as given, so no mutation may take a
// secret as an argument (secrets are only ever returned, once).
func auditMutations(s *store.Store, log *slog.Logger) graphql.FieldMiddleware {
	return func(ctx context.Context, next graphql.Resolver) (any, error) {
		fc := graphql.GetFieldContext(ctx)
		if fc == nil || fc.Object != "Mutation" {
			return next(ctx)
		}
		entry := auditEntry(ctx, fc)
		var res any
		err := s.WithTx(ctx, func(ctx context.Context) error {
			var err error
			res, err = next(ctx)
			if err != nil {
				return err
			}
			entry.Outcome = outcomeSuccess
			return s.Audit(ctx, entry)
		})
		if err != nil {
			entry.Outcome = errorCode(err)
			if aerr := s.Audit(context.WithoutCancel(ctx), entry); aerr != nil {
				log.ErrorContext(ctx, "audit log write failed", "action", entry.Action, "err", aerr)
			}
			return nil, err
		}
		return res, nil
	}
}

func auditEntry(ctx context.Context, fc *graphql.FieldContext) store.AuditEntry {
	e := store.AuditEntry{Action: fc.Field.Name}
	if a, ok := principal(ctx); ok {
		id := a.ID
		e.ActorID, e.ActorName, e.ActorRole, e.OrganisationID = &id, a.Name, a.Role, a.OrganisationID
	}
	detail, err := json.Marshal(fc.Args)
	if err != nil {
		detail = []byte(`{"unrecordable_args":true}`)
	}
	e.Detail = detail
	return e
}
