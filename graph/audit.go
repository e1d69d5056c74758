package graph

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
)

// auditMutations records every root mutation field in the audit log: on
// success in the same transaction as the change (the domain package that
// makes it writes the entry the context carries, see package audit, so an
// audited change and its record commit or vanish together), on failure
// after the rollback, with the error code as the outcome. A mutation that
// succeeded without a transaction writing its entry gets it written after.
//
// Mutation arguments are recorded as given, so no mutation may take a
// secret as an argument (secrets are only ever returned, once).
func auditMutations(t *tenancy.Service, log *slog.Logger) graphql.FieldMiddleware {
	return func(ctx context.Context, next graphql.Resolver) (any, error) {
		fc := graphql.GetFieldContext(ctx)
		if fc == nil || fc.Object != "Mutation" {
			return next(ctx)
		}
		entry := auditEntry(ctx, fc)
		done := entry
		done.Outcome = outcomeSuccess
		actx, pending := audit.Expect(ctx, done)
		res, err := next(actx)
		if err != nil {
			entry.Outcome = errorCode(err)
			if aerr := t.Audit(context.WithoutCancel(ctx), entry); aerr != nil {
				log.ErrorContext(ctx, "audit log write failed", "action", entry.Action, "err", aerr)
			}
			return nil, err
		}
		if !pending.Written() {
			// A domain change made outside audit.Change: a defect, but
			// the record is still owed.
			log.ErrorContext(ctx, "mutation not audited in its own transaction; audit entry written after it", "action", done.Action)
			if aerr := t.Audit(context.WithoutCancel(ctx), done); aerr != nil {
				log.ErrorContext(ctx, "audit log write failed", "action", done.Action, "err", aerr)
			}
		}
		return res, nil
	}
}

func auditEntry(ctx context.Context, fc *graphql.FieldContext) record.AuditEntry {
	e := record.AuditEntry{Action: fc.Field.Name}
	if a, ok := principal(ctx); ok {
		id := a.ID
		e.ActorID, e.ActorName, e.ActorRole, e.OrganisationID = &id, a.Name, a.Role, a.OrganisationID
	}
	detail, err := json.Marshal(scrubNUL(redact(fc.Args)))
	if err != nil {
		detail = []byte(`{"unrecordable_args":true}`)
	}
	e.Detail = detail
	return e
}

// scrubNUL replaces NUL in the strings of v (a tree of JSON values) with
// U+2400 SYMBOL FOR NULL: jsonb stores no NUL, and the entry of a refused
// mutation whose arguments held one must still be written.
func scrubNUL(v any) any {
	switch t := v.(type) {
	case string:
		return strings.ReplaceAll(t, "\x00", "\u2400")
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[strings.ReplaceAll(k, "\x00", "\u2400")] = scrubNUL(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = scrubNUL(x)
		}
		return out
	}
	return v
}

// refuseNUL refuses, as BAD_INPUT, a field whose arguments hold a NUL
// anywhere (in a variable or a literal): PostgreSQL stores none in text or
// jsonb, so nothing given one could be kept as given.
func refuseNUL(ctx context.Context, next graphql.Resolver) (any, error) {
	fc := graphql.GetFieldContext(ctx)
	if fc != nil && len(fc.Args) > 0 {
		if path, ok := findNUL(redactNothing(fc.Args), fc.Field.Name); ok {
			return nil, badInputf("%s: NUL (U+0000) cannot be stored", path)
		}
	}
	return next(ctx)
}

// redactNothing is v as a tree of JSON values.
func redactNothing(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var m any
	if json.Unmarshal(b, &m) != nil {
		return v
	}
	return m
}

// findNUL is the path to the first string in v holding a NUL.
func findNUL(v any, path string) (string, bool) {
	switch t := v.(type) {
	case string:
		return path, strings.ContainsRune(t, 0)
	case map[string]any:
		for k, x := range t {
			if p, ok := findNUL(x, path+"."+k); ok || strings.ContainsRune(k, 0) {
				return p, true
			}
		}
	case []any:
		for i, x := range t {
			if p, ok := findNUL(x, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	}
	return "", false
}

// redact replaces the values of environment variables with a marker: jobs
// carry their secrets (API keys, passwords) in env, and the audit log is
// read by people who need not see them.
func redact(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = redact(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = redact(x)
		}
		return out
	default:
		// Arguments arrive as generated input structs: go through JSON to
		// see them as maps.
		b, err := json.Marshal(v)
		if err != nil {
			return v
		}
		var m any
		if json.Unmarshal(b, &m) != nil {
			return v
		}
		if obj, ok := m.(map[string]any); ok {
			if env, ok := obj["env"].([]any); ok {
				for _, e := range env {
					if kv, ok := e.(map[string]any); ok {
						kv["value"] = "(redacted)"
					}
				}
			}
			return obj
		}
		return m
	}
}
