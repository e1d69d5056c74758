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

// auditMutations checks and records the root fields. Arguments holding a
// NUL are refused on any of them (BAD_INPUT): PostgreSQL keeps no NUL in
// text or jsonb, so nothing given one could be kept as given. Mutations are
// recorded in the audit log: on success in the same transaction as the
// change (the domain package that makes it writes the entry the context
// carries, see package audit, so an audited change and its record commit
// or vanish together), on failure after the rollback, with the error code
// as the outcome. A mutation that succeeded without a transaction writing
// its entry gets it written after.
//
// Mutation arguments are recorded as given, env values aside, so no
// mutation may take a secret as an argument (secrets are only ever
// returned, once).
func auditMutations(t *tenancy.Service, log *slog.Logger) graphql.FieldMiddleware {
	return func(ctx context.Context, next graphql.Resolver) (any, error) {
		fc := graphql.GetFieldContext(ctx)
		if fc == nil || !isRoot(fc.Object) || len(fc.Args) == 0 && fc.Object != "Mutation" {
			return next(ctx)
		}
		args := jsonTree(fc.Args)
		refused := refuseNUL(args, fc.Field.Name)
		if fc.Object != "Mutation" {
			if refused != nil {
				return nil, refused
			}
			return next(ctx)
		}
		entry := auditEntry(ctx, fc.Field.Name, args)
		refuse := func(err error) (any, error) {
			entry.Outcome = errorCode(err)
			if aerr := t.Audit(context.WithoutCancel(ctx), entry); aerr != nil {
				log.ErrorContext(ctx, "audit log write failed", "action", entry.Action, "err", aerr)
			}
			return nil, err
		}
		if refused != nil {
			return refuse(refused)
		}
		done := entry
		done.Outcome = outcomeSuccess
		actx, pending := audit.Expect(ctx, done)
		res, err := next(actx)
		if err != nil {
			return refuse(err)
		}
		if !pending.Written() {
			// A domain change made outside audit.Change: a defect, but
			// the record is still owed.
			log.ErrorContext(ctx, UnauditedMutation, "action", done.Action)
			if aerr := t.Audit(context.WithoutCancel(ctx), done); aerr != nil {
				log.ErrorContext(ctx, "audit log write failed", "action", done.Action, "err", aerr)
			}
		}
		return res, nil
	}
}

// UnauditedMutation is the message logged for a mutation that succeeded
// without its audit entry in its own transaction: a defect (a domain
// change made outside audit.Change), which tests fail on.
const UnauditedMutation = "mutation not audited in its own transaction; audit entry written after it"

func isRoot(object string) bool {
	return object == "Mutation" || object == "Query" || object == "Subscription"
}

// auditEntry is the entry of the mutation action with args (as jsonTree
// gives them), env values redacted and NUL shown as U+2400 SYMBOL FOR NULL
// (the entry of a mutation refused for one must still be written).
func auditEntry(ctx context.Context, action string, args any) record.AuditEntry {
	e := record.AuditEntry{Action: action}
	if a, ok := principal(ctx); ok {
		id := a.ID
		e.ActorID, e.ActorName, e.ActorRole, e.OrganisationID = &id, a.Name, a.Role, a.OrganisationID
	}
	detail, err := json.Marshal(scrub(args, false))
	if err != nil {
		detail = []byte(`{"unrecordable_args":true}`)
	}
	e.Detail = detail
	return e
}

// jsonTree is v (a field's arguments: generated input structs) as a tree
// of JSON values, maps, slices and scalars.
func jsonTree(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{}
	}
	var tree any
	if json.Unmarshal(b, &tree) != nil {
		return map[string]any{}
	}
	return tree
}

// scrub is tree with every NUL in its strings and keys shown as U+2400,
// and the values of env entries ({"env": [{"name", "value"}]}, jobs carry
// their secrets there) replaced, wherever they stand: a job alone or in a
// batch. inEnv: tree is an env entry.
func scrub(tree any, inEnv bool) any {
	switch t := tree.(type) {
	case string:
		return strings.ReplaceAll(t, "\x00", "\u2400")
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			switch {
			case inEnv && k == "value":
				out[k] = "(redacted)"
			case k == "env":
				out[k] = scrubEnv(x)
			default:
				out[strings.ReplaceAll(k, "\x00", "\u2400")] = scrub(x, false)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = scrub(x, inEnv)
		}
		return out
	}
	return tree
}

func scrubEnv(env any) any {
	list, ok := env.([]any)
	if !ok {
		return scrub(env, false)
	}
	out := make([]any, len(list))
	for i, e := range list {
		out[i] = scrub(e, true)
	}
	return out
}

// refuseNUL is BAD_INPUT naming the first argument of field holding a NUL,
// or nil.
func refuseNUL(args any, field string) error {
	if path, ok := findNUL(args, field); ok {
		return badInputf("%s: NUL (U+0000) cannot be stored", path)
	}
	return nil
}

// findNUL is the path to the first string or key in v holding a NUL.
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
