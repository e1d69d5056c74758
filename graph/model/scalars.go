// Package model holds the GraphQL types gqlgen generates and the scalars we
// marshal ourselves. Domain objects bind directly to controlplane/record
// types (see gqlgen.yml), so there is no copy of them here.
package model

import (
	"io"
	"strconv"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/record"
)

// inputErrorf: a value the caller sent that a scalar cannot read is
// always the caller's mistake (BAD_INPUT), never ours.
func inputErrorf(format string, args ...any) error { return record.Invalidf(format, args...) }

// MarshalUUID writes an ID held as a UUID.
func MarshalUUID(id uuid.UUID) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		io.WriteString(w, strconv.Quote(id.String()))
	})
}

// UnmarshalUUID reads an ID that must be a UUID.
func UnmarshalUUID(v any) (uuid.UUID, error) {
	s, ok := v.(string)
	if !ok {
		return uuid.Nil, inputErrorf("an ID must be a string, got %T", v)
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, inputErrorf("%q is not a valid ID", s)
	}
	return id, nil
}

// MarshalInt64ID writes an ID held as a 64-bit integer (audit entries).
func MarshalInt64ID(id int64) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		io.WriteString(w, strconv.Quote(strconv.FormatInt(id, 10)))
	})
}

// UnmarshalInt64ID reads such an ID.
func UnmarshalInt64ID(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, inputErrorf("an ID must be a string, got %T", v)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, inputErrorf("%q is not a valid ID", s)
	}
	return id, nil
}
